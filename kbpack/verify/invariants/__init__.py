"""Verify step 5, the invariants: one module per part of the pack, each a mixin of ``ExamState``
(``manifest``: root stamps, element attributes, counts; ``text``: documents, sections, pages,
chunks; ``vectors``; ``pieces``; ``bm25`` with ``bm25_dense``). The optional groups share
``ExamState._optional_group``, their count in the manifest exactly when the group is there."""
