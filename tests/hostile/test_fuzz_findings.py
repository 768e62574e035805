"""Regression tests for what bench/fuzz.py found, each on a fixed input.

1. A zeroed sector at the tail of an HDF5 global heap collection (a free-space object of size
   0) made HDF5 2.0.0 loop forever on the first string read: inspect, export and query hung,
   verify stopped only at its 600 s sandbox limit. Now every command refuses it in one line.
2. A few flipped bits in HDF5 metadata segfaulted an attribute read inside inspect. The first
   open of a pack now lets HDF5 parse it in a sandboxed child (kbpack/pack/preflight.py).
3. A NaN in a vector of a pack whose digests were rewritten to match made hybrid query die with
   "internal error: ValueError: every candidate needs a finite cosine similarity".
4. A row number out of range in such a pack (/chunks/document, /sections/parent, ...) made
   export and query die with "internal error: IndexError".
5. HTML with ``<![C`` (a marked section Python's parser does not know) failed its document
   with "AssertionError: unknown status keyword 'C' in marked section".
6. A /documents/warnings row that is not a JSON array of strings, in a pack whose digests were
   rewritten to match, made export --what documents die with "internal error: JSONDecodeError".
7. A root kbpack:pipeline_version that is not a whole number made inspect and migrate die with
   "internal error: ValueError", and verify passed the pack.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from kbpack.pack import format as F
from kbpack.pack.global_heap import SIGNATURE, collection_problem, malformed_collections
from kbpack.pack.preflight import MEMO_FOLDER
from tests.fixture_pack import kbpack, stall_heap
from tests.paths import REPO_ROOT

REPO = REPO_ROOT
GOLDEN = REPO / "fixtures" / "golden" / "v2.kbpack"
# the same pack as kbpack wrote it before 2026-12-02, with HDF5 structures that carry no
# checksum (spec §1): the findings that poke those bytes stay refused by the readers' own
# checks (tests/pack/test_metadata_checksums.py pokes the same places of GOLDEN)
EARLIEST = REPO / "fixtures" / "golden" / "v2-earliest.kbpack"


def collection(*objects: tuple[int, int], size: int = 4096) -> bytes:
    """A global heap collection of ``size`` bytes holding ``objects`` (index, object size)."""
    out = bytearray(SIGNATURE + size.to_bytes(8, "little"))
    for index, n in objects:
        out += index.to_bytes(2, "little") + bytes(6) + n.to_bytes(8, "little")
        if index:
            out += bytes(min((n + 7) // 8 * 8, size))
    return bytes(out.ljust(size, b"\0"))


def test_collection_walk_refuses_what_would_stall_or_overrun_hdf5() -> None:
    free = 4096 - 16 - (16 + 8)
    assert collection_problem(collection((1, 5), (0, free)), 0) is None
    assert collection_problem(collection((1, 4096 - 32)), 0) is None  # full: no free object
    assert "has size 0" in str(collection_problem(collection((1, 5), (0, 0)), 0))
    assert "runs past" in str(collection_problem(collection((1, 2**40)), 0))
    assert "twice" in str(collection_problem(collection((1, 5), (1, 5), (0, free - 24)), 0))
    assert "past the end of the file" in str(collection_problem(collection((1, 5))[:100], 0))


def test_a_stalled_heap_is_refused_in_one_line_by_every_command(tmp_path: Path) -> None:
    pack = Path(shutil.copy(GOLDEN, tmp_path / "stalled.kbpack"))
    at = stall_heap(pack)
    assert malformed_collections(pack) and str(at) in malformed_collections(pack)[0]
    cache = tmp_path / "cache"
    for args in (
        ["inspect", str(pack)],
        ["export", str(pack), "--what", "sections"],
        ["query", str(pack), "--mode", "bm25", "--", "pypdf"],
    ):
        r = kbpack(*args, cache=cache)
        assert r.returncode == 1, (args, r.stderr)
        assert r.stderr.count("\n") == 1 and "global heap collection at byte" in r.stderr
    r = kbpack("verify", str(pack), cache=cache)
    assert r.returncode == 1 and "heap-malformed" in r.stdout


def test_the_first_open_check_is_remembered_per_file_state(tmp_path: Path) -> None:
    from kbpack.errors import PackError
    from kbpack.pack.read import PackReader

    pack = Path(shutil.copy(GOLDEN, tmp_path / "p.kbpack"))
    PackReader(pack).close()
    memos = list((tmp_path / "cache" / MEMO_FOLDER).rglob("*"))
    assert [m for m in memos if m.is_file()], "an intact pack is remembered"
    stall_heap(pack)  # same path and size: the file's mtime and the check change
    with pytest.raises(PackError, match="global heap collection"):
        PackReader(pack)


def test_a_non_finite_vector_is_one_line_naming_the_element(
    tmp_path: Path, tiny_model: Path
) -> None:
    import numpy as np

    src = tmp_path / "docs"
    src.mkdir()
    (src / "a.md").write_text("# Pumps\n\nThe seal of pump P-101 is checked every 500 hours.\n")
    pack = tmp_path / "p.kbpack"
    cache = tmp_path / "cache"
    model = ["--model", str(tiny_model)]
    r = kbpack("build", str(src), "-o", str(pack), *model, "--no-pieces", "-q", cache=cache)
    assert r.returncode == 0, r.stderr

    def nan(vectors: Any) -> None:
        vectors[0, 3] = np.nan

    rewrite(pack, F.VEC_DATA, nan)
    r = kbpack("query", str(pack), *model, "--", "pump seal", cache=cache)
    assert r.returncode == 1, r.stderr
    assert r.stderr.count("\n") == 1
    assert f"{F.VEC_DATA} is damaged (the vectors of chunk 0 are not finite" in r.stderr


def rewrite(pack: Path, path: str, change: Any) -> None:
    """Rewrite one dataset through HDF5 (``change(values)`` edits them in place) and every
    digest to match: a pack consistent with its own manifest."""
    import h5py

    from kbpack.pack.storage import create_dataset
    from kbpack.testing.fuzz.pack_mutations import element_digests, restamp

    with h5py.File(pack, "r+") as h:
        values = h[path][()]
        change(values)
        attrs = dict(h[path].attrs.items())
        del h[path]
        ds = create_dataset(h, path, data=values)
        for k, v in attrs.items():
            ds.attrs[k] = v
        digests = element_digests(h)
    restamp(pack, "elements", digests)


@pytest.mark.parametrize(
    ("column", "value", "command"),
    [
        (F.CHUNK_DOCUMENT, 7, ["export", "--what", "chunks"]),
        (F.CHUNK_SECTION, 2**31 - 1, ["export", "--what", "chunks"]),
        (F.SEC_DOCUMENT, -1, ["export", "--what", "sections"]),
        (F.SEC_PARENT, 2**31 - 1, ["query", "--mode", "bm25"]),
    ],
)
def test_a_row_number_out_of_range_is_one_line_naming_the_column(
    tmp_path: Path, column: str, value: int, command: list[str]
) -> None:
    pack = Path(shutil.copy(GOLDEN, tmp_path / "p.kbpack"))

    def poke(values: Any) -> None:
        if command[0] == "query":  # a citation reads only the rows it walks (a part read)
            values[:] = value
        else:
            values[len(values) // 2] = value

    rewrite(pack, column, poke)
    argv = [command[0], str(pack), *command[1:]]
    if command[0] == "query":
        argv += ["--", "pypdf"]
    r = kbpack(*argv, cache=tmp_path / "cache")
    assert r.returncode == 1, r.stderr
    assert r.stderr.count("\n") == 1 and f"{column} is damaged (row " in r.stderr
    assert "outside" in r.stderr and "internal error" not in r.stderr


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KBPACK_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.parametrize("section", ["<![C x]>", "<![CDA", "<![ if !IE ]>", "<![CDATA[x]]>"])
def test_an_unknown_marked_section_is_a_bogus_comment(tmp_path: Path, section: str) -> None:
    from kbpack.extract.file import extract_file

    page = tmp_path / "p.html"
    page.write_text(f"<title>T</title><p>alpha</p>{section}<p>beta gamma</p>", encoding="utf-8")
    doc = extract_file(page, "p.html")
    assert doc.status == "ok", doc.reason
    assert doc.text.startswith("alpha")
    assert "beta gamma" in doc.text or section == "<![CDA"  # an unclosed one eats the rest


def test_vocabulary_offsets_out_of_order_are_one_line(tmp_path: Path) -> None:
    """bench/fuzz.py packs 12:783: /bm25/terms_offsets poked, digests rewritten to match;
    did-you-mean's np.repeat raised ValueError (negative lengths) in query."""
    pack = Path(shutil.copy(GOLDEN, tmp_path / "p.kbpack"))

    def poke(values: Any) -> None:
        values[len(values) // 2] = -5

    rewrite(pack, F.BM25_TERMS_OFFSETS, poke)
    r = kbpack("query", str(pack), "--mode", "bm25", "--", "pypdf", cache=tmp_path / "cache")
    assert r.returncode == 1, r.stderr
    assert r.stderr.count("\n") == 1 and f"{F.BM25_TERMS_OFFSETS} is damaged" in r.stderr


def test_an_attribute_name_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    """bench/fuzz.py packs 11:12: flipped bits in an attribute name came back from h5py as
    bytes, and the attributes digest failed sorting bytes beside str (TypeError)."""
    import h5py

    from kbpack.testing.fuzz.pack_mutations import restamp

    pack = Path(shutil.copy(GOLDEN, tmp_path / "p.kbpack"))
    with h5py.File(pack, "r+") as h:
        h.attrs.create(b"\xff\xfename", 1)
    restamp(pack, "bytes")  # size and file hash match, as a mutant of the fuzzer has them
    r = kbpack("inspect", str(pack), cache=tmp_path / "cache")
    assert r.returncode == 1, r.stderr
    assert r.stderr.count("\n") == 1 and "/ is damaged" in r.stderr


def rewrite_strings(pack: Path, path: str, row: int, value: str) -> None:
    """One row of a string dataset replaced through HDF5, every digest rewritten to match."""
    import h5py

    from kbpack.testing.fuzz.pack_mutations import element_digests, restamp

    with h5py.File(pack, "r+") as h:
        values = [x.decode("utf-8") for x in h[path][()]]
        values[row] = value
        attrs = dict(h[path].attrs.items())
        del h[path]
        ds = h.create_dataset(path, data=values, dtype=h5py.string_dtype("utf-8"))
        for k, v in attrs.items():
            ds.attrs[k] = v
        digests = element_digests(h)
    restamp(pack, "elements", digests)


@pytest.mark.parametrize("value", ["snowball-english", "", '{"a": 1}', "[1, 2]", "null"])
def test_document_warnings_that_are_not_a_list_of_strings_are_one_line(
    tmp_path: Path, value: str
) -> None:
    """bench/fuzz.py packs 21:94: /documents/warnings poked with digests rewritten to match;
    export --what documents stopped with "internal error: JSONDecodeError" (merge, split,
    update and migrate read the row through the same ``PackReader.warnings``)."""
    pack = Path(shutil.copy(GOLDEN, tmp_path / "p.kbpack"))
    rewrite_strings(pack, F.DOC_WARNINGS, 1, value)
    cache = tmp_path / "cache"
    for args in (
        ["export", str(pack), "--what", "documents"],
        ["merge", str(pack), str(GOLDEN), "--prefer", "first", "-o", str(tmp_path / "m.kbpack")],
    ):
        r = kbpack(*args, cache=cache)
        assert r.returncode == 1, (args, r.stderr)
        assert r.stderr.count("\n") == 1 and "internal error" not in r.stderr, r.stderr
        assert f"{F.DOC_WARNINGS} is damaged (row 1 is not a JSON array of strings)" in r.stderr
    r = kbpack("verify", str(pack), cache=cache)
    assert r.returncode == 1 and "warnings-invalid" in r.stdout


@pytest.mark.parametrize("value", ["", "{}", "3", -1, 1.5])
def test_a_pipeline_version_that_is_not_a_whole_number_is_one_line(
    tmp_path: Path, value: Any
) -> None:
    """Enumerating the golden pack's attributes (digests rewritten to match): a root
    kbpack:pipeline_version of '' or '{}' made inspect die with "internal error: ValueError:
    invalid literal for int()" (its staleness report), and verify passed the pack."""
    import h5py

    from kbpack.testing.fuzz.pack_mutations import element_digests, restamp

    pack = Path(shutil.copy(GOLDEN, tmp_path / "p.kbpack"))
    with h5py.File(pack, "r+") as h:
        h.attrs[F.R_PIPELINE_VERSION] = value
        digests = element_digests(h)
    restamp(pack, "elements", digests)
    cache = tmp_path / "cache"
    for args in (["inspect", str(pack)], ["migrate", str(pack), "-o", str(tmp_path / "m.kbpack")]):
        r = kbpack(*args, cache=cache)
        assert r.returncode == 1, (args, r.stderr)
        assert r.stderr.count("\n") == 1 and "internal error" not in r.stderr, r.stderr
        assert f"/ is damaged ({F.R_PIPELINE_VERSION} is {value!r}, not a whole number" in r.stderr
    r = kbpack("verify", str(pack), cache=cache)
    assert (
        r.returncode == 1 and "attribute-invalid" in r.stdout and F.R_PIPELINE_VERSION in r.stdout
    )


@pytest.mark.parametrize("element", [F.VECTORS, F.PIECES])
def test_an_optional_element_deleted_from_the_file_is_a_verify_finding(
    tmp_path: Path, element: str
) -> None:
    """bench/fuzz.py packs 32:289: /vectors deleted and the file's size and hash restamped;
    verify said "intact" (the manifest's digests of a missing optional element were skipped)
    while query failed on the missing vectors."""
    import h5py

    from kbpack.testing.fuzz.pack_mutations import restamp

    pack = Path(shutil.copy(GOLDEN, tmp_path / "p.kbpack"))
    with h5py.File(pack, "r+") as h:
        del h[element]
    restamp(pack, "bytes")
    r = kbpack("verify", str(pack), "--json", cache=tmp_path / "cache")
    assert r.returncode == 1, r.stderr
    assert '"missing-element"' in r.stdout and f'"path": "{element}"' in r.stdout


def test_postings_pointing_past_the_chunks_are_one_line(tmp_path: Path) -> None:
    """bench/fuzz.py packs 32:1919: /bm25/chunk values rewritten with valid HDF5 checksums;
    the first query reads only its terms' postings (no digest covers a part) and failed with
    an IndexError on chunk row 255 of 63."""

    def past_the_end(ids: Any) -> None:
        ids[:] = 10**6

    pack = Path(shutil.copy(GOLDEN, tmp_path / "p.kbpack"))
    rewrite(pack, F.BM25_CHUNK, past_the_end)
    # "encryption": a term read from its postings (the golden pack holds pypdf and pages, its
    # title and heading words, as dense rows, spec 3.7.1)
    query = "pypdf merge pages encryption"
    r = kbpack("query", str(pack), "--mode", "bm25", "--", query, cache=tmp_path)
    assert r.returncode == 1, r.stderr
    assert r.stderr.count("\n") == 1
    assert f"{F.BM25_CHUNK} is damaged (a posting points at chunk row 1000000" in r.stderr


def test_a_bm25_parameter_that_is_not_a_number_is_one_line(tmp_path: Path) -> None:
    """bench/fuzz.py packs 32:2384: /bm25@b = [0] with the digests restamped: TypeError from
    float() in inspect and query."""
    import h5py

    from kbpack.testing.fuzz.pack_mutations import element_digests, restamp

    pack = Path(shutil.copy(GOLDEN, tmp_path / "p.kbpack"))
    with h5py.File(pack, "r+") as h:
        h[F.BM25].attrs[F.BM25_B] = [0]
        digests = element_digests(h)
    restamp(pack, "elements", digests)
    for command in (["inspect"], ["query", "--mode", "bm25"]):
        args = [command[0], str(pack), *command[1:]]
        if command[0] == "query":
            args += ["--", "pypdf merge pages"]
        r = kbpack(*args, cache=tmp_path / "cache")
        assert r.returncode == 1, r.stderr
        assert r.stderr.count("\n") == 1
        assert f"{F.BM25} is damaged (attribute b is not a number)" in r.stderr


def test_postings_offsets_out_of_range_are_one_line(tmp_path: Path) -> None:
    """bench/fuzz.py packs 42:1697: /bm25/indptr poked (digests rewritten to match); a term's
    span asked numpy for an array 'too big' (ValueError) in query bm25 and hybrid."""
    for value in (2**62, -3):
        pack = Path(shutil.copy(GOLDEN, tmp_path / f"p{value}.kbpack"))

        def poke(values: Any, v: int = value) -> None:
            values[len(values) // 2] = v

        rewrite(pack, F.BM25_INDPTR, poke)
        for mode in ("bm25", "hybrid"):
            r = kbpack("query", str(pack), "--mode", mode, "--", "pypdf", cache=tmp_path / "c")
            assert r.returncode == 1, r.stderr
            assert r.stderr.count("\n") == 1 and f"{F.BM25_INDPTR} is damaged" in r.stderr


def shuffle_element_size(pack: Path, path: str, size: int) -> None:
    """Set the element size that ``path``'s shuffle filter records in its object header
    (format 2 packs use version-1 headers, which carry no checksum): the bytes of the filter
    pipeline message's shuffle entry, found after the object's header address."""
    import h5py

    with h5py.File(pack, "r") as h:
        where = F.USERBLOCK_SIZE + h5py.h5o.get_info(h[path].id).addr
        itemsize = h[path].dtype.itemsize
    data = bytearray(pack.read_bytes())
    entry = b"\x02\x00\x08\x00\x01\x00\x01\x00shuffle\x00" + itemsize.to_bytes(4, "little")
    at = data.find(entry, where)
    assert 0 <= at - where < 1024, "the shuffle entry is not in this object's header"
    data[at + 16 : at + 20] = size.to_bytes(4, "little")
    pack.write_bytes(data)


def test_a_shuffle_element_size_that_is_not_the_dtype_is_refused(tmp_path: Path) -> None:
    """bench/fuzz.py packs 41:3070: one flipped bit made /bm25/tf's shuffle element size 4100
    instead of 4. HDF5 skipped the unshuffle, Fletcher-32 (over the compressed bytes) passed,
    and query ranked by tf values of 0x01010101 with exit 0: a silent wrong answer. The
    structure allowlist now refuses it, naming the element; verify reports it too."""
    pack = Path(shutil.copy(EARLIEST, tmp_path / "p.kbpack"))
    shuffle_element_size(pack, F.BM25_TF, 4100)
    for mode in ("bm25", "hybrid"):
        r = kbpack("query", str(pack), "--mode", mode, "--", "pypdf", cache=tmp_path / "c")
        assert r.returncode == 1, r.stdout
        assert r.stderr.count("\n") == 1 and f"filter-pipeline {F.BM25_TF}: shuffle" in r.stderr
    r = kbpack("verify", str(pack), cache=tmp_path / "c")
    assert r.returncode == 1 and f"filter-pipeline {F.BM25_TF}" in r.stdout


@pytest.mark.parametrize(("byte", "value"), [(1, 0x09), (10, 0x10)], ids=["big-endian", "16-bit"])
def test_a_datatype_whose_bit_layout_is_not_the_spec_is_refused(
    tmp_path: Path, byte: int, value: int
) -> None:
    """The class of 41:3070, found by looking for its siblings: one flipped bit in /bm25/tf's
    datatype message (its byte order, or its precision 32 -> 16 bits) kept the dtype's kind
    and size, so the allowlist let it through; HDF5 then converted every value (tf 1 read as
    16777216) and query answered with exit 0. The file type must be the spec's little-endian
    type exactly."""
    import h5py

    pack = Path(shutil.copy(EARLIEST, tmp_path / "p.kbpack"))
    with h5py.File(pack, "r") as h:
        where = F.USERBLOCK_SIZE + h5py.h5o.get_info(h[F.BM25_TF].id).addr
    data = bytearray(pack.read_bytes())
    # version 1, class fixed-point, signed; 4 bytes; bit offset 0, precision 32
    at = data.find(b"\x10\x08\x00\x00\x04\x00\x00\x00\x00\x00\x20\x00", where)
    assert 0 <= at - where < 1024, "the datatype message is not in this object's header"
    data[at + byte] = value
    pack.write_bytes(data)
    r = kbpack("query", str(pack), "--mode", "bm25", "--", "pypdf", cache=tmp_path / "c")
    assert r.returncode == 1, r.stdout
    assert r.stderr.count("\n") == 1 and f"wrong-dtype {F.BM25_TF}: " in r.stderr


def test_a_chunk_missing_from_its_chunk_index_is_refused(tmp_path: Path) -> None:
    """Also a sibling of 41:3070: the chunk index (no checksum in format 2's version-1 layout)
    keys each chunk by its first row; one flipped bit there moved /bm25/tf's only chunk from
    row 0 to row 642, HDF5 returned the fill value (zeros) for rows 0-641, and query was
    refused only because HDF5 reported an uninitialised filter mask for a missing chunk. A
    chunk missing from the index is damage naming the element (the mask is read with
    read_direct_chunk since main's 2026-12-02 change, which HDF5 refuses for a chunk whose
    storage is not allocated)."""
    import struct

    import h5py

    pack = Path(shutil.copy(EARLIEST, tmp_path / "p.kbpack"))
    with h5py.File(pack, "r") as h:
        info = h[F.BM25_TF].id.get_chunk_info(0)
        rows = h[F.BM25_TF].shape[0]
    data = bytearray(pack.read_bytes())
    # the index entry: size u32, filter mask u32, first row u64, 0 u64, then the address
    address = struct.pack("<Q", info.byte_offset - F.USERBLOCK_SIZE)
    at = data.find(struct.pack("<II", info.size, 0) + bytes(16) + address)
    assert at > 0 and data.count(address) == 1
    data[at + 8 : at + 16] = struct.pack("<Q", rows)
    pack.write_bytes(data)
    r = kbpack("query", str(pack), "--mode", "bm25", "--", "pypdf merge pages", cache=tmp_path)
    assert r.returncode == 1, r.stdout
    assert r.stderr.count("\n") == 1
    # the first open's structure check refuses the entry (since 61:11726's fix) ...
    assert f"chunk-index {F.BM25_TF}: its chunk index entry at row {rows} is not" in r.stderr
    # ... and a part read without that check still refuses the missing chunk itself
    from kbpack.pack.read import DamagedDataError, PackReader

    with (
        PackReader(pack, check_structure_=False) as reader,
        pytest.raises(DamagedDataError, match="not allocated"),
    ):
        reader.dataset(F.BM25_TF)[0:5]


@pytest.mark.parametrize(
    ("path", "name"),
    [(F.CHUNKS, "kbpack:kind"), (F.BM25_TF, "description"), ("/", "kbpack:version")],
)
def test_a_required_attribute_deleted_is_a_verify_finding(
    tmp_path: Path, path: str, name: str
) -> None:
    """bench/fuzz.py --enumerate attribute-deletions: with the digests restamped, verify passed
    golden-pack copies missing an element's kbpack:kind, kbpack:version or description, which
    spec §3 requires of every group and dataset (readers do without them)."""
    import h5py

    from kbpack.testing.fuzz.pack_mutations import element_digests, restamp

    pack = Path(shutil.copy(GOLDEN, tmp_path / "p.kbpack"))
    with h5py.File(pack, "r+") as h:
        del h[path].attrs[name]
        digests = element_digests(h)
    restamp(pack, "elements", digests)
    r = kbpack("verify", str(pack), cache=tmp_path / "c")
    assert r.returncode == 1, r.stdout
    assert f"attribute-missing {path}: {name}: required (spec §3)" in r.stdout


def chunk_index_node(tmp_path: Path, element: str) -> tuple[Path, bytearray, int]:
    """A copy of the golden pack, its bytes, and the offset of ``element``'s chunk index node:
    a version-1 B-tree node of chunked raw data (type 1) at level 0 with one entry."""
    import h5py

    pack = Path(shutil.copy(EARLIEST, tmp_path / "p.kbpack"))
    with h5py.File(pack, "r") as h:
        where = F.USERBLOCK_SIZE + h5py.h5o.get_info(h[element].id).addr
        assert h[element].id.get_num_chunks() == 1
    data = bytearray(pack.read_bytes())
    at = data.find(b"TREE\x01\x00\x01\x00", where)
    assert 0 <= at - where < 1024, "the chunk index node is not near this object's header"
    return pack, data, at


def test_a_chunk_index_with_phantom_entries_is_refused(tmp_path: Path) -> None:
    """Found by flipping each bit of /bm25/tf's object header and B-tree node in turn (41:3070's
    class): a flipped bit in the node's entry count (1 -> 3) gave the chunk index phantom
    entries of size 0, and HDF5 read zeros for every row of /bm25/tf with no error; query bm25
    answered exit 0 from them. The allowlist now requires one index entry per chunk of rows."""
    pack, data, at = chunk_index_node(tmp_path, F.BM25_TF)
    data[at + 6] = 3  # entries used
    pack.write_bytes(data)
    r = kbpack("query", str(pack), "--mode", "bm25", "--", "pypdf merge pages", cache=tmp_path)
    assert r.returncode == 1, r.stdout
    assert (
        r.stderr.count("\n") == 1 and f"chunk-index {F.BM25_TF}: its chunk index holds" in r.stderr
    )


def test_vectors_narrower_than_the_query_vector_are_one_line(tmp_path: Path) -> None:
    """A header bit-flip sweep of /vectors/data (14:40 UTC): one flipped bit in its dataspace
    made the rows 128 numbers wide instead of 384, and hybrid query died with an internal
    error (simsimd's 'Vector dimensions don't match'). The width is checked against the
    query vector's, naming the element."""
    import h5py

    pack = Path(shutil.copy(EARLIEST, tmp_path / "p.kbpack"))
    with h5py.File(pack, "r") as h:
        where = F.USERBLOCK_SIZE + h5py.h5o.get_info(h[F.VEC_DATA].id).addr
        n, dims = h[F.VEC_DATA].shape
    data = bytearray(pack.read_bytes())
    # the dataspace message: rank 2, then the current sizes (n, dims) as 8-byte integers
    at = data.find(n.to_bytes(8, "little") + dims.to_bytes(8, "little"), where)
    assert 0 <= at - where < 256, "the dataspace is not in this object's header"
    data[at + 8 : at + 16] = (dims - 256).to_bytes(8, "little")
    pack.write_bytes(data)
    r = kbpack("query", str(pack), "--threads", "1", "--", "pypdf merge pages", cache=tmp_path)
    assert r.returncode == 1, r.stdout
    assert r.stderr.count("\n") == 1
    assert f"{F.VEC_DATA} is damaged (rows of {dims - 256} numbers" in r.stderr


@pytest.mark.parametrize("value", [[0], "0.5", float("nan")], ids=["array", "string", "nan"])
def test_a_refusal_threshold_that_is_not_a_number_is_one_line(tmp_path: Path, value: Any) -> None:
    """bench/fuzz.py packs 41:6029: /search@max_distance set to the array [0], digests
    rewritten to match: float() raised TypeError in inspect and query, and verify passed."""
    import h5py
    import numpy as np

    from kbpack.testing.fuzz.pack_mutations import element_digests, restamp

    pack = Path(shutil.copy(GOLDEN, tmp_path / "p.kbpack"))
    with h5py.File(pack, "r+") as h:
        h[F.SEARCH].attrs[F.SEARCH_MAX_DISTANCE] = (
            np.array(value) if isinstance(value, list) else value
        )
        digests = element_digests(h)
    restamp(pack, "elements", digests)
    for args in (("inspect", str(pack)), ("query", str(pack), "--mode", "bm25", "--", "pypdf")):
        r = kbpack(*args, cache=tmp_path / "c")
        assert r.returncode == 1, (args, r.stderr)
        assert r.stderr.count("\n") == 1 and f"{F.SEARCH} is damaged" in r.stderr, r.stderr
    r = kbpack("verify", str(pack), cache=tmp_path / "c")
    assert r.returncode == 1 and f"attribute-invalid {F.SEARCH}: " in r.stdout


def test_a_vocabulary_term_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    """bench/fuzz.py packs 41:10672: /bm25/terms_blob poked (digests rewritten to match): the
    spelling suggestions of a query word the vocabulary lacks decoded a neighbouring term and
    raised UnicodeDecodeError (query bm25 and hybrid)."""
    pack = Path(shutil.copy(GOLDEN, tmp_path / "p.kbpack"))

    def poke(values: Any) -> None:
        at = bytes(values).find(b"merge")
        assert at >= 0
        values[at] = 0xFF  # "merge" -> "\xffrge" (the offsets, the order: unchanged enough)

    rewrite(pack, F.BM25_TERMS_BLOB, poke)
    r = kbpack("query", str(pack), "--mode", "bm25", "--", "merge", cache=tmp_path / "c")
    assert r.returncode == 1, r.stdout
    assert r.stderr.count("\n") == 1
    assert f"{F.BM25_TERMS_BLOB} is damaged (a term is not valid UTF-8" in r.stderr, r.stderr


def test_every_group_attribute_deleted_fails_verify_unless_the_spec_lets_it_be_absent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bench/fuzz.py --enumerate attribute-deletions, the 15 left after the kind / version /
    description fix: readers default dims, normalisation, stored_dtype, the piece rule and
    weight, the embedded-text rule, max_distance, the copies rule and the pipeline version, so
    verify was the only place to notice them gone, and passed. Now every attribute of every
    group is required except the three the spec says how to read when absent."""
    import h5py

    from kbpack.testing.fuzz.pack_mutations import element_digests, restamp
    from kbpack.verify.pipeline import verify_pack
    from kbpack.verify.report import HEADER

    monkeypatch.setenv("KBPACK_CACHE_DIR", str(tmp_path / "c"))
    with h5py.File(GOLDEN, "r") as h:
        groups = [p for p in ["/", *(f"/{k}" for k in h)] if isinstance(h[p], h5py.Group)]
        names = [
            (p, a)
            for p in groups
            for a in sorted(h[p].attrs)
            if a not in (F.A_KIND, F.A_VERSION, F.A_DESCRIPTION)
        ]
    assert len(names) >= 30
    passed = []
    for path, name in names:
        pack = Path(shutil.copy(GOLDEN, tmp_path / "p.kbpack"))
        with h5py.File(pack, "r+") as h:
            del h[path].attrs[name]
            digests = element_digests(h)
        restamp(pack, "elements", digests)
        report = verify_pack(pack)
        if report.intact:
            passed.append(f"{path}@{name}")
        else:
            # a finding that names the element (or the header the root is compared with)
            where = {f.path for f in report.findings}
            assert where & {path, HEADER}, (path, name, report.findings)
    assert sorted(passed) == [
        f"{F.CHUNKS}@{F.CHUNKING}",
        f"{F.MODEL}@{F.M_DOC_PREFIX}",
        f"{F.MODEL}@{F.M_QUERY_PREFIX}",
    ]


@pytest.mark.parametrize(
    ("path", "name", "value"),
    [
        (F.VECTORS, "normalisation", "cosine"),
        (F.PIECES, "stored_dtype", "float32"),
        (F.PIECES, F.PIECE_WEIGHT_ATTR, -1.0),
        (F.VECTORS, "dims", 0),
        (F.CHUNKS, F.CHUNK_HEADER_RULE, ""),
    ],
)
def test_a_group_attribute_the_spec_does_not_allow_fails_verify(
    tmp_path: Path, path: str, name: str, value: Any
) -> None:
    import h5py

    from kbpack.testing.fuzz.pack_mutations import element_digests, restamp

    pack = Path(shutil.copy(GOLDEN, tmp_path / "p.kbpack"))
    with h5py.File(pack, "r+") as h:
        h[path].attrs[name] = value
        digests = element_digests(h)
    restamp(pack, "elements", digests)
    r = kbpack("verify", str(pack), cache=tmp_path / "c")
    assert r.returncode == 1, r.stdout
    assert f"attribute-invalid {path}: {name} {value!r}: must be" in r.stdout


def test_vector_data_deleted_from_a_dense_pack_is_refused_and_a_verify_finding(
    tmp_path: Path,
) -> None:
    """bench/fuzz.py packs 61:420: /vectors/data deleted and the element digests restamped
    (the manifest no longer lists it); verify said "intact" with 0 vectors while query failed
    on a KeyError. A dense root requires /vectors, /vectors/data and /model."""
    import h5py

    from kbpack.testing.fuzz.pack_mutations import element_digests, restamp

    pack = Path(shutil.copy(GOLDEN, tmp_path / "p.kbpack"))
    with h5py.File(pack, "r+") as h:
        del h[F.VEC_DATA]
        digests = element_digests(h)
    restamp(pack, "elements", digests)
    line = f"missing-element {F.VEC_DATA}: required when the root says kbpack:vectors = 'dense'"
    r = kbpack("verify", str(pack), cache=tmp_path / "c1")
    assert r.returncode == 1 and line in r.stdout, r.stdout
    r = kbpack("query", str(pack), "--", "pump seal", cache=tmp_path / "c2")
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and line in r.stderr, r.stderr


def test_a_chunk_index_entry_hdf5_would_crash_on_is_refused(tmp_path: Path) -> None:
    """bench/fuzz.py packs 61:11726: 8 bytes overwritten with 0x4000000000000000 in the chunk
    index of /sections/to (the entry's size became 0, its filter mask 0x40000000). The first
    open's checks passed and `export --what sections` died with SIGSEGV inside HDF5 2.0, in
    the whole-column read whose digest would have caught it. The first open now checks every
    index entry (rows, mask, size, bytes inside the file)."""
    pack, data, at = chunk_index_node(tmp_path, F.SEC_TO)
    # the node's first key (chunk size u32, filter mask u32, offsets) follows its 24-byte header
    data[at + 24 : at + 32] = (0x4000000000000000).to_bytes(8, "little")
    pack.write_bytes(data)
    r = kbpack("export", str(pack), "--what", "sections", cache=tmp_path)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert r.stderr.count("\n") == 1
    assert f"chunk-index {F.SEC_TO}: its chunk index entry at row 0 skips filters" in r.stderr


def test_a_damaged_root_btree_sibling_is_one_line_and_a_verify_finding(tmp_path: Path) -> None:
    """bench/fuzz.py packs 61:13322 (one flipped bit, hashes restamped): every read worked, but
    inspect's `visititems` (H5Ovisit computes each object's header info, walking the root's
    symbol table B-tree to its siblings) failed with an internal error, and verify passed the
    pack. Here: the right-sibling address of the root group's B-tree node (bytes 16-23 of the
    node), the only bits of the golden pack's root node with that effect (a sweep of its
    4,800 single-bit flips)."""
    import h5py

    from kbpack.testing.fuzz.pack_mutations import restamp

    pack = Path(shutil.copy(EARLIEST, tmp_path / "p.kbpack"))
    with h5py.File(pack, "r") as h:
        root = F.USERBLOCK_SIZE + h5py.h5o.get_info(h.id).addr
    data = bytearray(pack.read_bytes())
    at = data.find(b"TREE\x00", root)  # the root group's node (type 0: group nodes)
    assert 0 <= at - root < 256
    data[at + 16] ^= 1
    pack.write_bytes(data)
    restamp(pack, "bytes")
    r = kbpack("inspect", str(pack), cache=tmp_path / "c1")
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert "internal error" not in r.stderr and "unreadable-object /:" in r.stderr
    r = kbpack("verify", str(pack), cache=tmp_path / "c2")
    assert r.returncode == 1 and "unreadable-object /:" in r.stdout, r.stdout


def test_bm25_parameters_outside_verifys_rule_are_one_line(tmp_path: Path) -> None:
    """bench/fuzz.py packs 71:17303: /bm25@b = 256 with the attribute digest restamped (a
    number, finite): length norms went negative and hybrid query died with an internal
    error ("BM25 scores are never negative"). The reader applies verify's rule."""
    import h5py

    from kbpack.testing.fuzz.pack_mutations import element_digests, restamp

    pack = Path(shutil.copy(GOLDEN, tmp_path / "p.kbpack"))
    with h5py.File(pack, "r+") as h:
        h[F.BM25].attrs[F.BM25_B] = 256.0
        digests = element_digests(h)
    restamp(pack, "elements", digests)
    for mode in ("bm25", "hybrid"):
        r = kbpack("query", str(pack), "--mode", mode, "--", "pypdf merge", cache=tmp_path / mode)
        assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
        assert f"{F.BM25} is damaged (k1=1.2, b=256.0: need k1 > 0, 0 <= b <= 1)" in r.stderr


def test_an_embedded_model_the_file_lost_is_refused_not_ignored(
    tmp_path: Path, tiny_model: Path
) -> None:
    """bench/fuzz.py packs 70:17959: 4 bytes overwritten in /model's header lost the link to
    /model/gguf; query answered BM25-only with "the pack was built with tiny-a, which is not
    the default model" as if the pack embedded no model (exit 0, the damage unsaid). An
    optional element the manifest counts rows of must be in the file."""
    import h5py

    from kbpack.testing.fuzz.pack_mutations import element_digests, restamp

    src = tmp_path / "src"
    src.mkdir()
    (src / "a.md").write_text("# Pump\n\nHold the reset button to clear the pump seal alarm.\n")
    pack = tmp_path / "p.kbpack"
    r = kbpack(
        "build",
        str(src),
        "-o",
        str(pack),
        "--model",
        str(tiny_model),
        "--embed-model",
        "-q",
        cache=tmp_path / "c0",
    )
    assert r.returncode == 0, r.stderr
    with h5py.File(pack, "r+") as h:
        del h[F.MODEL_GGUF]
        digests = element_digests(h)
    restamp(pack, "elements", digests)
    r = kbpack("query", str(pack), "--", "pump seal", cache=tmp_path / "c1")
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert f"missing-element {F.MODEL_GGUF}: the manifest counts" in r.stderr


@pytest.mark.parametrize("mode", ["bm25", "hybrid"])
def test_a_term_frequency_below_one_is_one_line(tmp_path: Path, mode: str) -> None:
    """bench/fuzz.py packs 70:30117: /bm25/tf values poked (digests restamped, so the whole
    column passes its digest and part reads their checksums): a negative frequency gave
    negative scores and hybrid query an internal error. Spec §3.7: tf >= 1."""
    import numpy as np

    pack = Path(shutil.copy(GOLDEN, tmp_path / "p.kbpack"))

    def poke(values: np.ndarray) -> None:
        values[:] = -1  # every posting: whichever terms the query reads

    rewrite(pack, F.BM25_TF, poke)
    query = "pypdf merge pages encryption"  # encryption: read from its postings, not a dense row
    r = kbpack("query", str(pack), "--mode", mode, "--", query, cache=tmp_path)
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert f"{F.BM25_TF} is damaged (a posting's term frequency is -1, below 1)" in r.stderr
