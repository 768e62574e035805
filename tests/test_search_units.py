"""Fusion, locators and the code-like rule, against hand-computed values."""

from __future__ import annotations

import pytest

from kbpack.search import code_like_terms, locator, rrf


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
