"""``kbpack verify``, one module per step, in the order the data flows through them.

- ``pipeline`` runs the steps below in order and returns a ``report.VerifyReport``.
- ``file_bytes`` (step 1): the user-block header, the file's size and the SHA-256 of its bytes.
- ``signature`` (step 2): the signature against keys the user trusts.
- ``sandbox``: the forked, limited child in which HDF5 parses the untrusted file (steps 3-5).
- ``examine``: what that child does: step 3, the structure allowlist
  (``kbpack.pack.structure``, shared with the reader), then steps 4 and 5 on what it allowed.
- ``exam_state``: the values and findings the child collects, shared by steps 4 and 5.
- ``digests`` (step 4): every element's data and attributes against the manifest's digests.
- ``invariants`` (step 5): ``text`` (documents, sections, pages, chunks, counts), ``vectors``,
  ``pieces`` and ``bm25``.
- ``report``: the findings, a status and a one-line summary per step.
"""
