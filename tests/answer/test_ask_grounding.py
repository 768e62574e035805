"""The grounding checker of ``kbpack ask`` on hand-made sentence/passage pairs (no model)."""

from __future__ import annotations

import pytest

from kbpack.answer.extractive import extract
from kbpack.answer.grounding import (
    check_answer,
    citations,
    identifiers,
    numbers,
    split_sentences,
)

COOKIES = (
    "Each line that specifies a single cookie consists of seven text fields separated with "
    "TAB characters. A valid line must end with a newline character."
)
CURL = "Since 7.47.0, the curl tool enables HTTP/2 by default for HTTPS connections."
SQLITE = (
    "An SQLite database connection defaults to journal_mode=DELETE. Call "
    "sqlite3.connect(path, check_same_thread=False) to share it; see --readonly in /etc/db.conf."
)
PASSAGES = [COOKIES, CURL, SQLITE]


def one(sentence: str) -> tuple[bool, str]:
    g = check_answer(sentence, PASSAGES)
    assert len(g.sentences) == 1, g.sentences
    return g.sentences[0].supported, g.sentences[0].why


@pytest.mark.parametrize(
    "sentence",
    [
        "Each cookie line consists of seven text fields separated with TAB characters [1].",
        "Each cookie line has 7 fields, separated by TAB characters [1].",  # "seven" holds 7
        "Since 7.47.0 the curl tool enables HTTP/2 by default for HTTPS [2].",
        "A connection defaults to journal_mode=DELETE [3].",
        "Pass check_same_thread=False to sqlite3.connect to share the connection [3].",
        "The curl tool enables HTTP/2 by default [1][2].",  # one of the cited passages holds it
    ],
)
def test_supported(sentence: str) -> None:
    assert one(sentence) == (True, "supported")


@pytest.mark.parametrize(
    ("sentence", "why"),
    [
        ("Each cookie line consists of seven text fields.", "no citation"),
        ("Cookies are stored encrypted in the browser's keychain [1].", "content words"),
        (
            "Since 7.46.0 the curl tool enables HTTP/2 by default [2].",
            "number 7.46.0 is not in [2]",
        ),
        ("Each cookie line consists of 8 text fields separated by TAB [1].", "number 8"),
        ("A connection defaults to journal_mode=WAL via set_journal_mode [3].", "set_journal_mode"),
        ("Use the CookieJar class to read each line of seven fields [1].", "CookieJar is not in"),
        ("Start it with --http3 to enable HTTP/2 by default [2].", "--http3 is not in [2]"),
        ("Read the settings from /etc/curlrc for HTTPS connections [2].", "/etc/curlrc"),
        ("Since 7.47.0 curl enables HTTP/2 by default [1].", "number 7.47.0 is not in [1]"),
        ("Curl enables HTTP/2 by default [4].", "cites [4], not one of the 3 sources"),
    ],
)
def test_unsupported(sentence: str, why: str) -> None:
    supported, got = one(sentence)
    assert not supported and why in got, got


def test_wrong_number_and_invented_identifier_are_flagged_only_when_in_no_passage() -> None:
    g = check_answer(
        "Since 7.47.0 curl enables HTTP/2 by default [1]. It reads CURL_HOME_DIR with 9 retries [2].",
        PASSAGES,
    )
    assert [s.supported for s in g.sentences] == [False, False]
    # 7.47.0 is in [2] (the wrong passage was cited): unsupported, but not invented
    assert {(f["text"], f["kind"]) for f in g.flagged} == {
        ("CURL_HOME_DIR", "identifier"),
        ("9", "number"),
    }


def test_sentences_keep_their_citations() -> None:
    text = (
        "Curl enables HTTP/2 by default, e.g. for HTTPS. [2] The file has 7.5 fields [1].\n"
        "- First item [1]\n2. Second item [3]\n[2]"
    )
    assert split_sentences(text) == [
        "Curl enables HTTP/2 by default, e.g. for HTTPS. [2]",
        "The file has 7.5 fields [1].",
        "First item [1]",
        "Second item [3] [2]",
    ]
    assert citations("a [1, 3] b [source 2] c [1]") == [1, 3, 2]


def test_numbers_and_identifiers() -> None:
    s = "Use os.path.join, ZIP_DEFLATED, getItem, -k and ./run.sh on 1,000 files in 2 s [4]."
    assert numbers(s) == ["1000", "2"]  # the citation is not a number of the sentence
    assert identifiers(s) == ["os.path.join", "ZIP_DEFLATED", "getItem", "-k", "./run.sh"]
    assert identifiers("Rotate the logs, i.e. weekly; a well-known rule.") == []


def test_extractive_quotes_the_best_sentence_with_its_source() -> None:
    quotes = extract("How many fields does a cookie line have?", [CURL, COOKIES])
    assert quotes[0].source == 2 and quotes[0].text.startswith("Each line that specifies")
    assert quotes[0].cited.endswith("[2]")
    # nothing shared with the question: the first passage's first sentence, still cited
    assert [(q.source, q.text) for q in extract("orchid repotting", [CURL])] == [(1, CURL)]


def test_a_quoted_sentence_checks_as_supported() -> None:
    for q in extract("How many fields does a cookie line have?", PASSAGES):
        assert check_answer(q.cited, PASSAGES).sentences[0].supported
