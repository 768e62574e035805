"""Query and document prefixes: the text some embedding models were trained to see before a
query or a passage ("query: " / "passage: " for e5, an instruction for bge queries).

A model fed without its prefixes still returns vectors, only worse ones, and nothing says so.
kbpack therefore records the prefixes a pack was built with beside the model identity
(``/model`` attributes ``query_prefix`` and ``doc_prefix``) and the query side always takes
them from the pack, never from the command line: a pack built with a prefix cannot be queried
without it. Prefixes go into the embedded text only; quoted content and offsets never see them.

Defaults are chosen by the model's GGUF name (``general.name``, then the file name), normalised (lower case, every run of other characters -> ``-``) so that the
names llama.cpp's converter writes ("Bge Small En v1.5") and the repository names
("bge-small-en-v1.5") both match. The table is docs/models.md -> "Prefixes".
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kbpack.errors import ModelError, UsageError

# The instruction BAAI published for bge English v1/v1.5 retrieval queries; snowflake
# arctic-embed v1/v1.5 and mxbai-embed-large use the same sentence.
BGE_QUERY = "Represent this sentence for searching relevant passages: "
# Longer prefixes are not instructions but documents: a typo in a shell, say.
MAX_PREFIX_CHARS = 1000


@dataclass(frozen=True)
class Prefixes:
    """Text put before every query and every embedded chunk text ("" for none)."""

    query: str = ""
    document: str = ""

    def as_stamp(self) -> dict[str, str]:
        """The ``/model`` attributes that record these prefixes."""
        from kbpack.pack import format as F

        return {F.M_QUERY_PREFIX: self.query, F.M_DOC_PREFIX: self.document}

    @classmethod
    def from_stamp(cls, stamp: Mapping[str, Any]) -> Prefixes:
        """The prefixes of a model stamp; absent attributes (packs before them) mean none."""
        from kbpack.pack import format as F

        return cls(
            query=_text(stamp, F.M_QUERY_PREFIX),
            document=_text(stamp, F.M_DOC_PREFIX),
        )


@dataclass(frozen=True)
class Family:
    """A model family known to expect prefixes, matched on its normalised name."""

    label: str  # for the README table and `model info`
    pattern: re.Pattern[str]
    prefixes: Prefixes


# First match wins: the more specific patterns (instruct, v2) come before the general ones.
FAMILIES: tuple[Family, ...] = (
    Family(
        "e5 instruct (multilingual-e5-*-instruct)",
        re.compile(r"\be5\b.*\binstruct\b"),
        # The model card's form: a task line, then the query; passages go bare.
        Prefixes(
            "Instruct: Given a web search query, retrieve relevant passages that answer "
            "the query\nQuery: ",
            "",
        ),
    ),
    Family("e5 (e5-*, multilingual-e5-*)", re.compile(r"\be5\b"), Prefixes("query: ", "passage: ")),
    Family(
        "nomic-embed-text v1, v1.5",
        re.compile(r"\bnomic-embed-text\b"),
        Prefixes("search_query: ", "search_document: "),
    ),
    Family(
        "snowflake-arctic-embed v2",
        re.compile(r"\barctic-embed\b.*\bv2\b"),
        Prefixes("query: ", ""),
    ),
    Family(
        "snowflake-arctic-embed v1, v1.5",
        re.compile(r"\barctic-embed\b"),
        Prefixes(BGE_QUERY, ""),
    ),
    Family(
        "bge English v1, v1.5 (bge-*-en*)",
        re.compile(r"\bbge-(small|base|large)-en\b"),
        Prefixes(BGE_QUERY, ""),
    ),
    Family("mxbai-embed-large v1", re.compile(r"\bmxbai-embed-large\b"), Prefixes(BGE_QUERY, "")),
)


def normalise_name(name: str) -> str:
    """``"Bge Small En v1.5"`` -> ``"bge-small-en-v1-5"``."""
    return re.sub(r"[^0-9a-z]+", "-", name.lower()).strip("-")


def family_of(name: str) -> Family | None:
    """The known family of a model name, or None (no prefixes expected)."""
    normal = normalise_name(name)
    for family in FAMILIES:
        if family.pattern.search(normal):
            return family
    return None


def default_prefixes(*names: str) -> Prefixes:
    """The prefixes a model was trained with, by the first of ``names`` (its GGUF name, then
    its file name) that belongs to a known family; none for an unknown family (and for
    all-MiniLM-L6-v2, bge-m3, gte-*, which take none)."""
    for name in names:
        family = family_of(name)
        if family is not None:
            return family.prefixes
    return Prefixes()


def override(base: Prefixes, query: str | None, document: str | None) -> Prefixes:
    """``base`` with each given prefix replaced (``""`` turns a default off), checked."""
    chosen = Prefixes(
        query=base.query if query is None else query,
        document=base.document if document is None else document,
    )
    check_prefix("--query-prefix", chosen.query)
    check_prefix("--doc-prefix", chosen.document)
    return chosen


def check_prefix(where: str, value: str) -> None:
    if len(value) > MAX_PREFIX_CHARS:
        raise UsageError(
            f"{where}: {len(value)} characters; a prefix is an instruction of at most "
            f"{MAX_PREFIX_CHARS}, not a document"
        )
    if "\x00" in value:
        raise UsageError(f"{where}: contains a NUL character; remove it")


def _text(stamp: Mapping[str, Any], key: str) -> str:
    value = stamp.get(key, "")
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str):
        raise ModelError(f"model identity: {key!r} must be a string")
    return value


def vectors_key(stamp: Mapping[str, Any] | None) -> tuple[str, str, str] | None:
    """What decides whether two packs' vectors are comparable: the model's SHA-256 and both
    prefixes. None for a BM25-only pack."""
    if stamp is None:
        return None
    from kbpack.pack import format as F

    p = Prefixes.from_stamp(stamp)
    return (str(stamp[F.M_SHA256]), p.query, p.document)
