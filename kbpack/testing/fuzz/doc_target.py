"""Mutated documents through the extraction worker process a build uses (``extract_all``), in
batches, each Document judged:

* ``crash`` / ``hang``: the worker died or ran past the time limit (the build records the
  document as failed with stage ``crash`` / ``timeout`` and goes on; the fuzzer still counts
  it, because the parser should refuse the file rather than die on it);
* ``internal-error``: ``extract_all`` itself raised (that would stop a build), a document
  failed with a bare Python exception (``IndexError: ...``: a bug in kbpack's extractor, not a
  reason a user can act on), or the extracted Document breaks what the next stages rely on
  (text a pack cannot store, section or page offsets outside the text, a parent after its
  child) or chunking it raises or gives a chunk whose offsets do not select its text;
* ``not-one-line``: a failure reason of more than one line.
"""

from __future__ import annotations

import random
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from kbpack.extract.common import kind_of
from kbpack.extract.discover import Candidate
from kbpack.extract.limits import Limits
from kbpack.testing.fuzz.doc_mutations import mutate
from kbpack.testing.fuzz.runner import Finding, FuzzResult, scratch_dir
from kbpack.text.document import Document

# Exceptions that only a bug raises: a library's own error classes (PdfiumError,
# PackageNotFoundError, XMLSyntaxError, BadZipFile) describe the file, and stay reasons.
BUG_EXCEPTIONS = (
    "AssertionError",
    "AttributeError",
    "IndexError",
    "KeyError",
    "NameError",
    "TypeError",
    "UnboundLocalError",
    "ZeroDivisionError",
)


@dataclass(frozen=True)
class DocSeed:
    name: str
    kind: str
    suffix: str
    data: bytes

    @classmethod
    def load(cls, path: Path) -> DocSeed:
        kind = kind_of(path)
        if kind is None:
            raise ValueError(f"{path}: not a type kbpack extracts")
        return cls(path.name, kind, path.suffix, path.read_bytes())


def document_problem(doc: Document) -> str | None:
    """What about an extracted Document would break chunking or writing, in words."""
    from kbpack.index.chunk import ChunkConfig, chunk_document

    if doc.status in ("failed", "skipped"):
        if "\n" in doc.reason or "\r" in doc.reason:
            return "not-one-line: " + doc.reason[:200]
        name = doc.reason.split(":", 1)[0]
        if doc.stage == "extract" and name in BUG_EXCEPTIONS:
            return "internal-error: " + doc.reason[:200]
        return None
    text = doc.text
    if "\x00" in text:
        return "internal-error: the text holds NUL (h5py refuses it)"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "internal-error: the text holds a lone surrogate (h5py refuses it)"
    n = len(text)
    for i, s in enumerate(doc.sections):
        if not (0 <= s.start <= s.end <= n) or not (-1 <= s.parent < max(i, 1)):
            return f"internal-error: section {i} {s.start}:{s.end} parent {s.parent} (text {n})"
    for p in doc.pages:
        if not (0 <= p.start <= p.end <= n) or p.number < 1:
            return f"internal-error: page {p.number} {p.start}:{p.end} (text {n})"
    try:
        chunks = chunk_document(doc, None, ChunkConfig(window=None, max_chars=400)).chunks
    except Exception as e:
        return f"internal-error: chunking raised {type(e).__name__}: {e}"[:240]
    for c in chunks:
        if not (0 <= c.start <= c.end <= n) or not (0 <= c.section < len(doc.sections)):
            return f"internal-error: chunk {c.start}:{c.end} section {c.section} (text {n})"
    return None


class DocFuzzer:
    """Mutants of ``seeds`` through the extraction worker, ``batch`` documents per worker."""

    def __init__(self, seeds: list[Path], timeout_s: float = 30.0, batch: int = 200) -> None:
        self.seeds = [DocSeed.load(p) for p in seeds]
        self.limits = Limits(timeout_s=timeout_s)
        self.batch = batch
        self.scratch = scratch_dir()

    def close(self) -> None:
        shutil.rmtree(self.scratch, ignore_errors=True)

    def __enter__(self) -> DocFuzzer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def mutant(self, kind: str, run_seed: int, index: int) -> tuple[DocSeed, bytes, str]:
        rng = random.Random(f"{run_seed}:{kind}:{index}")
        seed = rng.choice([s for s in self.seeds if s.kind == kind])
        data, label = mutate(seed.data, kind, rng)
        return seed, data, label

    def run(
        self,
        kind: str,
        executions: int,
        run_seed: int = 1,
        start: int = 0,
        deadline_s: float | None = None,
    ) -> FuzzResult:
        from kbpack.extract.worker import extract_all

        result = FuzzResult(f"extractor {kind}")
        t0 = time.monotonic()
        index = start
        while index < start + executions:
            if deadline_s is not None and time.monotonic() - t0 > deadline_s:
                break
            folder = self.scratch / "batch"
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            labels: dict[str, tuple[int, str]] = {}
            candidates = []
            for i in range(index, min(index + self.batch, start + executions)):
                seed, data, label = self.mutant(kind, run_seed, i)
                name = f"{i}{seed.suffix}"
                (folder / name).write_bytes(data)
                labels[name] = (i, f"{seed.name}: {label}")
                candidates.append(Candidate(folder / name, name, kind))
            try:
                docs = list(extract_all(candidates, self.limits))
            except Exception as e:
                first = candidates[0].name
                result.findings.append(
                    Finding(
                        "internal-error",
                        run_seed,
                        labels[first][0],
                        "batch",
                        "build",
                        f"extract_all raised {type(e).__name__}: {e}"[:240],
                    )
                )
                docs = []
            for doc in docs:
                i, label = labels[doc.name]
                result.executions += 1
                result.outcomes[
                    doc.status if doc.status == "ok" else f"{doc.status} ({doc.stage})"
                ] += 1
                if doc.stage in ("crash", "timeout"):
                    kind_ = "crash" if doc.stage == "crash" else "hang"
                    result.findings.append(
                        Finding(kind_, run_seed, i, label, kind, doc.reason[:240])
                    )
                    continue
                problem = document_problem(doc)
                if problem:
                    what, _, detail = problem.partition(": ")
                    result.findings.append(Finding(what, run_seed, i, label, kind, detail))
            index += len(candidates)
        result.commands = result.executions
        result.seconds = time.monotonic() - t0
        return result


DEFAULT_SEEDS = (
    "fixtures/hostile/mixed-pages.pdf",
    "fixtures/hostile/vector-only.pdf",
    "fixtures/docs/reportlab/reportlab-userguide-ch7-tables.pdf",
    "fixtures/docs/sqlite/sqlite-null-handling.docx",
    "fixtures/docs/sqlite/sqlite-isolation.docx",
    "fixtures/docs/sqlite/datatype3.html",
    "fixtures/docs/pypdf/README.md",
    "fixtures/hostile/crlf.md",
    "fixtures/hostile/latin1.txt",
    "fixtures/hostile/utf16-bom.txt",
)
