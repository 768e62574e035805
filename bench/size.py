"""Size: pack bytes vs raw text bytes, and vs the same content in SQLite (FTS5 + vector blobs).

For each pack: its file size; the bytes of its canonical text (UTF-8) and of its source files;
the pack's bytes by part (text, structure = documents/sections/pages/chunks metadata, BM25
postings, vectors, HDF5 + manifest overhead). The peer is one SQLite file holding the same
content the way a tool built on SQLite would: ``documents`` (name, title, source, canonical
text), ``sections``, ``chunks`` (offsets, page, tokens, the vector as a float16 BLOB -- the
pack's own precision) and an FTS5 index over each chunk's content (``content=''``: the index
only, the text is stored once in ``documents``, as in the pack; FTS5's default ``detail=full``
keeps positions, which kbpack's BM25 postings do not). VACUUMed; page size 4096.

    python bench/size.py                                    # out/fixtures.kbpack + synth 100k
    python bench/size.py out/bench/synth-10000.kbpack --json
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kbpack.pack import format as F  # noqa: E402
from kbpack.pack.read import PackReader  # noqa: E402

DEFAULT_PACKS = (ROOT / "out" / "fixtures.kbpack", ROOT / "out" / "bench" / "synth-100000.kbpack")
_PARTS = {
    "text": (F.DOC_TEXT,),
    "bm25": (F.BM25,),
    "vectors": (F.VECTORS,),
    "model": (F.MODEL,),
}


def ensure(path: Path) -> Path:
    """Build the default packs when missing (the fixtures one with the default model)."""
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.name == "fixtures.kbpack":
        cmd = [sys.executable, "-m", "kbpack", "build", str(ROOT / "fixtures" / "docs")]
        cmd += ["-o", str(path), "--quiet"]
    else:
        n = path.stem.split("-")[-1]
        cmd = [sys.executable, str(ROOT / "bench" / "synth.py"), "pack", "--chunks", n]
        cmd += ["-o", str(path)]
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return path


def pack_parts(reader: PackReader) -> dict[str, int]:
    """Bytes of every dataset, grouped (strings: their UTF-8 bytes plus the heap references);
    the rest of the file is HDF5 metadata, heap headers and the 64 KiB user block."""
    import h5py

    parts = dict.fromkeys([*_PARTS, "structure"], 0)

    def visit(name: str, obj: Any) -> None:
        if not isinstance(obj, h5py.Dataset):
            return
        path = "/" + name
        size = int(obj.id.get_storage_size())
        if h5py.check_string_dtype(obj.dtype) is not None:
            # Variable-length strings live in HDF5's global heap, not in the dataset's storage.
            size += sum(len(x) for x in obj[()])
        for part, prefixes in _PARTS.items():
            if any(path == p or path.startswith(p + "/") for p in prefixes):
                parts[part] += size
                return
        parts["structure"] += size

    reader.h5.visititems(visit)
    parts["overhead"] = reader.path.stat().st_size - sum(parts.values())
    return parts


def to_sqlite(reader: PackReader, out: Path, fts: bool = True) -> int:
    """The pack's content in one SQLite file; returns its size in bytes."""
    out.unlink(missing_ok=True)
    db = sqlite3.connect(out)
    db.executescript(
        """
        PRAGMA page_size = 4096;
        PRAGMA journal_mode = OFF;
        PRAGMA synchronous = OFF;
        CREATE TABLE documents (id INTEGER PRIMARY KEY, name TEXT, title TEXT,
            source_path TEXT, source_sha256 TEXT, source_size INTEGER, extractor TEXT,
            status TEXT, text TEXT);
        CREATE TABLE sections (id INTEGER PRIMARY KEY, document INTEGER, parent INTEGER,
            level INTEGER, start INTEGER, "end" INTEGER, title TEXT);
        CREATE TABLE chunks (id INTEGER PRIMARY KEY, document INTEGER, section INTEGER,
            start INTEGER, "end" INTEGER, page INTEGER, tokens INTEGER, vector BLOB);
        """
    )
    if fts:
        db.execute("CREATE VIRTUAL TABLE chunk_fts USING fts5(content, content='')")
    s = reader.strings
    names, n_docs = s(F.DOC_NAME), len(s(F.DOC_NAME))
    db.executemany(
        "INSERT INTO documents VALUES (?,?,?,?,?,?,?,?,?)",
        (
            (
                i,
                names[i],
                s(F.DOC_TITLE)[i],
                s(F.DOC_SOURCE_PATH)[i],
                s(F.DOC_SOURCE_SHA256)[i],
                int(reader.column(F.DOC_SOURCE_SIZE)[i]),
                s(F.DOC_EXTRACTOR)[i],
                s(F.DOC_STATUS)[i],
                reader.text(i),
            )
            for i in range(n_docs)
        ),
    )
    c = reader.column
    db.executemany(
        "INSERT INTO sections VALUES (?,?,?,?,?,?,?)",
        zip(
            range(len(c(F.SEC_FROM))),
            c(F.SEC_DOCUMENT).tolist(),
            c(F.SEC_PARENT).tolist(),
            c(F.SEC_LEVEL).tolist(),
            c(F.SEC_FROM).tolist(),
            c(F.SEC_TO).tolist(),
            s(F.SEC_TITLE),
            strict=True,
        ),
    )
    n = reader.counts["chunks"]
    vec = reader.dataset(F.VEC_DATA) if reader.has_vectors else None
    step = 50_000
    for at in range(0, n, step):
        rows = range(at, min(n, at + step))
        block = np.asarray(vec[at : at + len(rows)], dtype="<f2") if vec is not None else None
        db.executemany(
            "INSERT INTO chunks VALUES (?,?,?,?,?,?,?,?)",
            (
                (
                    i,
                    int(c(F.CHUNK_DOCUMENT)[i]),
                    int(c(F.CHUNK_SECTION)[i]),
                    int(c(F.CHUNK_FROM)[i]),
                    int(c(F.CHUNK_TO)[i]),
                    int(c(F.CHUNK_PAGE)[i]) or None,
                    int(c(F.CHUNK_TOKENS)[i]),
                    block[i - at].tobytes() if block is not None else None,
                )
                for i in rows
            ),
        )
        if fts:
            db.executemany(
                "INSERT INTO chunk_fts (rowid, content) VALUES (?, ?)",
                ((i, reader.chunk_content(i)) for i in rows),
            )
        db.commit()
    if fts:
        db.execute("INSERT INTO chunk_fts (chunk_fts) VALUES ('optimize')")
    db.commit()
    db.execute("VACUUM")
    db.close()
    return out.stat().st_size


def measure(path: Path) -> dict[str, Any]:
    with PackReader(ensure(path)) as reader:
        n_docs = len(reader.strings(F.DOC_NAME))
        text_bytes = sum(len(reader.text(i).encode("utf-8")) for i in range(n_docs))
        source_bytes = int(reader.column(F.DOC_SOURCE_SIZE).sum())
        pack_bytes = path.stat().st_size
        parts = pack_parts(reader)
        with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
            full = to_sqlite(reader, Path(tmp) / "full.sqlite")
            bare = to_sqlite(reader, Path(tmp) / "nofts.sqlite", fts=False)
    return {
        "pack": str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path),
        "chunks": reader.counts["chunks"],
        "documents": n_docs,
        "pack_bytes": pack_bytes,
        "text_bytes": text_bytes,
        "source_bytes": source_bytes,
        "pack_parts": parts,
        "sqlite_bytes": full,
        "sqlite_fts_bytes": full - bare,
        "pack_over_text": round(pack_bytes / text_bytes, 3),
        "pack_over_sqlite": round(pack_bytes / full, 3),
        "bm25_over_fts5": round(parts["bm25"] / max(1, full - bare), 3),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("packs", type=Path, nargs="*", default=list(DEFAULT_PACKS))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = [measure(p.resolve()) for p in args.packs]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    mb = 1e6
    for r in rows:
        p = r["pack_parts"]
        print(f"{r['pack']}: {r['documents']} documents, {r['chunks']} chunks")
        print(
            f"  pack {r['pack_bytes'] / mb:.2f} MB = {r['pack_over_text']}x its canonical text "
            f"({r['text_bytes'] / mb:.2f} MB; sources {r['source_bytes'] / mb:.2f} MB)"
        )
        print("  parts MB: " + "  ".join(f"{k} {v / mb:.2f}" for k, v in p.items()))
        print(
            f"  SQLite (FTS5 + f16 vector blobs) {r['sqlite_bytes'] / mb:.2f} MB: "
            f"pack/SQLite = {r['pack_over_sqlite']}; BM25 postings {p['bm25'] / mb:.2f} MB vs "
            f"FTS5 index {r['sqlite_fts_bytes'] / mb:.2f} MB ({r['bm25_over_fts5']}x)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
