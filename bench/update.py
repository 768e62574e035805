"""Incremental update vs full build: one changed document out of 100.

    python bench/update.py                    # the default model (all-MiniLM-L6-v2)
    python bench/update.py --model FILE.gguf  # any other GGUF
    python bench/update.py --docs 100 --threads 2

The corpus is real text: the paragraphs of the evaluation corpus (``fixtures/eval/corpus``:
attrs, click, curl, sqlite, zstd documentation) dealt into ``--docs`` Markdown files of about
3 KB. One full build, then one paragraph of one document is edited and the pack is brought up
to date twice: by ``update`` (reusing the 99 unchanged documents) and by a fresh full build.
Prints both times, the ratio, what update reused, and checks with ``diff`` that both packs
hold the same content. A script, not a test: it asserts nothing about time.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kbpack.ops.build import BuildOptions, BuildReport, build  # noqa: E402
from kbpack.ops.diff import diff_packs  # noqa: E402
from kbpack.ops.update import update_pack  # noqa: E402

CORPUS = ROOT / "fixtures" / "eval" / "corpus"
_TAGS = re.compile(r"<[^>]+>")


def paragraphs() -> list[str]:
    """Prose paragraphs of the evaluation corpus (HTML tags dropped, headings skipped)."""
    out: list[str] = []
    for path in sorted(CORPUS.rglob("*")):
        if not path.is_file():
            continue
        text = _TAGS.sub(" ", path.read_text(encoding="utf-8", errors="replace"))
        for p in text.split("\n\n"):
            p = " ".join(p.split())
            if len(p) > 80 and not p.startswith("#"):
                out.append(p)
    return out


def write_corpus(folder: Path, n_docs: int, target_chars: int = 3000) -> list[Path]:
    paras = paragraphs()
    folder.mkdir(parents=True)
    paths: list[Path] = []
    at = 0
    for i in range(n_docs):
        body: list[str] = []
        size = 0
        while size < target_chars:
            p = paras[at % len(paras)]
            at += 1
            body.append(p)
            size += len(p)
        sections = [f"## Part {k + 1}\n\n" + "\n\n".join(body[k::3]) for k in range(3)]
        path = folder / f"doc{i:03d}.md"
        path.write_text(f"# Document {i}\n\n" + "\n\n".join(sections) + "\n", encoding="utf-8")
        paths.append(path)
    return paths


def timed(fn: object, *args: object) -> tuple[float, BuildReport]:
    t0 = time.perf_counter()
    report = fn(*args)  # type: ignore[operator]
    return time.perf_counter() - t0, report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, help="GGUF model (default: all-MiniLM-L6-v2)")
    ap.add_argument("--docs", type=int, default=100)
    ap.add_argument("--threads", type=int)
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="kbpack-bench-update-") as tmp:
        tmpdir = Path(tmp)
        src = tmpdir / "src"
        paths = write_corpus(src, args.docs)

        def opts(out: str) -> BuildOptions:
            return BuildOptions(
                sources=[src], out=tmpdir / out, model=args.model, threads=args.threads
            )

        t_first, _ = timed(build, opts("v1.kbpack"))
        victim = paths[len(paths) // 2]
        text = victim.read_text(encoding="utf-8")
        victim.write_text(
            text.replace("## Part 2\n\n", "## Part 2\n\nThis paragraph is new.\n\n", 1)
        )

        t_update, updated = timed(update_pack, tmpdir / "v1.kbpack", opts("updated.kbpack"))
        t_full, full = timed(build, opts("full.kbpack"))
        d = diff_packs(tmpdir / "updated.kbpack", tmpdir / "full.kbpack")

    figures = {
        "model": (full.model or {}).get("name"),
        "documents": full.counts["documents"],
        "chunks": full.counts["chunks"],
        "first_build_s": round(t_first, 2),
        "full_build_s": round(t_full, 2),
        "update_s": round(t_update, 2),
        "ratio": round(t_full / t_update, 1),
        "update_reused_documents": updated.reused_documents,
        "update_vectors_embedded": updated.vectors_embedded,
        "full_vectors_embedded": full.vectors_embedded,
        "update_seconds": updated.seconds,
        "full_seconds": full.seconds,
        "same_content": d.same_content,
        "differences": d.differences,
    }
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"{figures['documents']} documents, {figures['chunks']} chunks, model {figures['model']}")
    print(
        f"full build   {t_full:7.2f} s  ({full.vectors_embedded} chunks embedded)  {full.seconds}"
    )
    print(
        f"update       {t_update:7.2f} s  ({updated.vectors_embedded} chunks embedded, "
        f"{updated.reused_documents} documents reused)  {updated.seconds}"
    )
    print(f"ratio        {figures['ratio']}x faster (target >= 10x)")
    print(
        f"diff         {'same content' if d.same_content else 'DIFFER: ' + '; '.join(d.differences)}"
    )


if __name__ == "__main__":
    main()
