"""Does the contextual header buy retrieval? Dense retrieval with and without it, paired.

    python bench/header.py [--model FILE.gguf]

The development corpus (fixtures/eval/corpus) is extracted and chunked once; every chunk is
embedded twice with the same model: as kbpack embeds it (``header + "\\n\\n" + content``) and as
its bare content. Each question of fixtures/eval/questions.jsonl is answered by an exact dense
scan over each set of vectors; recall@k, MRR and the exact sign test on discordant pairs are
printed per phrasing and overall. Chunk boundaries are the same in both arms (budgeted for the
header), so only the embedded text differs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from kbpack.extract import discover, extract_all
from kbpack.index.chunk import ChunkConfig, chunk_document, embedded_text, header, section_path
from kbpack.model.embedder import Embedder
from kbpack.ops.evaluate import load_questions, normalize, paired

ROOT = Path(__file__).resolve().parent.parent
KS = (1, 4, 8, 20)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", type=Path, default=None)
    args = ap.parse_args()
    emb = Embedder(args.model)
    candidates = discover([ROOT / "fixtures/eval/corpus"]).candidates
    with_h: list[str] = []
    bare: list[str] = []
    contents: list[str] = []
    for doc in extract_all(candidates):
        if doc.status != "ok":
            continue
        for c in chunk_document(doc, emb.count_tokens, ChunkConfig(window=emb.window)).chunks:
            content = doc.text[c.start : c.end]
            contents.append(normalize(content))
            with_h.append(embedded_text(header(doc.title, section_path(doc, c.section)), content))
            bare.append(content)
    va = emb.embed(with_h)
    vb = emb.embed(bare)
    questions = load_questions(ROOT / "fixtures/eval/questions.jsonl")
    qv = emb.embed([q.query for q in questions])

    def ranks(vectors: np.ndarray) -> list[int | None]:
        out: list[int | None] = []
        for q, v in zip(questions, qv, strict=True):
            order = np.argsort(-(vectors @ v), kind="stable")[:100]
            want = normalize(q.needle)
            out.append(next((i + 1 for i, c in enumerate(order) if want in contents[c]), None))
        return out

    ra, rb = ranks(va), ranks(vb)
    print(f"{len(contents)} chunks, {len(questions)} questions, model {emb.identity.name}")
    print(f"{'subset':<8} {'arm':<10} " + " ".join(f"R@{k:<4}" for k in KS) + "  MRR")
    for subset in ("doc", "ticket", "all"):
        idx = [i for i, q in enumerate(questions) if subset in ("all", q.phrasing)]
        for name, r in (("header", ra), ("no header", rb)):
            sub = [r[i] for i in idx]
            rec = " ".join(f"{np.mean([x is not None and x <= k for x in sub]):.2f} " for k in KS)
            print(f"{subset:<8} {name:<10} {rec} {np.mean([1 / x if x else 0 for x in sub]):.3f}")
        tests = paired([ra[i] for i in idx], [rb[i] for i in idx], KS)
        print(
            f"{subset:<8} header vs no header: "
            + "  ".join(f"@{t.k} +{t.wins}/-{t.losses} p={t.p_value:.4f}" for t in tests)
        )


if __name__ == "__main__":
    main()
