"""Verify step 5, the **group attributes** each element's section of the spec lists (§3.0-3.10).

Readers fall back when one is missing (a default dims, weight or threshold), so without this
check a pack stripped of them verifies clean (bench/fuzz.py --enumerate attribute-deletions:
15 of 207 deletions on the golden pack passed verify). An attribute the spec lets be absent,
saying what a missing one means (``chunking``, the model's prefixes, ``calibration``,
``analyzer``), is not required here. The model stamp (``MODEL_ATTRS``) and /bm25's parameters
have their own checks (``vectors``, ``bm25``).
"""

from __future__ import annotations

import math
from typing import Any

from kbpack.pack import format as F
from kbpack.verify.exam_state import ExamState


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return (_is_int(v) or isinstance(v, float)) and math.isfinite(v)


def _text(v: Any) -> str | None:
    return None if isinstance(v, str) and v.strip() else "must be a non-empty string"


def _dims(v: Any) -> str | None:
    return None if _is_int(v) and v > 0 else "must be a positive integer"


def _exactly(want: str) -> Any:
    return lambda v: None if v == want else f"must be {want!r}"


_STORAGE = {
    "dims": _dims,
    "normalisation": _exactly("l2"),
    "stored_dtype": _exactly("float16"),
}

# element path -> {attribute: check of its value (None: fine, else what is wrong)}
REQUIRED: dict[str, dict[str, Any]] = {
    "/": {
        F.R_VECTORS: lambda v: None if v in ("dense", "none") else "must be 'dense' or 'none'",
        F.R_PIPELINE_VERSION: lambda v: None if _is_int(v) and v >= 0 else "must be a whole number",
    },
    F.CHUNKS: {F.CHUNK_HEADER_RULE: _text},
    F.VECTORS: _STORAGE,
    F.PIECES: {
        **_STORAGE,
        F.PIECE_RULE_ATTR: _text,
        F.PIECE_WEIGHT_ATTR: lambda v: (
            None if _is_number(v) and v >= 0 else "must be a finite number >= 0"
        ),
    },
    F.SEARCH: {
        F.SEARCH_MAX_DISTANCE: lambda v: None if _is_number(v) else "must be a finite number"
    },
    F.COPIES: {F.COPIES_RULE_ATTR: _text},
    F.IVF: {  # spec §3.13 (probe against the lists, dims against the vectors: invariants/ivf.py)
        "dims": _dims,
        F.IVF_METRIC_ATTR: _exactly(F.IVF_METRIC),
        F.IVF_PROBE_ATTR: lambda v: None if _is_int(v) and v >= 1 else "must be an integer >= 1",
        F.IVF_RULE_ATTR: _text,
    },
}


class GroupAttributeInvariants(ExamState):
    """Step 5 on the attributes of /, /chunks, /vectors, /pieces, /search and /copies."""

    def _check_group_attributes(self) -> None:
        for path, rules in REQUIRED.items():
            attrs = self.attrs.get(path)
            if attrs is None:  # an absent element is the structure check's business
                continue
            missing = [name for name in rules if name not in attrs]
            if missing:
                listed = ", ".join(missing)
                self.add("attribute-missing", path, f"{listed}: required (spec §3)")
            for name, check in rules.items():
                problem = check(attrs[name]) if name in attrs else None
                if problem:
                    self.add("attribute-invalid", path, f"{name} {attrs[name]!r}: {problem}")
