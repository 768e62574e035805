"""Verify step 5, **vectors**: the model identity stamp, the stored GGUF against it, dims, one
vector per chunk, finite unit vectors (measured during the digest pass over the vectors)."""

from __future__ import annotations

from kbpack.pack import format as F
from kbpack.verify.digests import NORM_TOLERANCE
from kbpack.verify.exam_state import ExamState


class VectorInvariants(ExamState):
    """Step 5 on the model stamp and the vectors."""

    def _check_vectors(self) -> None:
        root = self.attrs.get("/", {})
        dense = root.get(F.R_VECTORS) == "dense"
        has = F.VEC_DATA in self.readable
        n_chunks = self.stats.get("chunks", self.counts.get("chunks", 0))
        if dense and F.MODEL not in self.readable:
            self.add("model-stamp", F.MODEL, "a dense pack must stamp its model")
        if not dense:
            if has or F.MODEL in self.readable:
                self.add("vectors-unexpected", F.VECTORS, "the root says the pack has no vectors")
            return
        model = self.attrs.get(F.MODEL, {})
        missing = [k for k in F.MODEL_ATTRS if k not in model]
        if missing:
            self.add("model-stamp", F.MODEL, f"lacks attribute {missing[0]!r}")
        for key in F.MODEL_PREFIX_ATTRS:  # optional: packs before prefixes lack them
            if key in model and not isinstance(model[key], str):
                self.add("model-stamp", F.MODEL, f"{key} {model[key]!r} is not a string")
        dims = model.get(F.M_DIMS)
        sha = model.get(F.M_SHA256)
        if not isinstance(dims, int) or isinstance(dims, bool) or dims <= 0:
            self.add("model-stamp", F.MODEL, f"dims {dims!r} is not a positive integer")
            dims = None
        if not (
            isinstance(sha, str) and len(sha) == 64 and all(c in "0123456789abcdef" for c in sha)
        ):
            self.add("model-stamp", F.MODEL, "sha256 is not 64 lowercase hex digits")
        if self.gguf_sha is not None and sha != self.gguf_sha:
            self.add(
                "model-file-mismatch",
                F.MODEL_GGUF,
                f"SHA-256 of the stored GGUF {self.gguf_sha[:16]}… differs from the stamp's",
            )
        if self.gguf_head:
            from kbpack.errors import ModelError
            from kbpack.model.gguf_header import check_gguf_bytes

            try:  # what query would refuse before llama.cpp sees it (resolve.py)
                check_gguf_bytes(self.gguf_head, F.MODEL_GGUF)
            except ModelError as e:
                self.add("model-invalid", F.MODEL_GGUF, str(e).split(": ", 1)[-1])
        vattrs = self.attrs.get(F.VECTORS, {})
        if dims is not None and vattrs.get("dims", dims) != dims:
            self.add(
                "dims-mismatch",
                F.VECTORS,
                f"/vectors says dims {vattrs.get('dims')}, the model stamp says {dims}",
            )
        if not has:
            return
        shape = self.stats.get("vector_rows", -1), self.stats.get("vector_dims", -1)
        self.stats["vectors"] = shape[0]
        if dims is not None and shape[1] != dims:
            self.add(
                "dims-mismatch",
                F.VEC_DATA,
                f"vectors have {shape[1]} dims, the model stamp says {dims}",
            )
        if shape[0] != n_chunks:
            self.add("vector-count", F.VEC_DATA, f"{shape[0]} vectors for {n_chunks} chunks")
        if self.vec_counts["nonfinite"]:
            self.add(
                "vector-not-finite",
                F.VEC_DATA,
                "NaN or infinite component: " + self._vec_rows("nonfinite"),
            )
        if self.vec_counts["norm"]:
            self.add(
                "vector-norm",
                F.VEC_DATA,
                f"norm differs from 1 by more than {NORM_TOLERANCE}: " + self._vec_rows("norm"),
            )

    def _vec_rows(self, kind: str) -> str:
        count, shown = self.vec_counts[kind], self.vec_bad[kind]
        more = f" (and {count - len(shown)} more)" if count > len(shown) else ""
        return "rows " + ", ".join(str(r) for r in shown) + more
