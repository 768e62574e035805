"""Several packs searched as one (``kbpack query A.kbpack B.kbpack TEXT``, ``kbpack.open_many``).

The packs are laid end to end: chunk ``c`` of pack ``i`` is chunk ``base[i] + c`` of the set,
which is the row it would have in a pack merged from them in the same order. Every step of
``search.Searcher.search`` (fusion, refusal gate, citations) runs unchanged on those ids; only
the ``Corpus`` primitives below (``SetCorpus``) are answered across packs:

* BM25 uses collection statistics summed over the packs -- N, each term's document frequency,
  the mean chunk length -- so every score equals the one a merged pack gives (tested).
* Dense search needs one model identity (the GGUF's SHA-256) across the packs; the query is
  embedded once. Packs of different models are searched lexically only, and say so.
* The refusal threshold of a result is its own pack's (calibrated) threshold unless the caller
  gives one.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from kbpack.errors import UsageError
from kbpack.pack import format as F
from kbpack.pack.copies import NEAR_THRESHOLD, Fingerprint, WordHashes, fingerprint, similarity
from kbpack.pack.read import PackReader
from kbpack.search.bm25 import length_norms, term_scores
from kbpack.search.bm25_top import TermList
from kbpack.search.corpus import PackCorpus
from kbpack.search.dense import DenseScores
from kbpack.search.opened import OpenedForSearch
from kbpack.search.results import Ranking, Result
from kbpack.search.searcher import Searcher
from kbpack.text.analyze import query_terms

# Contributions kept for query terms seen before, up to this many postings (16 bytes each)
_MEMO_POSTINGS = 4_000_000


class SetCorpus:
    """Several packs as one ``Corpus``; ``members`` are each pack's own ``PackCorpus``."""

    def __init__(self, members: Sequence[PackCorpus], names: Sequence[str] | None = None) -> None:
        """``names``: what each result's ``pack`` says (default: each pack's file name)."""
        if not members:
            raise ValueError("a pack set needs at least one pack")
        self.members = list(members)
        self.where = self.members[0].where
        self.names = list(names) if names is not None else [m.r.path.name for m in members]
        sizes = [m.n_chunks() for m in self.members]
        self.base = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
        params = {m.r.bm25_params for m in self.members}
        if len(params) > 1:
            raise UsageError(
                f"{self.members[1].r.path}: BM25 parameters (k1, b) differ between the packs "
                f"({sorted(params)}); they cannot be scored as one"
            )
        self.k1, self.b = params.pop()
        analyzers = {m.analyzer_name for m in self.members}
        if len(analyzers) > 1:
            shown = sorted(a or "plain" for a in analyzers)
            raise UsageError(
                f"{self.members[1].r.path}: BM25 analyzers differ between the packs ({shown}); "
                "rebuild them with one --analyzer to search them as one"
            )
        self.analyzer_name = analyzers.pop()
        self._norms: np.ndarray | None = None
        self._queries = 0
        self._in_memory = False  # postings read whole (from the second query on)
        self._parts: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
        self._cached = 0  # postings held in _parts
        self._word_hashes = WordHashes()  # cross-pack copies: fingerprints of results
        self._lock = threading.Lock()

    # -- where a set chunk lives ---------------------------------------------------------------
    def locate(self, chunk: int) -> tuple[int, int]:
        """(member index, chunk row inside that pack) of set chunk ``chunk``."""
        i = int(np.searchsorted(self.base, chunk, side="right")) - 1
        return i, int(chunk - self.base[i])

    def answerer(self, chunk: int) -> int:
        """Each pack answers a query or not by its own threshold (``Searcher.search``)."""
        return self.locate(chunk)[0]

    def n_chunks(self) -> int:
        return int(self.base[-1])

    def prepare(self, vectors: bool) -> None:
        """Map each pack's vectors now (a server pays once at start)."""
        if vectors:
            for m in self.members:
                m.r.stored_rows(F.VEC_DATA)

    def use_ivf(self, exact: bool, probe: int | None) -> None:
        for m in self.members:
            m.use_ivf(exact, probe)

    def read_ahead(self, loading: Callable[[], bool]) -> None:
        """Nothing: a set's model is loaded before its first search."""

    # -- BM25 with summed statistics -----------------------------------------------------------
    def terms(self, query: str) -> list[TermList]:
        n = self.n_chunks()
        with self._lock:
            if self._norms is None:
                # One mean length over every chunk of the set, computed as a merged pack would.
                lengths = [m.r.column(F.BM25_DOC_LEN) for m in self.members]
                self._norms = length_norms(np.concatenate(lengths), self.k1, self.b)
            self._queries += 1
            if self._queries == 2:
                # A second query means batch mode, a server or the API: from now on read each
                # pack's postings from memory (one read each) instead of slicing HDF5 per term.
                self._in_memory = True
        # One list per term, its packs' parts end to end (set ids ascend across packs), in the
        # query's order: each chunk's terms are summed in the order a merged pack sums them, so
        # the scores are equal to the last bit, not merely close.
        out = []
        for term in query_terms(query, self.analyzer_name):
            parts = self._term_parts(term, n)
            if parts:
                ids = np.concatenate([p[0] for p in parts])
                out.append(TermList(ids, np.concatenate([p[1] for p in parts])))
        return out

    def _term_parts(self, term: str, n: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """``term``'s contribution to every chunk of the set holding it, one part per pack:
        (set chunk ids, scores) with the set's idf and length norms. Memoised per term (the
        statistics of a set never change)."""
        cached = self._parts.get(term)
        if cached is not None:
            return cached
        spans = []  # (member, lo, hi): the term's postings in each pack holding it
        for i, m in enumerate(self.members):
            row = m.postings.lookup().find(term)
            if row is not None:
                indptr = m.postings.indptr()
                spans.append((i, int(indptr[row]), int(indptr[row + 1])))
        df = sum(hi - lo for _, lo, hi in spans)
        assert self._norms is not None
        parts = []
        for i, lo, hi in spans:
            m = self.members[i]
            a, b = int(self.base[i]), int(self.base[i + 1])
            read = m.r.column if self._in_memory else m.r.dataset
            ids, scores = term_scores(
                lo, hi, read(F.BM25_CHUNK), read(F.BM25_TF), n, self._norms[a:b], self.k1, df=df
            )
            parts.append((ids.astype(np.int64) + a, scores))
        size = sum(len(x) for x, _ in parts)
        with self._lock:
            if self._cached + size > _MEMO_POSTINGS:
                self._parts.clear()
                self._cached = 0
            self._parts[term] = parts
            self._cached += size
        return parts

    def doc_freq(self, term: str) -> int:
        return sum(m.doc_freq(term) for m in self.members)

    def header_freq(self, term: str) -> int:
        return sum(m.header_freq(term) for m in self.members)

    def near_terms(self, word: str) -> dict[str, tuple[int, int]]:
        merged: dict[str, tuple[int, int]] = {}
        for m in self.members:
            for term, (d, n) in m.near_terms(word).items():
                merged[term] = (d, merged.get(term, (d, 0))[1] + n)
        return merged

    # -- dense ---------------------------------------------------------------------------------
    def query_prefix(self) -> str:
        return self.members[0].query_prefix()  # one query vector serves every pack

    def dense_scores(self, q: np.ndarray) -> DenseScores:
        # each pack scores its own chunks (with its pieces, if it has them)
        return DenseScores.concatenate([m.dense_scores(q) for m in self.members], self.base[:-1])

    def dense_scores_many(self, queries: np.ndarray) -> list[DenseScores]:
        per_pack = [m.dense_scores_many(queries) for m in self.members]
        return [
            DenseScores.concatenate([p[j] for p in per_pack], self.base[:-1])
            for j in range(len(queries))
        ]

    def checked_scores(self, q: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        score = np.empty(ids.size, np.float32)
        cos = np.empty(ids.size, np.float32)
        for at, c in enumerate(ids):
            i, local = self.locate(int(c))
            s, x = self.members[i].checked_scores(q, np.array([local]))
            score[at], cos[at] = s[0], x[0]
        return score, cos

    # -- filters, thresholds, citations --------------------------------------------------------
    def mask(self, doc: str | None, kind: str | None, section: str | None) -> np.ndarray | None:
        masks = [m.mask(doc, kind, section) for m in self.members]
        if all(x is None for x in masks):
            return None
        sizes = np.diff(self.base)
        return np.concatenate(
            [
                np.ones(int(s), dtype=bool) if x is None else x
                for x, s in zip(masks, sizes, strict=True)
            ]
        )

    def default_threshold(self) -> float:
        """The loosest of the packs' thresholds (what a refusal message names); each result is
        held to its own pack's threshold (``threshold``)."""
        return max(m.default_threshold() for m in self.members)

    def threshold(self, chunk: int) -> float:
        i, _ = self.locate(chunk)
        return self.members[i].default_threshold()

    def chunk_content(self, chunk: int) -> str:
        i, local = self.locate(chunk)
        return self.members[i].chunk_content(local)

    def result(self, c: int, at: Ranking, context: str) -> Result:
        i, local = self.locate(c)
        r = self.members[i].result(local, at, context)
        r.pack = self.names[i]
        return r

    # -- copies: each pack's stored groups, and copies across packs found among the results ----
    def copy_group(self, chunk: int) -> Any | None:
        i, local = self.locate(chunk)
        group = self.members[i].copy_group(local)
        return None if group is None else (i, group)

    def copy_members(self, chunk: int) -> list[int]:
        i, local = self.locate(chunk)
        return [int(self.base[i]) + c for c in self.members[i].copy_members(local)]

    def list_copies(self, chunk: int, res: Result, context: str = "chunk") -> None:
        i, local = self.locate(chunk)
        self.members[i].list_copies(local, res, context, f"{self.names[i]}: ")

    def near_copy_in(
        self, chunk: int, ids: Sequence[int], shown: Sequence[Result]
    ) -> Result | None:
        """A result of another pack whose chunk is a copy of this one by the rule each pack's
        groups were made with (kbpack/pack/copies.py): the same manual in two packs of a set is one
        result. Only between packs that store groups (0.2.0 packs keep identical-words only)."""
        i, _ = self.locate(chunk)
        if self.members[i].copy_groups() is None:
            return None
        mine = self._fingerprint(chunk)
        if mine.key is None:
            return None
        for c, other in zip(ids, shown, strict=True):  # (a few results: no memo needed)
            j, _ = self.locate(c)
            if j == i or self.members[j].copy_groups() is None:
                continue
            theirs = self._fingerprint(c)
            near = (
                mine.signature is not None
                and theirs.signature is not None
                and similarity(mine.signature, theirs.signature) >= NEAR_THRESHOLD
            )
            if mine.key == theirs.key or near:
                return other
        return None

    def _fingerprint(self, chunk: int) -> Fingerprint:
        """The fingerprint of set chunk ``chunk`` (its own words, whatever ``--context``)."""
        i, local = self.locate(chunk)
        return fingerprint(self.members[i].chunk_content(local), self._word_hashes)


def SetSearcher(
    members: Sequence[Searcher],
    embedder: Any | None,
    notes: Sequence[str] = (),
    names: Sequence[str] | None = None,
) -> Searcher:
    """A ``Searcher`` over the packs of ``members`` (each pack's own searcher) as one."""
    corpora = [m.corpus for m in members]
    assert all(isinstance(c, PackCorpus) for c in corpora)
    return Searcher(SetCorpus(corpora, names), embedder, notes)  # type: ignore[arg-type]


class PackSet(OpenedForSearch):
    """Packs opened together and searched as one: ``kbpack.open_many([...])``."""

    def __init__(
        self,
        paths: Sequence[str | os.PathLike[str]],
        model: str | os.PathLike[str] | None = None,
        load_model: bool = True,
        threads: int | None = None,
        rerank: str | os.PathLike[str] | None = None,
        require_signature: bool = False,
        allow_unsigned: bool = False,
        key: str | os.PathLike[str] | None = None,
    ) -> None:
        if not paths:
            raise UsageError("give at least one pack")
        from kbpack.pack.sign import SignaturePolicy

        policy = SignaturePolicy(Path(key) if key else None, require_signature, allow_unsigned)
        from kbpack.pack.set_publish import committed_members

        given = [Path(p) for p in paths]
        # a set's members are those of the set its member 001 commits (kbpack/pack/set_publish.py)
        files, self.set_notes = committed_members(given)
        self.readers: list[PackReader] = []
        try:
            for p in files:
                self.readers.append(PackReader(p))
                policy.enforce(self.readers[-1].header, p)  # before anything else is read
        except BaseException:
            self.close()
            raise
        self.paths = [r.path for r in self.readers]
        self._model_arg = Path(model) if model else None
        self._rerank_arg = Path(rerank) if rerank else None
        self._load_model = load_model
        self._threads = threads
        self._searcher: Searcher | None = None
        self.mixed_models = model_mismatch(self.readers)

    def close(self) -> None:
        for r in self.readers:
            r.close()

    @property
    def n_chunks(self) -> int:
        return sum(int(r.counts.get("chunks", 0)) for r in self.readers)

    def _assemble(self) -> Searcher:
        from kbpack.search.assemble import assemble

        return assemble(
            self.readers,
            model=self._model_arg,
            load_model=self._load_model,
            threads=self._threads,
            rerank=self._rerank_arg,
            notes=[*self.set_notes, *_incomplete_sets(self.readers)],
        )

    def _check_mode(self, mode: str) -> None:
        if mode == "dense" and self.mixed_models:
            raise UsageError(
                f"{self.mixed_models}: --mode dense needs one model; use hybrid or bm25"
            )


def _incomplete_sets(readers: Sequence[PackReader]) -> list[str]:
    """Notes for pack sets (``build --split-size``) of which not every member was given."""
    given: dict[str, set[int]] = {}
    count: dict[str, int] = {}
    for r in readers:
        info = r.manifest.extra.get("set")
        if isinstance(info, dict) and "id" in info:
            given.setdefault(str(info["id"]), set()).add(int(info.get("index", 0)))
            count[str(info["id"])] = int(info.get("count", 0))
    notes = []
    for set_id, indexes in given.items():
        # bounded by the members given, not by the count they claim (issue 30, found 7)
        given_in = {i for i in indexes if 1 <= i <= count[set_id]}
        n_missing = count[set_id] - len(given_in)
        if n_missing <= 0:
            continue
        top = min(count[set_id], len(given_in) + 10)
        first = [i for i in range(1, top + 1) if i not in given_in][:10]
        listed = ", ".join(f"{i:03d}" for i in first) + (", ..." if n_missing > 10 else "")
        notes.append(
            f"pack set {set_id}: members {listed} ({n_missing}) of {count[set_id]} were not "
            "given; their documents are not searched"
            if n_missing > 10
            else f"pack set {set_id}: members {listed} of {count[set_id]} were not given; "
            "their documents are not searched"
        )
    return notes


def model_mismatch(readers: Sequence[PackReader]) -> str | None:
    """Why the packs' vectors cannot be compared (a one-line reason), or None when they can."""
    first = readers[0]
    want = first.model
    for r in readers[1:]:
        got = r.model
        if (want is None) != (got is None):
            plain, dense = (first, r) if want is None else (r, first)
            return f"{plain.path} has no vectors but {dense.path} has"
        if want is not None and got is not None and got[F.M_SHA256] != want[F.M_SHA256]:
            return (
                f"{r.path} was embedded with {got[F.M_NAME]} (sha256 {str(got[F.M_SHA256])[:12]}), "
                f"{first.path} with {want[F.M_NAME]} (sha256 {str(want[F.M_SHA256])[:12]})"
            )
        if want is not None and got is not None:
            from kbpack.model.prefixes import Prefixes

            # One query vector serves every pack: their query/document prefixes must agree.
            theirs, ours = Prefixes.from_stamp(got), Prefixes.from_stamp(want)
            if theirs != ours:
                return f"{r.path} was embedded with prefixes {theirs}, {first.path} with {ours}"
    return None


_model_mismatch = model_mismatch  # the name serve/library.py imports

__all__ = ["PackSet", "SetCorpus", "SetSearcher", "model_mismatch"]
