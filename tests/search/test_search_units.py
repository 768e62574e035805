"""Fusion, locators and the code-like rule, against hand-computed values."""

from __future__ import annotations

import importlib.util

import pytest

from kbpack.search.searcher import code_like_terms, foreign_query, locator
from tests.paths import REPO_ROOT

# rrf is the rule the score fusion replaced: bench/fusion.py's peer, kept in bench/peers.py
_spec = importlib.util.spec_from_file_location("bench_peers", REPO_ROOT / "bench" / "peers.py")
assert _spec is not None and _spec.loader is not None
_rrf_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_rrf_module)
rrf = _rrf_module.rrf


def test_rrf_matches_hand_computed_example() -> None:
    # dense: 7, 3, 9   bm25: 3, 5
    # 3: 1/(60+2) + 1/(60+1) = 0.016129 + 0.016393 = 0.032522
    # 7: 1/61 = 0.016393; 5: 1/62 = 0.016129; 9: 1/63 = 0.015873
    fused = rrf([[7, 3, 9], [3, 5]], [1.0, 1.0])
    assert [c for c, _ in fused] == [3, 7, 5, 9]
    assert fused[0][1] == pytest.approx(1 / 62 + 1 / 61)
    assert fused[1][1] == pytest.approx(1 / 61)


def test_rrf_weights_scale_a_list() -> None:
    # with the lexical list at weight 0.5, 5 (lexical rank 2) drops below 9 (dense rank 3)
    fused = dict(rrf([[7, 3, 9], [3, 5]], [1.0, 0.5]))
    assert fused[5] == pytest.approx(0.5 / 62)
    assert fused[9] > fused[5]


def test_rrf_ties_break_by_chunk_id() -> None:
    assert [c for c, _ in rrf([[4], [2]], [1.0, 1.0])] == [2, 4]


def test_locators() -> None:
    assert locator("guide.md", 10, 42, None) == "guide.md#char=10,42"
    assert locator("manual.pdf", 100, 180, 3) == "manual.pdf#page=3&char=100,180"


@pytest.mark.parametrize(
    ("query", "codes"),
    [
        ("what does check_same_thread do", ["check_same_thread"]),
        ("ZIP_DEFLATED compression", ["ZIP_DEFLATED"]),
        ("run python -X importtime", ["-X"]),
        ("strftime %z offset", ["%z"]),
        ("deploy to EU-WEST-1", ["EU-WEST-1"]),
        ("error 0x80070005 on start", ["0x80070005"]),
        ("the process got SIGKILL", ["SIGKILL"]),
        ("how do I rotate the logs?", []),
        ("does PostgreSQL or GitHub do this", []),
        ("NULL handling", ["NULL"]),
    ],
)
def test_code_like_terms(query: str, codes: list[str]) -> None:
    assert code_like_terms(query) == codes


def test_only_a_rare_identifier_opens_the_refusal_gate(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """An acronym found in most chunks (JSON here) is no evidence of an answer; SIGKILL is."""
    import kbpack
    from tests.packs import markdown_doc, write_pack

    docs = [
        markdown_doc(f"d{i}.md", f"# Doc {i}\n\nThe API returns JSON for request {i}.\n")
        for i in range(12)
    ]
    docs.append(markdown_doc("k.md", "# Kill\n\nThe process got SIGKILL from the kernel.\n"))
    out = tmp_path / "g.kbpack"
    write_pack(out, docs)
    with kbpack.open(out, load_model=False) as p:
        assert p.searcher.gate_terms("does it return JSON") == []
        assert p.searcher.gate_terms("why SIGKILL") == ["SIGKILL"]
        assert p.searcher.gate_terms("SIGKILL and JSON") == ["SIGKILL", "JSON"]
        assert p.searcher.gate_terms("how do I rotate logs") == []


def test_identifier_gate_needs_the_identifier_to_carry_the_question() -> None:
    """A chunk holding the rare code opens the gate only when the content words it holds carry
    at least half of the query's IDF weight: 2018 alone is not the subject of "who won the
    football world cup in 2018"."""
    from kbpack.search.searcher import IdentifierGate

    world_cup = IdentifierGate(
        codes=("2018",),
        weights=(("won", 3.0), ("football", 5.0), ("world", 2.0), ("cup", 5.0), ("2018", 4.0)),
    )
    assert not world_cup.opens("Version 1.0.0 was released in 2018 with many fixes.")
    assert world_cup.opens("In 2018 France won the football world cup.")
    busy = IdentifierGate(
        codes=("SQLITE_BUSY",),
        weights=(("sqlite_busy", 6.0), ("sqlite", 1.0), ("busy", 2.0), ("mean", 1.5)),
    )
    assert busy.opens("A write attempt fails with SQLITE_BUSY when another connection writes.")
    assert not busy.opens("The database is busy.")  # the code itself is missing
    assert not busy.opens("SQLITE_BUSYNESS is not a code")  # whole tokens only


def test_identifier_gate_turns_away_early_exactly_as_the_tokenizer_would() -> None:
    """``opens`` first looks for each code token in the normalised text (a cheap filter, exact
    because every token is a substring of it): the same answers as comparing token sets alone,
    through case folding, compatibility forms, joiners, sigils, CJK and 64-character cuts."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from kbpack.search.gating import EVIDENCE_SHARE
    from kbpack.search.searcher import IdentifierGate
    from kbpack.text.analyze import tokenize

    def by_tokens(gate: IdentifierGate, content: str) -> bool:  # the rule, written plainly
        tokens = set(tokenize(content))
        if not all(set(tokenize(code)) <= tokens for code in gate.codes):
            return False
        total = sum(w for _, w in gate.weights)
        return sum(w for t, w in gate.weights if t in tokens) >= EVIDENCE_SHARE * total

    parts = [
        "E-102",
        "e_102",
        "Ｅ－１０２",
        "STRASSE",
        "straße",
        "--strict",
        "-x",
        "$HOME",
        "東京都",
        "İstanbul",
        "ﬁle",
        "x" * 70,
        "os.path.join",
        " ",
        ".",
        "\n",
        "102",
    ]
    texts = st.lists(st.sampled_from(parts), max_size=8).map(" ".join)
    texts = texts | st.text(max_size=40)

    @settings(max_examples=400, deadline=None)
    @given(codes=st.lists(st.sampled_from(parts[:13]), min_size=1, max_size=2), content=texts)
    def check(codes: list[str], content: str) -> None:
        weights = tuple((t, 1.0) for code in codes for t in tokenize(code)[:1])
        gate = IdentifierGate(codes=tuple(codes), weights=weights)
        assert gate.opens(content) == by_tokens(gate, content)

    check()


def test_content_terms_leave_stopwords_out() -> None:
    from kbpack.search.searcher import content_terms

    assert content_terms("How do I rotate the logs?") == ["rotate", "logs"]
    assert content_terms("what does NASA stand for") == ["nasa", "stand"]
    assert content_terms("Come si prepara il risotto?") == ["prepara", "risotto"]
    assert content_terms("how is it the") == []


def test_bm25_mode_needs_a_shared_content_word(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """In bm25 mode a chunk sharing only "how" and "the" with the question is no answer."""
    import kbpack
    from tests.packs import markdown_doc, write_pack

    docs = [
        markdown_doc("a.md", "# Logs\n\nHow the logs are rotated: by size, every night.\n"),
        markdown_doc("b.md", "# Tea\n\nHow to brew the tea: boil the water first.\n"),
    ]
    out = tmp_path / "s.kbpack"
    write_pack(out, docs)
    with kbpack.open(out, load_model=False) as p:
        assert not p.search("how do I fix the printer", mode="bm25").answered
        resp = p.search("how are the logs rotated", mode="bm25")
        assert resp.answered and [r.doc for r in resp.results] == ["a.md"]
        with pytest.raises(ValueError, match="max_distance"):
            p.search("logs", max_distance=float("nan"))
        with pytest.raises(ValueError, match="max_distance"):
            p.search("logs", max_distance=-0.1)


def test_copies_collapse_into_one_result_and_headings_are_no_answer(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The same manual shipped twice (here under two names, one with other spacing and case)
    fills one result that lists the other place; a chunk that is only its heading is skipped."""
    import kbpack
    from tests.packs import markdown_doc, write_pack

    text = "# Orphaning\n\nTo orphan a package, file a bug against the wnpp pseudo-package.\n"
    copy = "# Orphaning\n\nTo  orphan a PACKAGE, file a bug against the wnpp pseudo-package!\n"
    docs = [
        markdown_doc("guide.md", text),
        markdown_doc("guide-copy.md", copy),
        markdown_doc("other.md", "# Adopting\n\nTo adopt an orphaned package, retitle the bug.\n"),
        markdown_doc("heads.md", "# Policy\n\n## Orphaning a package\n\n-----------\n"),
    ]
    out = tmp_path / "d.kbpack"
    write_pack(out, docs)
    with kbpack.open(out, load_model=False) as p:
        contents = [c for _, c in p.iter_chunk_contents()]
        assert any(c.strip("-\n ") == "" or "Orphaning a package" in c for c in contents)
        resp = p.search("orphaning a package", k=5, mode="bm25")
        docs_returned = [r.doc for r in resp.results]
        assert docs_returned.count("guide.md") + docs_returned.count("guide-copy.md") == 1
        first = next(r for r in resp.results if r.doc.startswith("guide"))
        other = "guide-copy.md" if first.doc == "guide.md" else "guide.md"
        assert len(first.also) == 1 and first.also[0].startswith(f"{other}#char=")
        assert first.as_dict()["also"] == first.also
        assert "heads.md" not in docs_returned  # its only chunk is a heading and a rule
        assert "other.md" in docs_returned


@pytest.mark.parametrize(
    ("query", "foreign"),
    [
        ("Come si prepara il risotto alla milanese?", True),
        ("Qual è l'orario di apertura dell'ufficio postale?", True),
        ("BM25 e il dense retriever falliscono sulle stesse query?", True),
        ("What does CPU stand for?", False),
        ("Is the -wal file in the same directory as the database?", False),
        ("SQLITE_BUSY", False),  # a bare identifier holds no function word of either language
        ("graph layout", False),
        ("ls -l", False),  # "-l" tokenizes to "l" too: one letter is no Italian
    ],
)
def test_foreign_query_is_italian_function_words_and_no_english_one(
    query: str, foreign: bool
) -> None:
    assert foreign_query(query) is foreign
