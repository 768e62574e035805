"""Deterministic shares of a build's documents (``kbpack build SRC --shard I/N``).

A document belongs to shard ``int(sha256(name)[:8]) mod N`` (0-based; the command line counts
from 1). Only the name decides, so every machine of a cluster computes the same split with no
coordination, and adding or removing a file moves no other file between shards. Merging the N
shard packs (``kbpack merge``) gives the pack of the single build.
"""

from __future__ import annotations

import hashlib
import re

from kbpack.errors import UsageError

_SPEC = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


def parse_shard(spec: str) -> tuple[int, int]:
    """``"I/N"`` -> (I, N) with 1 <= I <= N, or UsageError saying how to write it."""
    m = _SPEC.match(spec)
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise UsageError(f"--shard {spec}: write I/N with 1 <= I <= N, e.g. --shard 2/8")
    return int(m.group(1)), int(m.group(2))


def shard_of(name: str, count: int) -> int:
    """The 1-based shard of document ``name`` among ``count`` shards."""
    digest = hashlib.sha256(name.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % count + 1


def in_shard(name: str, shard: tuple[int, int] | None) -> bool:
    return shard is None or shard_of(name, shard[1]) == shard[0]
