"""The first open of a pack on this machine: HDF5 parses it in a sandboxed child first.

HDF5 is a C library, and a damaged or crafted file can crash it (a few flipped bits in an
object header segfaulted an attribute read, found by bench/fuzz.py) or stall it (a malformed
global heap collection: ``global_heap.py``). ``verify`` parses in a child for that reason; the
reader behind query, inspect, export and the rest parses in-process, for speed. So before a pack
is opened in-process for the first time, a forked child (``verify``'s sandbox: time and memory
limits, no right to write) does with HDF5 what the reader will do outside the protection of
checksums: opens the file, checks the structure allowlist (walking every chunk index), opens
every element and reads every attribute -- through ``global_heap.GuardedFile``, which walks
every global heap collection HDF5 reads (the attributes' strings) before HDF5 sees it. If the
child crashes, stalls or meets a malformed heap, the pack is refused in one line; if it
survives, the pack is remembered (path, size, mtime, ctime, inode and the manifest's digest,
in the user cache) and later opens skip the check. A cache that cannot be written costs only
the repeated check.

The string rows are not read here (issue 35: reading them all, and scanning the whole file for
the collections they live in, was 2.2 s of the 2.4 s this child took at 1M chunks, for rows a
query never reads). The reader checks each row's heap reference as it reads the row
(``PackReader.check_string_rows``): a malformed collection, an object the collection lacks or
a length that is not the object's is refused there, in one line naming the element and the
row, before HDF5 follows it. A column not stored as kbpack writes it (not contiguous: the
reader could not find its references) is still read whole here, after a scan of every
collection of the file. What the child proved is remembered with the state: rows unchecked
(the reader checks them at every open of that state) or proven.

Two other events prove more, and remember the pack too (:func:`remember_parsed`), its rows
proven: this kbpack has just written the file (a writer's commit: the bytes come from its own
data, not from anyone's crafting), and a full ``verify`` found it intact (its sandboxed child
walks every heap of the file and reads every element, attribute and chunk, and more); a reader
of such a state checks no row. So the usual ways a pack
arrives -- built here, or copied and verified on arrival -- open without the pre-flight.

Each of the three also settles the structure allowlist (the child and ``verify`` check it;
this kbpack writes only what it allows), so the reader does not check it again in-process for
a remembered state (``check_parses`` returns True).

A state the child survived without finding it clean (the allowlist refused something, or a
read raised: the reader will refuse the pack in one line naming the element) is remembered as
*survived*: HDF5 parsed all of it in the sandbox without crashing or stalling, which is what
the sandbox is for, so later opens of that state skip the child too and run the allowlist
in-process (``check_parses`` returns False), where it refuses the pack with the same line.
Before, every command on such a pack forked the child again (~25 ms of CPU each on a small
pack; bench/fuzz.py measured 2.7 children per damaged pack over its seven commands).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kbpack.errors import PackError
from kbpack.pack import format as F
from kbpack.pack.manifest import Header
from kbpack.runtime.memo import Memo, digest

MEMO_FOLDER = "parsed-packs"
BASE_TIMEOUT_S = 60.0
BYTES_PER_S = 20e6  # a slow USB stick: the child reads every string and every chunk index


def release_inherited_lock() -> None:
    """In a child forked under :func:`h5py_lock`: let go of the copy of the lock the fork left
    held, so that threads of the child (verify's readers) can take it."""
    with contextlib.suppress(Exception):
        h5py_lock().release()


def h5py_lock() -> Any:
    """h5py's global lock (``phil``, re-entrant: the forking thread, which is the child's only
    thread, may take it again there), or a no-op if a future h5py moves it."""
    try:
        from h5py._objects import phil
    except ImportError:
        return contextlib.nullcontext()
    return phil


# Part of the memo key: bump when what the child checks changes (the structure allowlist of
# structure.py included), so that a pack checked under the old rules is checked again.
MEMO_RULES = 8  # 3: filter pipeline; 4: file datatype; 5: chunk index count; 6: root info,
# chunk index entries, the vectors of a dense pack; 7: counted optional elements (structure.py);
# 8: string rows checked by the reader as it reads them, not read by the child


def memo_key(path: Path, header: Header) -> str:
    """The file's state as the memo knows it. The change time is in it: a write, or a reset of
    the modification time (``touch -d``), sets it to now, and no user can set it back."""
    from kbpack.version import __version__

    st = os.stat(path)
    ident = [str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
    ident += [hashlib.sha256(header.manifest_bytes).hexdigest(), __version__, MEMO_RULES]
    return digest(*ident)


# one memo per file state, in subfolders by the key's first two characters (runtime/memo.py:
# atomic writes, reads that never fail)
_PARSED = Memo(MEMO_FOLDER, fan_out=True)


def _memo(key: str) -> Path:
    return _PARSED.path(key)


def parse_in_child(
    path: str, file_size: int, format_version: int, counts: dict[str, int]
) -> dict[str, Any]:
    """In the sandboxed child: what the reader's HDF5 calls will meet, but the string rows.
    ``heap``: a malformed global heap collection, in words; ``clean``: every step ran without
    an exception (one that raised is left to the reader, whose message names the element; the
    steps after it still run here); ``strings``: the string rows were read here too (a column
    not stored as kbpack writes it: the reader could not check its rows as it reads them). A
    crash or a stall is seen by the parent.

    HDF5 reads the file through ``GuardedFile``: every global heap collection it loads (the
    attributes' strings) is walked before HDF5 sees it. The string rows, the bulk of the heap
    (1.3 s of the 2.4 s this child took at 1M chunks when it read them all), are left to the
    reader, which checks each row's heap reference before HDF5 follows it (``read.py``)."""
    from kbpack.pack.global_heap import GuardedFile

    clean = True

    def step(fn: Any, *args: Any) -> Any:
        nonlocal clean
        try:
            return fn(*args)
        except Exception:
            clean = False
            return None

    with GuardedFile(path) as guard:
        outcome = _parse_guarded(guard, step, file_size, format_version, counts)
        outcome["clean"] = clean and outcome.get("clean", True)
        return outcome


def _parse_guarded(
    guard: Any, step: Any, file_size: int, format_version: int, counts: dict[str, int]
) -> dict[str, Any]:
    """``parse_in_child``'s steps on the open ``GuardedFile``; ``step(fn, *args)`` runs one,
    recording (not raising) its exception. A ``strings`` False leaves the rows to the reader:
    also where the child stopped early (the reader refuses such a pack, or checks its rows)."""
    import h5py

    from kbpack.pack.global_heap import malformed_collections, string_column
    from kbpack.pack.structure import check_structure

    def heap() -> dict[str, Any]:
        more = f" (and {len(guard.problems) - 1} more)" if len(guard.problems) > 1 else ""
        return {"heap": f"HDF5 global heap collection at byte {guard.problems[0]}{more}"}

    try:
        h = h5py.File(guard, "r")
    except Exception:
        return heap() if guard.problems else {"heap": "", "clean": False, "strings": False}
    with h:
        if step(check_structure, h, counts, file_size, format_version) != []:
            if guard.problems:
                return heap()
            return {"heap": "", "clean": False, "strings": False}  # the reader refuses it
        step(lambda: dict(h.attrs.items()))
        sizes = step(lambda: h.id.get_create_plist().get_sizes()) or (0, 0)
        unusual = []
        for el in F.ELEMENTS:
            obj = step(lambda p=el.path: h.get(p))
            if obj is None:
                continue
            step(lambda o=obj: dict(o.attrs.items()))
            if el.dtype and obj.dtype.kind == "O":
                layout = step(string_column, obj.id, sizes, file_size)
                if not isinstance(layout, tuple):
                    unusual.append(obj)
            # a chunked dataset's chunk index (B-tree) is not walked again here: check_structure,
            # which found nothing above, walked every one of them entry by entry
        if guard.problems:
            return heap()
        if unusual:
            # rows the reader cannot check as it reads them: read them all here, as before
            found = malformed_collections(Path(guard.name))
            if found:
                more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
                return {"heap": found[0] + more}
            for obj in unusual:
                step(lambda o=obj: o[()])
        if guard.problems:
            return heap()
    return {"heap": "", "strings": bool(unusual)}


SURVIVED = b"survived"  # the memo's content for a state parsed safely but not found clean
# ... and for a state whose string rows the reader checks as it reads them (the child read
# none of them), clean or survived
ROWS_UNCHECKED = b"rows unchecked"
SURVIVED_ROWS_UNCHECKED = b"survived, rows unchecked"
_STATES = {
    b"": (True, True),
    SURVIVED: (False, True),
    ROWS_UNCHECKED: (True, False),
    SURVIVED_ROWS_UNCHECKED: (False, False),
}


@dataclass(frozen=True)
class Outcome:
    """What the first open proved of a file state (now or remembered).

    ``structure``: the structure allowlist passed (the reader need not run it again);
    ``rows``: the string rows were proven too (this kbpack wrote them, a full verify or the
    child read them all); False: the reader checks each row's global heap reference before
    HDF5 follows it (``global_heap.HeapReferences``)."""

    structure: bool
    rows: bool


def _remember(key: str, clean: bool = True, rows: bool = True) -> None:
    """Record the state's outcome: an empty memo is clean (the first kbpack's memos were
    empty files), ``SURVIVED`` is parsed safely with the allowlist left to the reader, and
    ``*ROWS_UNCHECKED`` the same with the string rows left to the reader. A clean outcome
    replaces a survived one (a rebuilt file is a new state anyway)."""
    _PARSED.write(key, {v: k for k, v in _STATES.items()}[(clean, rows)])


def _recall_outcome(key: str) -> Outcome | None:
    """The remembered outcome; None: not remembered (or the memo cannot be read, or holds
    what this kbpack does not write)."""
    data = _PARSED.read(key)
    state = _STATES.get(data) if data is not None else None
    return Outcome(*state) if state is not None else None


def _recall(key: str) -> bool | None:
    """True: clean; False: survived; None: not remembered (or the memo cannot be read)."""
    outcome = _recall_outcome(key)
    return outcome.structure if outcome is not None else None


def remember_parsed(path: Path, header: Header | None = None, seen: str = "") -> None:
    """Record that ``path``, as it is now, is safe to parse in-process (see the module
    docstring for who may say so); ``seen``: the file's ``memo_key`` when the proof began
    (nothing is recorded if the file changed since). Never fails: a memo that cannot be
    written costs only the pre-flight at the next open."""
    from kbpack.pack.manifest import read_header

    with contextlib.suppress(Exception):
        key = memo_key(path, header or read_header(path))
        if not seen or key == seen:
            _remember(key)


def is_remembered(path: Path, header: Header) -> bool:
    """Whether this state of ``path`` is remembered as parsed (the next open forks no child)."""
    try:
        return _PARSED.has(memo_key(path, header))
    except OSError:
        return False


def is_remembered_clean(path: Path, header: Header) -> bool:
    """Whether this state of ``path`` is remembered as clean (not merely survived), its
    string rows included (a state whose rows are checked as read is not: what is remembered
    of it must not be carried over to a state proven whole, e.g. by ``sign``)."""
    try:
        return _recall_outcome(memo_key(path, header)) == Outcome(True, True)
    except OSError:
        return False


def check_parses(
    path: Path, header: Header, file_size: int, where: str | os.PathLike[str] | None = None
) -> bool:
    """``first_open(...).structure`` (kept for callers of the earlier API)."""
    return first_open(path, header, file_size, where).structure


def first_open(
    path: Path, header: Header, file_size: int, where: str | os.PathLike[str] | None = None
) -> Outcome:
    """Raise PackError in one line if HDF5 cannot safely parse ``path`` (see the module
    docstring); return at once for a pack already checked on this machine.

    ``structure`` True: this very state is proven (the child found it clean now, the structure
    allowlist included, or it is remembered: see the module docstring), so the reader need not
    run ``check_structure`` again (~13 ms of a cold query on the fixtures pack, more with more
    objects). False: run it (the child survived the state but did not find it clean, now or
    remembered). ``rows`` False: check string rows as they are read. Messages name ``where``
    (default ``path``)."""
    shown = where if where is not None else path
    try:
        key = memo_key(path, header)
    except OSError:
        key = ""
    remembered = _recall_outcome(key) if key else None
    if remembered is not None:
        return remembered
    from kbpack.runtime.sandbox import Isolated, Limits, SandboxFailure

    m = header.manifest
    limits = Limits(timeout_s=BASE_TIMEOUT_S + file_size / BYTES_PER_S)
    args: tuple[Any, ...] = (str(path), file_size, m.format_version, m.counts)
    try:
        # Forked holding h5py's global lock: a thread of this process (serve's request
        # threads) inside h5py at the moment of the fork would leave the child's copy of the
        # lock held by nobody, and the child would wait for it until its time limit.
        with h5py_lock():
            child = Isolated(parse_in_child, args, limits)
        try:
            result = child.result()
        finally:
            child.cancel()
    except SandboxFailure as e:
        raise PackError(
            f"{shown}: refused: {e.detail}: the pack is damaged or hostile; run kbpack verify "
            f"{shown}, then copy the pack again"
        ) from e
    if result["heap"]:
        raise PackError(
            f"{shown}: damaged: {result['heap']}; run kbpack verify {shown}, then copy the pack "
            "again"
        )
    outcome = Outcome(bool(result["clean"]), bool(result["strings"]))
    if key:
        _remember(key, clean=outcome.structure, rows=outcome.rows)
    return outcome
