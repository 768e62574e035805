"""``ask``: retrieve as ``query`` does, number the passages that fit the model's context, let
the model answer citing them, check every sentence, and fall back to quoting the pack when no
sentence holds up. A refused retrieval stops before any model is loaded."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbpack.answer.extractive import extract
from kbpack.answer.generate import DEFAULT_CONTEXT, ChatModel, load_chat_model
from kbpack.answer.grounding import SentenceCheck, check_answer, citations
from kbpack.schema import fields_of
from kbpack.search.prompt import citation_of

INSTRUCTIONS = (
    "Answer the question using only the numbered sources below. After every sentence, write "
    "the number of the source it comes from in square brackets, like [1]. Use the words of the "
    "source. Keep the answer short: one to three sentences. If the sources do not contain the "
    'answer, write "The sources do not say." and nothing else.'
)
MARGIN_TOKENS = 32  # the chat template's own tokens around the prompt
DEFAULT_MAX_TOKENS = 128  # one to three sentences
REFUSED = "Not in this pack: no passage passes the refusal threshold for this question."


@dataclass
class Answer:
    question: str
    answer: str  # what is shown: the model's text, or the quotes of the fallback
    sentences: list[SentenceCheck]
    citations: list[dict[str, Any]]  # the numbered sources the answer may cite
    flagged: list[dict[str, Any]] = field(default_factory=list)
    fallback: bool = False  # the answer is quoted from the pack (no sentence was supported)
    refused: bool = False  # retrieval refused: nothing was generated
    model: dict[str, Any] | None = None  # {name, sha256}: None when no model ran
    timings: dict[str, Any] = field(default_factory=dict)
    draft: str | None = None  # the model's text when it was replaced by the fallback
    draft_sentences: list[SentenceCheck] = field(default_factory=list)  # its checks
    nearest: list[dict[str, Any]] = field(default_factory=list)  # refused, on request only
    notes: list[str] = field(default_factory=list)

    @property
    def supported(self) -> int:
        return sum(s.supported for s in self.sentences)

    def as_dict(self) -> dict[str, Any]:
        """The JSON of ``kbpack ask --json`` (spec/JSON.md)."""
        return {
            **fields_of(self, "question", "answer", "refused", "fallback"),
            "sentences": [s.as_dict() for s in self.sentences],
            **fields_of(self, "citations", "flagged", "model", "timings", "draft"),
            "draft_sentences": [s.as_dict() for s in self.draft_sentences],
            **fields_of(self, "nearest", "notes"),
        }


def source_block(n: int, r: Any) -> str:
    return f"[{n}] {r.doc} — {r.section or r.title}\n{r.content.strip()}\n"


def fit_sources(results: Sequence[Any], budget: int, count: Callable[[str], int]) -> list[Any]:
    """The results, best first, that fit ``budget`` tokens together (one that does not fit is
    skipped and a smaller one after it may still fit), as ``query --format prompt`` packs them."""
    kept: list[Any] = []
    used = 0
    for r in results:
        cost = count(source_block(len(kept) + 1, r))
        if used + cost <= budget:
            kept.append(r)
            used += cost
    return kept


def build_prompt(question: str, sources: Sequence[Any]) -> str:
    blocks = [source_block(i, r) for i, r in enumerate(sources, 1)]
    return "\n".join([INSTRUCTIONS, "", "Sources:", *blocks, f"Question: {question}"])


def ask(
    pack: Any,
    question: str,
    llm: ChatModel | Path | None,
    *,
    k: int = 5,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    temperature: float = 0.0,
    threads: int | None = None,
    context: int = DEFAULT_CONTEXT,
    show_passages: bool = False,
    on_token: Callable[[str], None] | None = None,
    **search: Any,
) -> Answer:
    """Answer ``question`` from ``pack`` (an open Pack or federated packs). ``llm``: a loaded
    model, a GGUF path (loaded only if retrieval answers), or None for the extractive answer
    alone. ``context``: tokens for the instructions, sources and question (the prompt the
    model reads before its first token, which takes time in proportion to it); ``max_tokens``
    come on top. ``search``: ``Pack.search`` keywords (mode, max_distance, doc, kind,
    section)."""
    t0 = time.perf_counter()
    resp = pack.search(question, k=k, **search)
    timings: dict[str, Any] = {"retrieval_s": round(time.perf_counter() - t0, 4)}
    if not resp.answered:
        nearest = []
        if show_passages:  # the same search without the gate: what came closest
            near = pack.search(question, k=k, refuse=False, **search)
            nearest = [
                {**citation_of(i, r), "content": r.content} for i, r in enumerate(near.results, 1)
            ]
        return Answer(
            question,
            REFUSED,
            [],
            [],
            refused=True,
            timings=timings,
            nearest=nearest,
            notes=list(resp.notes),
        )
    if llm is None:
        return _extractive(question, list(resp.results), timings, resp.notes)

    t1 = time.perf_counter()
    # the context holds the sources and question (``context``) and the answer
    n_ctx = context + max_tokens
    model = llm if isinstance(llm, ChatModel) else load_chat_model(Path(llm), threads, n_ctx)
    timings["load_s"] = round(time.perf_counter() - t1, 4)
    n_ctx = min(n_ctx, model.n_ctx)  # a model loaded by the caller may hold more
    budget = n_ctx - max_tokens - model.count_tokens(INSTRUCTIONS + question) - MARGIN_TOKENS
    sources = fit_sources(resp.results, budget, model.count_tokens)
    notes = list(resp.notes)
    if not sources:  # even the best passage is longer than the context: quote it instead
        notes.append(f"no passage fits the model's {n_ctx}-token context: extractive answer")
        return _extractive(question, list(resp.results), timings, notes, model)
    gen = model.generate(build_prompt(question, sources), max_tokens, temperature, on_token)
    if gen.first_token_s is not None:  # from the end of retrieval: loading + prompt processing
        timings["first_token_s"] = round(timings["load_s"] + gen.first_token_s, 4)
    timings.update(
        generation_s=round(gen.generation_s, 4),
        tokens=gen.tokens,
        tokens_per_s=None if gen.tokens_per_s is None else round(gen.tokens_per_s, 2),
    )
    contents = [r.content for r in sources]
    grounding = check_answer(gen.text, contents)
    cites = [citation_of(i, r) for i, r in enumerate(sources, 1)]
    if gen.finish == "length":
        notes.append(f"the answer was cut at --max-tokens {max_tokens}")
    if grounding.supported == 0:
        fell = _extractive(question, list(sources), timings, notes, model)
        fell.draft, fell.flagged = gen.text, grounding.flagged
        fell.draft_sentences = grounding.sentences
        return fell
    return Answer(
        question,
        gen.text,
        grounding.sentences,
        cites,
        flagged=grounding.flagged,
        model=_identity(model),
        timings=timings,
        notes=notes,
    )


def _identity(model: ChatModel) -> dict[str, Any]:
    return model.identity()


def _extractive(
    question: str,
    results: list[Any],
    timings: dict[str, Any],
    notes: Sequence[str],
    model: ChatModel | None = None,
) -> Answer:
    quotes = extract(question, [r.content for r in results])
    cites = [citation_of(i, r) for i, r in enumerate(results, 1)]
    sentences = [
        SentenceCheck(q.cited, [q.source], True, f"quoted from [{q.source}]") for q in quotes
    ]
    return Answer(
        question,
        "\n".join(q.cited for q in quotes),
        sentences,
        cites,
        fallback=True,
        model=None if model is None else _identity(model),
        timings=timings,
        notes=list(notes),
    )


def fallback_reason(a: Answer, without_model: str) -> str:
    """Why a fallback answer quotes the pack: the model's sentences were unsupported, or no
    passage fitted its context, or (``without_model``, each front end's words) none ran."""
    if a.draft is not None:
        return "no sentence of the model's answer is supported by the passage it cites"
    if a.model is not None:
        return "no passage fits the model's context"
    return without_model


def render_text(a: Answer) -> str:
    """The answer as ``kbpack ask`` prints it: sentences with their [n], unsupported ones
    marked, then the numbered sources as locators."""
    lines: list[str] = []
    if a.refused:
        lines.append(a.answer)
        if a.nearest:
            lines += ["", "Nearest passages (below the threshold, not an answer):"]
            lines += [f"[{c['n']}] {_where(c)}" for c in a.nearest]
        return "\n".join(lines)
    if a.fallback:
        lines.append(f"From the pack ({fallback_reason(a, 'extractive answer, no model')}):")
    for s in a.sentences:
        mark = "" if s.supported else f"  [unsupported: {s.why}]"
        lines.append(f"{s.text}{mark}")
    cited = {n for s in a.sentences for n in citations(s.text)}
    shown = [c for c in a.citations if c["n"] in cited]
    if shown:
        lines += ["", "Sources:"] + [f"[{c['n']}] {_where(c)}" for c in shown]
    if a.flagged:
        names = ", ".join(dict.fromkeys(f["text"] for f in a.flagged))
        lines += ["", f"In no retrieved passage: {names}"]
    return "\n".join(lines)


def _where(c: dict[str, Any]) -> str:
    return f"{c['pack']}: {c['locator']}" if c.get("pack") else str(c["locator"])
