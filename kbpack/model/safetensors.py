"""A minimal safetensors reader: numpy only, every header field checked before use.

Format (huggingface/safetensors README): an 8-byte little-endian header size N, N bytes of
JSON mapping tensor names to ``{"dtype", "shape", "data_offsets": [begin, end]}`` relative to
the byte buffer that follows, which the tensors must cover exactly, without holes.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from kbpack.errors import ModelError

MAX_HEADER_BYTES = 100 * 1024 * 1024  # safetensors' own cap

# bf16 has no numpy dtype: it is read as uint16 and widened to float32 by to_float32().
_DTYPES: dict[str, np.dtype[Any]] = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of ``path`` as a float32 array (memory-mapped file, copied per tensor)."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            prefix = f.read(8)
            if len(prefix) < 8:
                raise ModelError(f"{path}: not a safetensors file (shorter than 8 bytes)")
            n = int.from_bytes(prefix, "little")
            if n > MAX_HEADER_BYTES or 8 + n > size:
                raise ModelError(f"{path}: not a safetensors file (header size {n} is impossible)")
            header = json.loads(f.read(n))
    except OSError as e:
        raise ModelError(f"{path}: cannot read weights ({e.strerror or e})") from e
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ModelError(f"{path}: safetensors header is not JSON ({e})") from e
    if not isinstance(header, dict):
        raise ModelError(f"{path}: safetensors header is not a JSON object")
    header.pop("__metadata__", None)
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n) if size > 8 + n else None
    buffer_size = size - 8 - n
    spans: list[tuple[int, int]] = []
    tensors: dict[str, np.ndarray] = {}
    for name, info in header.items():
        dtype, shape, begin, end = _parse_entry(path, name, info)
        count = math.prod(shape)
        if end - begin != count * dtype.itemsize or end > buffer_size:
            raise ModelError(
                f"{path}: tensor {name!r} data_offsets [{begin}, {end}) do not match "
                f"shape {shape} x {dtype.itemsize} bytes within {buffer_size} bytes"
            )
        spans.append((begin, end))
        raw = data[begin:end] if data is not None else np.zeros(0, np.uint8)
        tensors[name] = to_float32(raw.view(dtype).reshape(shape), info["dtype"])
    _check_no_holes(path, spans, buffer_size)
    return tensors


def to_float32(array: np.ndarray, dtype_name: str) -> np.ndarray:
    if dtype_name == "BF16":
        return (array.astype(np.uint32) << 16).view(np.float32)
    return np.array(array, dtype=np.float32)


def _parse_entry(path: Path, name: str, info: Any) -> tuple[np.dtype[Any], list[int], int, int]:
    if not isinstance(info, dict):
        raise ModelError(f"{path}: tensor {name!r} entry is not an object")
    dtype = _DTYPES.get(info.get("dtype"))  # type: ignore[arg-type]
    if dtype is None:
        raise ModelError(f"{path}: tensor {name!r} has unsupported dtype {info.get('dtype')!r}")
    shape, offsets = info.get("shape"), info.get("data_offsets")
    if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
        raise ModelError(f"{path}: tensor {name!r} has an invalid shape {shape!r}")
    if not (
        isinstance(offsets, list)
        and len(offsets) == 2
        and all(isinstance(o, int) for o in offsets)
        and 0 <= offsets[0] <= offsets[1]
    ):
        raise ModelError(f"{path}: tensor {name!r} has invalid data_offsets {offsets!r}")
    return dtype, shape, offsets[0], offsets[1]


def _check_no_holes(path: Path, spans: list[tuple[int, int]], buffer_size: int) -> None:
    position = 0
    for begin, end in sorted(spans):
        if begin != position:
            raise ModelError(f"{path}: tensor data overlaps or has a hole at byte {position}")
        position = end
    if position != buffer_size:
        raise ModelError(f"{path}: {buffer_size - position} bytes after the last tensor")
