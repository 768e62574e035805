"""The "names known by their capital" candidate for words the pack never mentions (issue 32;
off in search, measured in docs/quality.md with bench/quality_names.py)."""

from __future__ import annotations

import pytest

from kbpack.search.absent import absent_words, capitalised_names


def nothing_in_pack(word: str) -> bool:
    return False


@pytest.mark.parametrize(
    ("query", "names"),
    [
        # a capital inside the sentence marks a name, whether the word is common or not
        ("How do I make Caddy reverse proxy to my app?", ["Caddy"]),
        ("Install a package from the edge repository on Alpine", ["Alpine"]),
        ("Can I export a Postman collection for our CI job?", ["Postman"]),
        # the first word of a sentence is capitalised anyway
        ("Cobra or plain flags? Homebrew asks for a formula", []),
        ("Mercurial history: Subversion too", []),
        # acronyms and their plurals are not names
        ("On our office PCs the CPU fan and the URLs are fine", []),
        # Italian writes names the same way
        ("Chi ha scritto la Divina Commedia?", ["Divina", "Commedia"]),
        # words with digits or joiners are the identifier gate's business
        ("Is Buck2 like Select-String in spirit?", []),
    ],
)
def test_capitalised_names(query: str, names: list[str]) -> None:
    assert capitalised_names(query) == names


def test_off_by_default_a_common_word_that_is_a_name_passes() -> None:
    query = "How do I add a persistent flag to the root command in Cobra?"
    # the shipped rule: only words rare in the language; "Cobra" (Zipf 3.5) is not one
    assert absent_words(query, lambda w: w != "Cobra") == []


def test_with_names_by_case_a_capitalised_word_the_pack_lacks_counts() -> None:
    lacks = {"Cobra", "Caddy", "zorblax"}

    def in_pack(word: str) -> bool:
        return word not in lacks

    query = "In Cobra, how do I add a flag like Caddy does with zorblax?"
    assert absent_words(query, in_pack, names_by_case=True) == ["Cobra", "Caddy", "zorblax"]
    assert absent_words(query, in_pack) == ["zorblax"]  # the shipped rule


def test_names_the_pack_holds_and_user_identifiers_still_do_not_count() -> None:
    # the pack mentions Debian; MaxRetries is CamelCase no list knows: the user's own setting
    query = "Why does Debian ignore MaxRetries in our config?"
    assert absent_words(query, lambda w: w != "MaxRetries", names_by_case=True) == []
