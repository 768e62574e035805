"""What ``kbpack.open`` (``kbpack.api.Pack``) and ``kbpack.open_many``
(``kbpack.search.federate.PackSet``) share: a searcher assembled on first use, and ``search``
through it. Imports nothing at run time, so ``kbpack.api`` stays cheap to import."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self

if TYPE_CHECKING:
    from kbpack.search.searcher import Searcher, SearchResponse


class OpenedForSearch:
    """The searching half of an opened pack or pack set; ``_assemble`` builds its searcher."""

    _searcher: Searcher | None = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        raise NotImplementedError

    def _assemble(self) -> Searcher:
        """The searcher (and its embedder), built the first time one is needed."""
        raise NotImplementedError

    def _check_mode(self, mode: str) -> None:
        """Refuse a search ``mode`` these packs cannot answer (UsageError); every mode here."""

    @property
    def searcher(self) -> Searcher:
        if self._searcher is None:
            self._searcher = self._assemble()
        return self._searcher

    @property
    def embedder(self) -> Any | None:
        return self.searcher.embedder

    def search(
        self,
        query: str,
        k: int = 5,
        mode: str = "hybrid",
        *,
        exact: bool = False,
        probe: int | None = None,
        **kw: Any,
    ) -> SearchResponse:
        """``exact``: scan every vector even in a pack with an approximate (IVF) index;
        ``probe``: the index's lists a query reads (None: the pack's default)."""
        self.searcher.use_ivf(exact, probe)
        self._check_mode(mode)
        return self.searcher.search(query, k=k, mode=mode, **kw)
