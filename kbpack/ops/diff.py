"""What changed between two packs: documents, chunks, model, pipeline, format, counts.

Documents are matched by name. A document is *changed* when anything a build derives from its
source differs: source bytes (size, SHA-256), canonical text (SHA-256), status, extractor,
title, structure (sections, pages) or chunk boundaries. Per changed document the chunks added
and removed are listed by content (a chunk whose words merely moved is neither).

"Same content" ignores what differs between two builds of the same sources by design: the
build time, the kbpack version string, the source paths as typed (temp folders), the
llama.cpp version, and float noise in vectors. Vectors of matching chunks are compared by
cosine distance and count as different only above ``VECTOR_TOLERANCE``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kbpack.ops.restore import PackContents
from kbpack.pack import format as F
from kbpack.pack.read import PackReader
from kbpack.text.worddiff import word_diff

# Cosine distance under which two vectors of the same chunk and model are the same vector:
# float16 storage alone moves a unit vector by ~1e-7; llama.cpp batching by less.
VECTOR_TOLERANCE = 1e-3
VECTOR_BLOCK = 16384  # rows of vectors compared at a time

# Per-document fields and the name of the difference they make.
_DOC_FIELDS: tuple[tuple[str, str], ...] = (
    (F.DOC_SOURCE_SHA256, "source"),
    (F.DOC_TEXT_SHA256, "text"),
    (F.DOC_STATUS, "status"),
    (F.DOC_REASON, "status"),
    (F.DOC_STAGE, "status"),
    (F.DOC_EXTRACTOR, "extractor"),
    (F.DOC_TITLE, "title"),
    (F.DOC_MEDIA_TYPE, "metadata"),
    (F.DOC_DECODING, "metadata"),
    (F.DOC_WARNINGS, "metadata"),
)
_DOC_INTS: tuple[tuple[str, str], ...] = (
    (F.DOC_SOURCE_SIZE, "source"),
    (F.DOC_EXTRACTOR_VERSION, "extractor"),
    (F.DOC_REPLACED, "metadata"),
)


@dataclass
class PackDiff:
    old: dict[str, Any]
    new: dict[str, Any]
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: list[dict[str, Any]] = field(default_factory=list)
    unchanged: int = 0
    vectors: dict[str, Any] = field(default_factory=dict)
    differences: list[str] = field(default_factory=list)  # one line per reason for "differ"
    # name -> the changed passages of a changed document (human output; not in --json)
    passages: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def same_content(self) -> bool:
        return not self.differences

    def as_dict(self) -> dict[str, Any]:
        counts = {
            k: {"old": self.old["counts"].get(k, 0), "new": self.new["counts"].get(k, 0)}
            for k in (*F.COUNT_KEYS, *F.OPTIONAL_COUNT_KEYS)
            if self.old["counts"].get(k, 0) != self.new["counts"].get(k, 0)
        }
        return {
            "same_content": self.same_content,
            "differences": self.differences,
            "old": self.old,
            "new": self.new,
            "documents": {
                "added": self.added,
                "removed": self.removed,
                "changed": [c["name"] for c in self.changed],
                "unchanged": self.unchanged,
            },
            "changes": self.changed,
            "model": _change(self.old["model"], self.new["model"]),
            "pipeline": _change(self.old["pipeline_version"], self.new["pipeline_version"]),
            "format": _change(self.old["format_version"], self.new["format_version"]),
            "extractors": _change(self.old["extractors"], self.new["extractors"]),
            "counts": counts,
            "size": {"old": self.old["file_size"], "new": self.new["file_size"]},
            "vectors": self.vectors,
        }


def _change(old: Any, new: Any) -> dict[str, Any]:
    return {"changed": old != new, "old": old, "new": new}


def summary(r: PackReader) -> dict[str, Any]:
    """The pack-level facts a diff compares and shows."""
    names = r.strings(F.DOC_EXTRACTOR)
    versions = r.column(F.DOC_EXTRACTOR_VERSION)
    extractors = sorted({f"{n} v{int(v)}" for n, v in zip(names, versions, strict=True)})
    return {
        "path": str(r.path),
        "file_size": r.manifest.file_size,
        "format_version": r.format_version,
        "kbpack_version": r.manifest.kbpack_version,
        "pipeline_version": r.root_attrs.get(F.R_PIPELINE_VERSION),
        "created": r.manifest.created,
        "model": r.model,
        "embedded_model": r.has_embedded_model,
        "max_distance": r.search_defaults["max_distance"],
        "extractors": extractors,
        "counts": dict(r.counts),
        "pieces": r.counts.get("pieces") if r.has_pieces else None,  # None: no piece level
        # chunks in copy groups (/copies); None: a pack of kbpack 0.2.0, which stores none
        "copies": r.counts.get("copies", 0) if r.has_copies else None,
    }


def diff_packs(old_path: Path, new_path: Path, passages: bool = False) -> PackDiff:
    with PackReader(old_path) as old_r, PackReader(new_path) as new_r:
        return diff_readers(old_r, new_r, passages)


def diff_readers(old_r: PackReader, new_r: PackReader, passages: bool = False) -> PackDiff:
    """``passages``: also the word-level diff of every changed document's text."""
    old, new = PackContents(old_r), PackContents(new_r)
    d = PackDiff(old=summary(old_r), new=summary(new_r))
    same_model = _model_sha(d.old["model"]) == _model_sha(d.new["model"])
    d.added = [n for n in new.names if n not in old.row_of]
    d.removed = [n for n in old.names if n not in new.row_of]
    # (old row, new row) of documents whose chunk rows line up one to one, for vectors.
    aligned: list[tuple[int, int]] = []
    for name in old.names:
        if name not in new.row_of:
            continue
        i, j = old.row_of[name], new.row_of[name]
        what = _document_changes(old, i, new, j, compare_tokens=same_model)
        if what:
            d.changed.append(_describe_change(old, i, new, j, name, what))
            if passages and "text" in what:
                d.passages[name] = changed_passages(old, i, new, j)
        else:
            d.unchanged += 1
        if "chunks" not in what:
            aligned.append((i, j))
    d.vectors = _compare_vectors(old, new, aligned) if same_model else {}
    d.differences = _differences(d, same_model)
    return d


def _model_sha(model: dict[str, Any] | None) -> tuple[str, str, str] | None:
    """The model's hash and prefixes: a prefix change is a model change (vectors differ)."""
    from kbpack.model.prefixes import vectors_key

    return vectors_key(model)


def _document_changes(
    old: PackContents, i: int, new: PackContents, j: int, compare_tokens: bool
) -> list[str]:
    what: list[str] = []

    def note(kind: str) -> None:
        if kind not in what:
            what.append(kind)

    for path, kind in _DOC_FIELDS:
        if old.r.strings(path)[i] != new.r.strings(path)[j]:
            note(kind)
    for path, kind in _DOC_INTS:
        if int(old.r.column(path)[i]) != int(new.r.column(path)[j]):
            note(kind)
    if old.sections(i) != new.sections(j) or old.pages(i) != new.pages(j):
        note("structure")
    oc, nc = old.chunks(i), new.chunks(j)
    if [(c.section, c.start, c.end, c.page) for c in oc] != [
        (c.section, c.start, c.end, c.page) for c in nc
    ]:
        note("chunks")
    elif compare_tokens and [c.tokens for c in oc] != [c.tokens for c in nc]:
        note("tokens")
    return what


def _contents(c: PackContents, doc: int) -> list[str]:
    text = c.r.text(doc)
    return [text[ch.start : ch.end] for ch in c.chunks(doc)]


def _describe_change(
    old: PackContents, i: int, new: PackContents, j: int, name: str, what: list[str]
) -> dict[str, Any]:
    before, after = Counter(_contents(old, i)), Counter(_contents(new, j))
    return {
        "name": name,
        "what": what,
        "old": _doc_facts(old, i),
        "new": _doc_facts(new, j),
        "chunks_added": list((after - before).elements()),
        "chunks_removed": list((before - after).elements()),
    }


def changed_passages(old: PackContents, i: int, new: PackContents, j: int) -> list[dict[str, Any]]:
    """The word-level diff of a document's canonical text, each passage with the section path
    of the new text where its first change is."""
    sections = new.sections(j)
    out = []
    for p in word_diff(old.r.text(i), new.r.text(j)):
        inside = [k for k, s in enumerate(sections) if s.start <= p.at < max(s.end, s.start + 1)]
        path: list[str] = []
        k = max(inside, key=lambda k: sections[k].level) if inside else -1
        while k >= 0:
            if sections[k].level > 0 and sections[k].title:
                path.insert(0, sections[k].title)
            k = sections[k].parent
        out.append({"section": " > ".join(path), "text": p.text, "from": p.start, "to": p.end})
    return out


def _doc_facts(c: PackContents, doc: int) -> dict[str, Any]:
    a, b = c.chunk_range(doc)
    return {
        "source_sha256": c.r.strings(F.DOC_SOURCE_SHA256)[doc],
        "text_sha256": c.r.strings(F.DOC_TEXT_SHA256)[doc],
        "status": c.r.strings(F.DOC_STATUS)[doc],
        "extractor": f"{c.r.strings(F.DOC_EXTRACTOR)[doc]} v{int(c.r.column(F.DOC_EXTRACTOR_VERSION)[doc])}",
        "chunks": b - a,
    }


def _compare_vectors(
    old: PackContents, new: PackContents, aligned: list[tuple[int, int]]
) -> dict[str, Any]:
    """Largest cosine distance between the vectors of chunks that line up in both packs.

    Read in blocks of ``VECTOR_BLOCK`` rows, so two large packs are compared in bounded memory.
    """
    if not (old.r.has_vectors and new.r.has_vectors) or not aligned:
        return {}
    a = np.concatenate([np.arange(*old.chunk_range(i)) for i, _ in aligned])
    b = np.concatenate([np.arange(*new.chunk_range(j)) for _, j in aligned])
    if a.size == 0:
        return {"compared": 0, "max_distance": 0.0}
    ds_a, ds_b = old.r.dataset(F.VEC_DATA), new.r.dataset(F.VEC_DATA)
    if ds_a.shape[1] != ds_b.shape[1]:
        return {"compared": 0, "max_distance": None}
    worst = 0.0
    for at in range(0, a.size, VECTOR_BLOCK):
        x = _rows(ds_a, a[at : at + VECTOR_BLOCK])
        y = _rows(ds_b, b[at : at + VECTOR_BLOCK])
        # Stored float16 vectors are unit only to ~1e-3; normalise so equal vectors give 0.
        norms = np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1)
        dist = 1.0 - np.einsum("ij,ij->i", x, y) / np.maximum(norms, 1e-12)
        worst = max(worst, float(dist.max()))
    return {"compared": int(a.size), "max_distance": round(worst, 7)}


def _rows(ds: Any, rows: np.ndarray) -> np.ndarray:
    """``ds[rows]`` as float32: one contiguous read when the rows are close together."""
    lo, hi = int(rows.min()), int(rows.max()) + 1
    if hi - lo <= 4 * rows.size:
        return np.asarray(ds[lo:hi], dtype=np.float32)[rows - lo]
    unique, inverse = np.unique(rows, return_inverse=True)  # h5py wants increasing indices
    return np.asarray(ds[unique], dtype=np.float32)[inverse]


def _differences(d: PackDiff, same_model: bool) -> list[str]:
    out: list[str] = []
    if d.added:
        out.append(f"{len(d.added)} documents added")
    if d.removed:
        out.append(f"{len(d.removed)} documents removed")
    if d.changed:
        out.append(f"{len(d.changed)} documents changed")
    o, n = d.old, d.new
    if not same_model:
        out.append(f"model {_model_label(o['model'])} -> {_model_label(n['model'])}")
    for key, label in (("format_version", "format"), ("pipeline_version", "pipeline")):
        if o[key] != n[key]:
            out.append(f"{label} version {o[key]} -> {n[key]}")
    if o["pieces"] != n["pieces"]:
        was, now = ("none" if x is None else x for x in (o["pieces"], n["pieces"]))
        out.append(f"sentence pieces {was} -> {now}")
    if (o.get("copies") or 0) != (n.get("copies") or 0):  # none stored = no copies found
        was, now = ("not stored" if x is None else x for x in (o.get("copies"), n.get("copies")))
        out.append(f"chunks in copy groups {was} -> {now}")
    if o["max_distance"] != n["max_distance"]:
        out.append(f"refusal threshold {o['max_distance']} -> {n['max_distance']}")
    worst = d.vectors.get("max_distance")
    if same_model and d.vectors and (worst is None or worst > VECTOR_TOLERANCE):
        out.append(
            f"vectors of the same chunks differ (max cosine distance {worst}) under the same model"
        )
    return out


def _model_label(model: dict[str, Any] | None) -> str:
    if model is None:
        return "none (BM25-only)"
    prefixes = [
        f"{key} {model[key]!r}" for key in F.MODEL_PREFIX_ATTRS if model.get(key)
    ]  # shown only when set, so a prefix change is visible in the one-line summary
    extra = "".join(f", {p}" for p in prefixes)
    return (
        f"{model[F.M_NAME]} (sha256 {str(model[F.M_SHA256])[:12]}, {model[F.M_DIMS]} dims{extra})"
    )


__all__ = ["VECTOR_TOLERANCE", "PackDiff", "diff_packs", "diff_readers", "summary"]
