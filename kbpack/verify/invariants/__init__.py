"""Verify step 5, the invariants: one module per part of the pack, each a mixin of ``ExamState``
(``text``: documents, sections, pages, chunks, counts; ``vectors``; ``pieces``; ``bm25``)."""
