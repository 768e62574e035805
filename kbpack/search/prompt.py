"""``kbpack query --format prompt``: the best sources packed under a token budget into a prompt
for a local LLM. The citation table is built beside the prompt, never inside it: citations are
attached by the tool, not written by a model."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kbpack.schema import fields_of

PROMPT_INSTRUCTIONS = (
    "Answer the question using only the numbered sources below. Cite the sources you use as [n]. "
    "If the sources do not contain the answer, say that they do not; do not guess."
)


@dataclass
class Prompt:
    text: str
    tokens: int  # the sources' tokens, as ``count`` counted them
    budget_tokens: int
    citations: list[dict[str, Any]] = field(default_factory=list)

    @property
    def answered(self) -> bool:
        return bool(self.citations)

    def as_dict(self) -> dict[str, Any]:
        """The JSON of ``kbpack query --format prompt --json`` (spec/JSON.md)."""
        return {
            "prompt": self.text,
            **fields_of(self, "tokens", "budget_tokens", "answered", "citations"),
        }


def citation_of(n: int, r: Any) -> dict[str, Any]:
    """Source ``[n]``, the result ``r``, as a citation of the JSON (spec/JSON.md): where it is,
    never its text. The prompt's and ``kbpack ask``'s citation tables are made of these."""
    return {
        "n": n,
        **({"pack": r.pack} if r.pack else {}),
        "doc": r.doc,
        "section": r.section,
        "locator": r.locator,
        "page": r.page,
        "from": r.start,
        "to": r.end,
    }


def rough_tokens(text: str) -> int:
    """A token count without the model: about four characters a token."""
    return len(text) // 4 + 1


def build_prompt(resp: Any, budget_tokens: int, count: Callable[[str], int]) -> Prompt:
    """The results of ``resp`` (a SearchResponse), best first, each kept if it still fits
    ``budget_tokens`` as ``count`` counts tokens (a result that does not fit is skipped and a
    smaller one after it may still fit)."""
    used = 0
    sources: list[tuple[Any, str]] = []
    for r in resp.results:
        block = f"[{len(sources) + 1}] {r.doc} — {r.section or r.title}\n{r.content}\n"
        cost = count(block)
        if used + cost > budget_tokens:
            continue
        used += cost
        sources.append((r, block))
    text = "\n".join(
        [
            PROMPT_INSTRUCTIONS,
            "",
            "Sources:",
            *(b for _, b in sources),
            f"Question: {resp.query}",
            "Answer:",
        ]
    )
    citations = [citation_of(i + 1, r) for i, (r, _) in enumerate(sources)]
    return Prompt(text, used, budget_tokens, citations)
