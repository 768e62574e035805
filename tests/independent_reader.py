"""An independent pack reader written from spec/FORMAT.md alone: h5py, numpy and the stdlib.

It imports nothing from kbpack on purpose (a test checks that): if it can read every chunk of
a pack, the spec is complete enough for someone else to write a reader in ten years.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
import unicodedata
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np

MAGIC = b"\x89KBPACK\n"
USERBLOCK = 65536


@dataclass
class Chunk:
    doc: str
    section_path: list[str]
    start: int
    end: int
    page: int | None
    content: str
    embedded_text: str


def read_manifest(path: str) -> dict[str, Any]:
    with open(path, "rb") as f:
        block = f.read(USERBLOCK)
    assert block[:8] == MAGIC, "no magic"
    (m_len,) = struct.unpack_from("<Q", block, 8)
    manifest: dict[str, Any] = json.loads(block[16 : 16 + m_len])
    return manifest


def check_bytes(path: str, manifest: dict[str, Any]) -> bool:
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        head = f.read(USERBLOCK)
        size += len(head)
        while block := f.read(1 << 20):
            h.update(block)
            size += len(block)
    return size == manifest["file_size"] and h.hexdigest() == manifest["hdf5_sha256"]


def storage_violations(path: str, format_version: int) -> list[str]:
    """Spec §1.1 (format 2 on): numeric datasets chunked with Fletcher-32, integer and byte
    ones also shuffled and deflated (not the vectors, not the GGUF, not the dense tf rows; the
    four BM25 columns read whole either way), strings unfiltered."""
    if format_version < 2:
        return []
    bad: list[str] = []

    def visit(name: str, obj: Any) -> None:
        if not isinstance(obj, h5py.Dataset):
            return
        path = "/" + name
        if h5py.check_string_dtype(obj.dtype) is not None:
            if obj.compression or obj.fletcher32 or obj.shuffle:
                bad.append(f"{path}: a string dataset with filters")
            return
        packed = path not in ("/vectors/data", "/pieces/data", "/model/gguf", "/bm25/dense_tf")
        if not obj.fletcher32:
            bad.append(f"{path}: no fletcher32")
        if path in ("/bm25/terms_blob", "/bm25/terms_offsets", "/bm25/indptr", "/bm25/doc_len"):
            packed = obj.compression == "gzip"  # either, but shuffle + deflate together
        if (obj.compression == "gzip") != packed or obj.shuffle != packed:
            bad.append(f"{path}: compression {obj.compression}, shuffle {obj.shuffle}")

    with h5py.File(path, "r", locking=False) as f:
        f.visititems(visit)
    return bad


def read_chunks(path: str) -> list[Chunk]:
    out: list[Chunk] = []
    with h5py.File(path, "r", locking=False) as f:
        names = [s.decode() for s in f["/documents/name"][()]]
        titles = [s.decode() for s in f["/documents/title"][()]]
        texts = [s.decode() for s in f["/documents/text"][()]]
        parent = f["/sections/parent"][()]
        sec_title = [s.decode() for s in f["/sections/title"][()]]
        doc, sec = f["/chunks/document"][()], f["/chunks/section"][()]
        start, end, page = f["/chunks/from"][()], f["/chunks/to"][()], f["/chunks/page"][()]

        def path_of(s: int) -> list[str]:
            p: list[str] = []
            while parent[s] >= 0:  # the root (parent -1) is excluded from the path
                p.append(sec_title[s])
                s = int(parent[s])
            return p[::-1]

        for i in range(len(doc)):
            d = int(doc[i])
            content = texts[d][int(start[i]) : int(end[i])]
            sp = path_of(int(sec[i]))
            head = " > ".join([titles[d], *sp])
            out.append(
                Chunk(
                    names[d],
                    sp,
                    int(start[i]),
                    int(end[i]),
                    int(page[i]) or None,
                    content,
                    head + "\n\n" + content,
                )
            )
    return out


@dataclass
class Piece:
    chunk: int
    start: int
    end: int
    content: str
    vector: np.ndarray


def read_pieces(path: str) -> list[Piece]:
    """Spec §3.9: the sentence pieces of a pack ([] when it has no /pieces group)."""
    out: list[Piece] = []
    with h5py.File(path, "r", locking=False) as f:
        if "pieces" not in f:
            return out
        texts = [s.decode() for s in f["/documents/text"][()]]
        doc = f["/chunks/document"][()]
        chunk, start, end = f["/pieces/chunk"][()], f["/pieces/from"][()], f["/pieces/to"][()]
        data = f["/pieces/data"][()].astype(np.float32)
        for i in range(len(chunk)):
            text = texts[int(doc[int(chunk[i])])]
            piece = text[int(start[i]) : int(end[i])]
            out.append(Piece(int(chunk[i]), int(start[i]), int(end[i]), piece, data[i]))
    return out


_LINE_HYPHEN = re.compile(r"(?<=\w)-[ \t]*\n\s*(?=\w)")


def copy_words(text: str) -> list[str]:
    """Spec §3.10: a chunk's normalised words."""
    t = unicodedata.normalize("NFKC", text).replace("\u00ad", "")
    return re.findall(r"\w+", _LINE_HYPHEN.sub("", t).casefold())


def read_copies(path: str) -> list[list[tuple[int, bool, bool]]] | None:
    """Spec §3.10: each copy group as (chunk row, stored exact flag, words equal to the group's
    first chunk's words); None when the pack has no /copies (kbpack 0.2.0)."""
    with h5py.File(path, "r", locking=False) as f:
        if "copies" not in f:
            return None
        texts = [s.decode() for s in f["/documents/text"][()]]
        doc, start, end = (f[f"/chunks/{k}"][()] for k in ("document", "from", "to"))
        group, chunk, exact = (f[f"/copies/{k}"][()] for k in ("group", "chunk", "exact"))
    groups: list[list[tuple[int, bool, bool]]] = []
    first: list[str] = []
    for g, c, e in zip(group.tolist(), chunk.tolist(), exact.tolist(), strict=True):
        words = copy_words(texts[doc[c]][start[c] : end[c]])
        if g == len(groups):
            groups.append([])
            first = words
        groups[g].append((c, bool(e), bool(words) and words == first))
    return groups


def tokenize_check(path: str) -> tuple[np.ndarray, list[str]]:
    """The vocabulary and postings lengths, read as the spec lays them out."""
    with h5py.File(path, "r", locking=False) as f:
        blob = f["/bm25/terms_blob"][()].tobytes()
        off = f["/bm25/terms_offsets"][()]
        terms = [blob[off[i] : off[i + 1]].decode() for i in range(len(off) - 1)]
        indptr = f["/bm25/indptr"][()]
    return np.diff(indptr), terms


def dense_check(path: str) -> int | None:
    """Spec §3.7.1: the common terms' dense rows are exactly the rule's terms and equal their
    postings. The number of terms held; None when the pack has no dense rows."""
    with h5py.File(path, "r", locking=False) as f:
        if "dense_terms" not in f["/bm25"]:
            assert "dense_tf" not in f["/bm25"]
            return None
        rows, dense = f["/bm25/dense_terms"][()], f["/bm25/dense_tf"][()]
        indptr, chunk, tf = (f[f"/bm25/{k}"][()] for k in ("indptr", "chunk", "tf"))
        n = len(f["/bm25/doc_len"])
    want = [
        t
        for t in range(len(indptr) - 1)
        if 8 * (indptr[t + 1] - indptr[t]) >= n and tf[indptr[t] : indptr[t + 1]].max() <= 255
    ]
    assert rows.tolist() == want, (rows.tolist(), want)
    assert len(dense) == len(rows) * n
    for j, t in enumerate(rows.tolist()):
        row = np.zeros(n, dtype=np.int64)
        row[chunk[indptr[t] : indptr[t + 1]]] = tf[indptr[t] : indptr[t + 1]]
        assert dense[j * n : (j + 1) * n].tolist() == row.tolist(), t
    return len(rows)


def row_digest_check(path: str) -> int | None:
    """Spec §3.11: each stored row digest is the first 8 bytes (little-endian int64) of the
    SHA-256 of its string row's uint64 LE length + UTF-8 bytes. Rows checked; None when the
    pack has no /row_digests."""
    columns = ("documents/name", "documents/title", "documents/text_sha256", "sections/title")
    with h5py.File(path, "r", locking=False) as f:
        if "row_digests" not in f:
            return None
        checked = 0
        for column in columns:
            stored = f["/row_digests/" + column.replace("/", "_")][()]
            rows = f["/" + column][()]
            assert len(stored) == len(rows), column
            for want, row in zip(stored.tolist(), rows.tolist(), strict=True):
                b = row if isinstance(row, bytes) else str(row).encode("utf-8")
                sha = hashlib.sha256(struct.pack("<Q", len(b)) + b).digest()
                assert want == int.from_bytes(sha[:8], "little", signed=True), column
                checked += 1
    return checked


def read_links(path: str) -> list[tuple[str, str, str, str]] | None:
    """Spec §3.12, with h5py alone: (source name, link text, target name, the target's text
    from the target offset on, 16 characters) for each link; None when the pack has no
    /links. Asserts the MUSTs: order, ranges, ok targets, offsets inside the target's text."""
    with h5py.File(path, "r", locking=False) as f:
        if "links" not in f:
            return None
        names = [x.decode("utf-8") for x in f["/documents/name"][()]]
        texts = [x.decode("utf-8") for x in f["/documents/text"][()]]
        status = [x.decode("utf-8") for x in f["/documents/status"][()]]
        doc, start, end = (f["/links/" + k][()].tolist() for k in ("document", "from", "to"))
        target, offset = (f["/links/" + k][()].tolist() for k in ("target", "target_offset"))
        assert len(f["/links/anchor"]) == len(doc)
    out = []
    last = (-1, 0)
    for d, a, b, t, at in zip(doc, start, end, target, offset, strict=True):
        assert (d, a) >= last and (d != last[0] or a >= last[1]), "links ordered and apart"
        last = (d, b)
        text = texts[d]
        assert 0 <= a < b <= len(text) and text[a:b] == text[a:b].strip()
        assert status[t] == "ok" and 0 <= at <= len(texts[t])
        out.append((names[d], text[a:b], names[t], texts[t][at : at + 16]))
    return out


def analyzer_check(path: str) -> tuple[str | None, set[str]]:
    """The /bm25 ``analyzer`` attribute (None when absent: plain tokenizer) and the stems the
    spec (§4.1) says its vocabulary must hold: ``"~" + Snowball English stem`` of every
    standalone lower-case word of the chunks, found here with a plain regex, not kbpack's."""
    import re

    with h5py.File(path, "r", locking=False) as f:
        name = f["/bm25"].attrs.get("analyzer")
    if name is None:
        return None, set()
    name = name.decode() if isinstance(name, bytes) else str(name)
    assert name == "snowball-english-1", name
    import snowballstemmer

    stem = snowballstemmer.stemmer("english").stemWord
    want: set[str] = set()
    for c in read_chunks(path):
        # a word between spaces: no joiner, digit or sigil next to it, so it is "standalone"
        for w in re.findall(r"(?<!\S)([a-z]+)(?=[\s,;!?)]|\.(?:\s|$)|$)", c.content):
            want.add("~" + stem(w))
    return name, want


def ivf_check(path: str, probe: int | None = None, query: np.ndarray | None = None) -> int | None:
    """Spec §3.13: every chunk in exactly one list, rows ascending within a list, offsets from
    0 to the chunks; with ``query``, the chunks of the ``probe`` lists whose centroids score
    highest (ties to the lower list), ascending. The number of lists; None without /ivf."""
    with h5py.File(path, "r", locking=False) as f:
        if "ivf" not in f:
            return None
        centroids = f["/ivf/centroids"][()].astype(np.float64)
        offsets, chunks = f["/ivf/list_offsets"][()], f["/ivf/list_chunks"][()]
        n, dims = f["/vectors/data"].shape
        default = int(f["/ivf"].attrs["probe"])
    assert centroids.shape[1] == dims and np.isfinite(centroids).all()
    assert offsets[0] == 0 and offsets[-1] == n and (np.diff(offsets) >= 0).all()
    assert sorted(chunks.tolist()) == list(range(n))
    for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True):
        assert (np.diff(chunks[a:b]) > 0).all()
    with h5py.File(path, "r", locking=False) as f:
        if "codes" in f["/ivf"]:  # optional: the vectors quantised, in list order, within 0.51
            codes, scale = f["/ivf/codes"][()], f["/ivf/code_scale"][()]
            vectors = f["/vectors/data"][()].astype(np.float64)
            assert codes.dtype == np.int8 and codes.shape == (n, dims) and scale.shape == (dims,)
            assert (np.abs(codes.astype(np.int64)) <= 127).all()
            assert (np.abs(codes * scale - vectors[chunks]) <= 0.51 * scale + 1e-7).all()
    if query is None:
        return len(centroids)
    scores = centroids @ np.asarray(query, np.float64)
    picked = sorted(range(len(scores)), key=lambda i: (-scores[i], i))[: probe or default]
    return sorted(c for i in picked for c in chunks[offsets[i] : offsets[i + 1]].tolist())
