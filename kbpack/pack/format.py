"""Every on-disk name and constant of the kbpack format, in one place.

Code says ``F.CHUNK_FROM``, never the string twice. ``spec/FORMAT.md`` describes each element;
``ELEMENTS`` below is the allowlist a reader enforces, and a test checks that the spec and this
table name the same elements.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

FORMAT_VERSION = 2  # 2: every dataset chunked with Fletcher-32, integer columns deflated
FIRST_CHECKSUMMED_FORMAT = 2  # from this version a dataset without Fletcher-32 is refused
# bump when chunking or embedded-text rules change what a build produces; 2: no chunk of a
# parent's heading alone; 3: nor of a leaf's or a title's, and chunks under 40 characters joined
PIPELINE_VERSION = 3

# --- the user block (kbpack's own header, before the HDF5 superblock) -------------------------
MAGIC = b"\x89KBPACK\n"  # 8 bytes; the high byte and newline catch text-mode transfers
USERBLOCK_SIZE = 65536  # HDF5 user block: a power of two >= 512; HDF5 never reads it
LEN_FORMAT = "<Q"  # little-endian uint64 length prefixes for the manifest and the signature
MAX_MANIFEST_BYTES = USERBLOCK_SIZE - 64 - 4096  # leaves room for the signature record
MAX_SIGNATURE_BYTES = 4096

# --- attributes every element carries --------------------------------------------------------
A_KIND = "kbpack:kind"
A_VERSION = "kbpack:version"
A_DESCRIPTION = "description"

# --- root attributes -------------------------------------------------------------------------
R_FORMAT_VERSION = "kbpack:format_version"
R_KBPACK_VERSION = "kbpack:kbpack_version"
R_PIPELINE_VERSION = "kbpack:pipeline_version"
R_CREATED = "kbpack:created"
R_VECTORS = "kbpack:vectors"  # "dense" or "none" (a BM25-only pack)

# --- groups ----------------------------------------------------------------------------------
DOCUMENTS = "/documents"
SECTIONS = "/sections"
PAGES = "/pages"
CHUNKS = "/chunks"
VECTORS = "/vectors"
MODEL = "/model"
BM25 = "/bm25"
SEARCH = "/search"
PIECES = "/pieces"
COPIES = "/copies"
ROW_DIGESTS = "/row_digests"
LINKS = "/links"
IVF = "/ivf"  # optional (spec §3.13): the approximate (inverted-file) index over /vectors/data

# --- datasets --------------------------------------------------------------------------------
DOC_NAME = "/documents/name"
DOC_SOURCE_PATH = "/documents/source_path"
DOC_MEDIA_TYPE = "/documents/media_type"
DOC_SOURCE_SIZE = "/documents/source_size"
DOC_SOURCE_SHA256 = "/documents/source_sha256"
DOC_TITLE = "/documents/title"
DOC_EXTRACTOR = "/documents/extractor"
DOC_EXTRACTOR_VERSION = "/documents/extractor_version"
DOC_STATUS = "/documents/status"
DOC_REASON = "/documents/reason"
DOC_STAGE = "/documents/stage"
DOC_DECODING = "/documents/decoding"
DOC_REPLACED = "/documents/replaced"
DOC_WARNINGS = "/documents/warnings"
DOC_TEXT = "/documents/text"
DOC_TEXT_SHA256 = "/documents/text_sha256"

SEC_DOCUMENT = "/sections/document"
SEC_PARENT = "/sections/parent"
SEC_LEVEL = "/sections/level"
SEC_TITLE = "/sections/title"
SEC_FROM = "/sections/from"
SEC_TO = "/sections/to"

PAGE_DOCUMENT = "/pages/document"
PAGE_NUMBER = "/pages/number"
PAGE_FROM = "/pages/from"
PAGE_TO = "/pages/to"

CHUNK_DOCUMENT = "/chunks/document"
CHUNK_SECTION = "/chunks/section"
CHUNK_FROM = "/chunks/from"
CHUNK_TO = "/chunks/to"
CHUNK_PAGE = "/chunks/page"
CHUNK_TOKENS = "/chunks/tokens"

VEC_DATA = "/vectors/data"
MODEL_GGUF = "/model/gguf"

PIECE_CHUNK = "/pieces/chunk"
PIECE_FROM = "/pieces/from"
PIECE_TO = "/pieces/to"
PIECE_DATA = "/pieces/data"

COPY_GROUP = "/copies/group"
COPY_CHUNK = "/copies/chunk"
COPY_EXACT = "/copies/exact"

BM25_TERMS_BLOB = "/bm25/terms_blob"
BM25_TERMS_OFFSETS = "/bm25/terms_offsets"
BM25_INDPTR = "/bm25/indptr"
BM25_CHUNK = "/bm25/chunk"
BM25_TF = "/bm25/tf"
BM25_DOC_LEN = "/bm25/doc_len"
# optional (spec §3.7.1): the most common terms' frequencies as one dense row per term, so a
# process's first query reads a stopword as N bytes instead of inflating 8 bytes per posting
BM25_DENSE_TERMS = "/bm25/dense_terms"
BM25_DENSE_TF = "/bm25/dense_tf"
# optional (spec §3.11): a digest per row of the string columns a query reads row by row, so
# that a citation's title or name is checked without reading (and hashing) the whole column
ROW_DOC_NAME = "/row_digests/documents_name"
ROW_DOC_TITLE = "/row_digests/documents_title"
ROW_DOC_TEXT_SHA256 = "/row_digests/documents_text_sha256"
ROW_SEC_TITLE = "/row_digests/sections_title"
# optional (spec §3.12): links of a document to a document (or a place in one) of the pack
LINK_DOCUMENT = "/links/document"
LINK_FROM = "/links/from"
LINK_TO = "/links/to"
LINK_TARGET = "/links/target"
LINK_TARGET_OFFSET = "/links/target_offset"
LINK_ANCHOR = "/links/anchor"
# optional (spec §3.13): cluster centroids and, per cluster, the chunk rows nearest to it
IVF_CENTROIDS = "/ivf/centroids"
IVF_LIST_OFFSETS = "/ivf/list_offsets"
IVF_LIST_CHUNKS = "/ivf/list_chunks"
IVF_DATASETS = (IVF_CENTROIDS, IVF_LIST_OFFSETS, IVF_LIST_CHUNKS)
IVF_CODES = "/ivf/codes"  # optional within /ivf: int8 codes of the vectors in list order
IVF_CODE_SCALE = "/ivf/code_scale"  # their per-dimension scale (float64)
IVF_CODE_DATASETS = (IVF_CODES, IVF_CODE_SCALE)
# string column -> its row digests
ROW_DIGEST_OF = {
    DOC_NAME: ROW_DOC_NAME,
    DOC_TITLE: ROW_DOC_TITLE,
    DOC_TEXT_SHA256: ROW_DOC_TEXT_SHA256,
    SEC_TITLE: ROW_SEC_TITLE,
}

# --- attributes of groups --------------------------------------------------------------------
M_NAME = "name"
M_SHA256 = "sha256"
SHA256_HEX = re.compile(r"[0-9a-f]{64}")  # /model@sha256 (spec §3.6)
M_ARCHITECTURE = "architecture"
M_DIMS = "dims"
M_POOLING = "pooling"
M_WINDOW = "window"
M_NORMALIZE = "normalize"
M_LLAMA_CPP_VERSION = "llama_cpp_version"
MODEL_ATTRS = (
    M_NAME,
    M_SHA256,
    M_ARCHITECTURE,
    M_DIMS,
    M_POOLING,
    M_WINDOW,
    M_NORMALIZE,
    M_LLAMA_CPP_VERSION,
)
# Text put before every query / every embedded chunk text (kbpack/model/prefixes.py). Part of
# what makes two vectors comparable, like the hash; absent (older packs) means "".
M_QUERY_PREFIX = "query_prefix"
M_DOC_PREFIX = "doc_prefix"
MODEL_PREFIX_ATTRS = (M_QUERY_PREFIX, M_DOC_PREFIX)

BM25_K1 = "k1"
BM25_B = "b"
BM25_TOKENIZER = "tokenizer"
TOKENIZER_ID = "kbpack-words-1"
BM25_ANALYZER = "analyzer"  # absent: tokenize() alone (kbpack.search.bm25.Analyzer)
# What each chunk's postings count (spec/FORMAT.md 3.7): absent = its content only (packs
# written before issue 32's header work); HEADER_CONTENT = its header's terms, then its
# content's, i.e. the terms of the text the model embeds less the separator.
BM25_FIELDS = "fields"
HEADER_CONTENT = "header+content"

CHUNK_HEADER_RULE = "embedded_text_rule"
CHUNKING = "chunking"  # JSON: {"window": int|null, "max_chars": int|null, "overlap": int}
EMBEDDED_TEXT_RULE = (
    "header + '\\n\\n' + content; header = ' > '.join([document title] + section path), "
    "whitespace collapsed, empty or repeated consecutive titles dropped, cut to 200 characters "
    "(spec/FORMAT.md 3.4)"
)

COPIES_RULE_ATTR = "rule"  # kbpack.pack.copies.RULE: how the groups were found

IVF_RULE_ATTR = "rule"  # kbpack.pack.ivf.RULE: how the lists were made (informative)
IVF_METRIC_ATTR = "metric"  # "cosine": lists are probed by the query's cosine to the centroids
IVF_METRIC = "cosine"
IVF_PROBE_ATTR = "probe"  # the lists a query probes by default (kbpack query --probe overrides)

PIECE_RULE_ATTR = "piece_rule"
PIECE_WEIGHT_ATTR = "weight"
# The rule and weight live in kbpack/index/pieces.py (the code that applies them); the writer stamps
# both on /pieces so a reader knows how the pieces were cut and how search scores them.

SEARCH_MAX_DISTANCE = "max_distance"
SEARCH_CALIBRATION = "calibration"  # JSON: threshold, rule, files, when

DEFAULT_MAX_DISTANCE = 0.675  # cosine distance; docs/search.md (Refusal) says where it comes from

STATUSES = ("ok", "failed", "skipped")

# Per-document columns other than the canonical text, by type (the writer and export share them).
DOC_STRING_COLUMNS = (
    "name",
    "source_path",
    "media_type",
    "source_sha256",
    "title",
    "extractor",
    "status",
    "reason",
    "stage",
    "decoding",
    "warnings",
    "text_sha256",
)
DOC_INT_COLUMNS = {"source_size": "<i8", "extractor_version": "<i4", "replaced": "<i8"}


@dataclass(frozen=True)
class Element:
    """One allowlisted object: what kind of HDF5 object, the dtype kind and rank for datasets."""

    path: str
    kind: str  # what kbpack:kind says
    description: str
    dtype: str = ""  # "str" (vlen UTF-8), "i1", "i4", "i8", "f2", "f8", "u1"; "" for groups
    ndim: int = 1
    rows: str = ""  # which count the first dimension equals (a key of the manifest counts)
    optional: bool = False
    since: int = 1  # first format version with this element: older packs lack it, legitimately


def _ds(path: str, dtype: str, rows: str, description: str, ndim: int = 1, **kw: Any) -> Element:
    return Element(path, "column", description, dtype, ndim, rows, **kw)


# The allowlist. Order is the order of the spec and of the writer.
ELEMENTS: tuple[Element, ...] = (
    Element(DOCUMENTS, "documents", "one row per source file: identity, status, canonical text"),
    _ds(DOC_NAME, "str", "documents", "unique name: path relative to the input root"),
    _ds(DOC_SOURCE_PATH, "str", "documents", "source path as given to kbpack build"),
    _ds(DOC_MEDIA_TYPE, "str", "documents", "MIME type of the source"),
    _ds(DOC_SOURCE_SIZE, "i8", "documents", "size of the source file in bytes"),
    _ds(DOC_SOURCE_SHA256, "str", "documents", "SHA-256 of the source file bytes, hex"),
    _ds(DOC_TITLE, "str", "documents", "document title (first H1, PDF/DOCX title, file name)"),
    _ds(
        DOC_EXTRACTOR,
        "str",
        "documents",
        "extractor and library version, e.g. pdf/pypdfium2 5.15.2",
    ),
    _ds(DOC_EXTRACTOR_VERSION, "i4", "documents", "kbpack's extractor logic version"),
    _ds(DOC_STATUS, "str", "documents", "ok, failed or skipped"),
    _ds(DOC_REASON, "str", "documents", "one-line reason when failed or skipped, else empty"),
    _ds(DOC_STAGE, "str", "documents", "stage of a failure (read, detect, extract, limits, ...)"),
    _ds(DOC_DECODING, "str", "documents", "how the source bytes were decoded to text"),
    _ds(DOC_REPLACED, "i8", "documents", "characters removed or replaced when sanitising"),
    _ds(DOC_WARNINGS, "str", "documents", "JSON array of one-line warnings"),
    _ds(DOC_TEXT, "str", "documents", "canonical text: every offset is a code point into it"),
    _ds(DOC_TEXT_SHA256, "str", "documents", "SHA-256 of the canonical text's UTF-8 bytes, hex"),
    Element(SECTIONS, "sections", "heading tree: row 0 of each document is its root section"),
    _ds(SEC_DOCUMENT, "i4", "sections", "document row of the section"),
    _ds(SEC_PARENT, "i4", "sections", "section row of the parent, -1 for a document root"),
    _ds(SEC_LEVEL, "i1", "sections", "0 for the root, 1..9 for headings"),
    _ds(SEC_TITLE, "str", "sections", "heading text (the document title for a root)"),
    _ds(SEC_FROM, "i8", "sections", "first code point of the section in the canonical text"),
    _ds(SEC_TO, "i8", "sections", "end (exclusive) of the section in the canonical text"),
    Element(PAGES, "pages", "page map of paged documents (PDF)"),
    _ds(PAGE_DOCUMENT, "i4", "pages", "document row of the page"),
    _ds(PAGE_NUMBER, "i4", "pages", "1-based physical page index"),
    _ds(PAGE_FROM, "i8", "pages", "first code point of the page's text"),
    _ds(PAGE_TO, "i8", "pages", "end (exclusive) of the page's text"),
    Element(CHUNKS, "chunks", "search units: [from, to) into a document's canonical text"),
    _ds(CHUNK_DOCUMENT, "i4", "chunks", "document row of the chunk"),
    _ds(CHUNK_SECTION, "i4", "chunks", "deepest section row containing the chunk"),
    _ds(CHUNK_FROM, "i8", "chunks", "first code point of the chunk's content"),
    _ds(CHUNK_TO, "i8", "chunks", "end (exclusive) of the chunk's content"),
    _ds(CHUNK_PAGE, "i4", "chunks", "1-based page where the chunk starts, 0 when unpaged"),
    _ds(CHUNK_TOKENS, "i4", "chunks", "model tokens of the embedded text, 0 without a model"),
    Element(
        VECTORS, "vectors", "L2-normalised embedding of each chunk's embedded text", optional=True
    ),
    _ds(VEC_DATA, "f2", "chunks", "one unit vector per chunk row (float16)", ndim=2, optional=True),
    Element(MODEL, "model", "identity of the embedding model; attributes only", optional=True),
    _ds(
        MODEL_GGUF,
        "u1",
        "model_bytes",
        "the GGUF model file itself (build --embed-model)",
        optional=True,
    ),
    Element(BM25, "bm25-postings", "BM25 postings (CSC): raw term frequencies per chunk"),
    _ds(BM25_TERMS_BLOB, "u1", "terms_bytes", "UTF-8 bytes of the sorted vocabulary, concatenated"),
    _ds(BM25_TERMS_OFFSETS, "i8", "terms_plus_one", "byte offsets of each term in terms_blob"),
    _ds(BM25_INDPTR, "i8", "terms_plus_one", "postings of term t are rows indptr[t]:indptr[t+1]"),
    _ds(BM25_CHUNK, "i4", "postings", "chunk row of each posting, ascending within a term"),
    _ds(BM25_TF, "i4", "postings", "raw term frequency of each posting"),
    _ds(BM25_DOC_LEN, "i4", "chunks", "number of tokens in each chunk's content"),
    _ds(
        BM25_DENSE_TERMS,
        "i4",
        "dense_terms",
        "vocabulary rows of the terms held in at least 1/8 of the chunks, ascending",
        optional=True,
    ),
    _ds(
        BM25_DENSE_TF,
        "u1",
        "dense_tf",
        "tf of dense_terms[j] in chunk c at row j * chunks + c (0: absent); uncompressed",
        optional=True,
    ),
    Element(SEARCH, "search-settings", "query defaults: refusal threshold and its provenance"),
    Element(
        PIECES,
        "pieces",
        "sentence pieces of each chunk ([from, to) inside it) and their unit vectors",
        optional=True,
    ),
    _ds(PIECE_CHUNK, "i4", "pieces", "chunk row of the piece, ascending", optional=True),
    _ds(
        PIECE_FROM,
        "i8",
        "pieces",
        "first code point of the piece (inside its chunk)",
        optional=True,
    ),
    _ds(PIECE_TO, "i8", "pieces", "end (exclusive) of the piece", optional=True),
    _ds(
        PIECE_DATA,
        "f2",
        "pieces",
        "one unit vector per piece row (float16): header + piece, embedded",
        ndim=2,
        optional=True,
    ),
    Element(
        COPIES,
        "copies",
        "groups of chunks whose normalised words are identical or nearly so (copies of one "
        "passage); search shows one result per group",
        optional=True,
    ),
    _ds(COPY_GROUP, "i4", "copies", "group of the member, 0, 1, ... ascending", optional=True),
    _ds(COPY_CHUNK, "i4", "copies", "chunk row of the member, ascending in a group", optional=True),
    _ds(
        COPY_EXACT,
        "i1",
        "copies",
        "1: normalised words equal those of the group's first chunk; 0: a near copy",
        optional=True,
    ),
    Element(
        ROW_DIGESTS,
        "row-digests",
        "a digest per row of the string columns a query reads row by row (checked reads "
        "of one title without hashing the whole column)",
        optional=True,
    ),
    *(
        _ds(
            ROW_DIGEST_OF[column],
            "i8",
            rows,
            f"first 8 bytes (little-endian int64) of the SHA-256 of each row of {column}",
            optional=True,
        )
        for column, rows in (
            (DOC_NAME, "documents"),
            (DOC_TITLE, "documents"),
            (DOC_TEXT_SHA256, "documents"),
            (SEC_TITLE, "sections"),
        )
    ),
    Element(
        IVF,
        "ivf",
        "approximate (inverted-file) index over /vectors/data: centroids and the chunks of each "
        "centroid's list; exact search never reads it",
        optional=True,
    ),
    _ds(
        IVF_CENTROIDS,
        "f2",
        "ivf_lists",
        "one unit centroid per list (float16)",
        ndim=2,
        optional=True,
    ),
    _ds(
        IVF_LIST_OFFSETS,
        "i8",
        "",
        "ivf_lists + 1 offsets: list l holds list_chunks[offsets[l]:offsets[l+1]]",
        optional=True,
    ),
    _ds(
        IVF_LIST_CHUNKS,
        "i4",
        "chunks",
        "chunk rows of each list, ascending within a list; every chunk exactly once",
        optional=True,
    ),
    _ds(
        IVF_CODES,
        "i1",
        "chunks",
        "int8 code of every chunk's vector, in list order (row r: chunk list_chunks[r])",
        ndim=2,
        optional=True,
    ),
    _ds(
        IVF_CODE_SCALE,
        "f8",
        "",
        "per-dimension scale of the codes: a vector is about codes * code_scale",
        optional=True,
    ),
)

# Links (spec §3.12), after the allowlist above so that another optional element can be added
# to it without touching these lines.
ELEMENTS += (
    Element(
        LINKS,
        "links",
        "links of a document's text to a document of the pack or a place in one (HTML <a href>)",
        optional=True,
    ),
    _ds(LINK_DOCUMENT, "i4", "links", "document row of the link, ascending", optional=True),
    _ds(LINK_FROM, "i8", "links", "first code point of the link text", optional=True),
    _ds(LINK_TO, "i8", "links", "end (exclusive) of the link text", optional=True),
    _ds(LINK_TARGET, "i4", "links", "document row the link leads to", optional=True),
    _ds(
        LINK_TARGET_OFFSET,
        "i8",
        "links",
        "code point of the target document's text the link leads to (its anchor; 0: the start)",
        optional=True,
    ),
    _ds(
        LINK_ANCHOR,
        "str",
        "links",
        "the fragment of the link's href ('' for none), to resolve it again",
        optional=True,
    ),
)

ELEMENT_BY_PATH = {e.path: e for e in ELEMENTS}

COUNT_KEYS = (
    "documents",
    "documents_ok",
    "documents_failed",
    "documents_skipped",
    "sections",
    "pages",
    "chunks",
    "vectors",
    "terms",
    "terms_plus_one",
    "terms_bytes",
    "postings",
    "model_bytes",
)
# Counts present only in packs that hold the element they count (/pieces: build --pieces;
# /copies: written by kbpack 0.3 and later, absent from 0.2.0 packs; /bm25/dense_*: written
# since issue 19's first-query work, absent from older packs).
OPTIONAL_COUNT_KEYS = ("pieces", "copies", "dense_terms", "dense_tf", "links", "ivf_lists")


def is_sha256_hex(value: object) -> bool:
    """A SHA-256 as the spec writes it (§3.6): 64 lowercase hex digits, nothing else."""
    return isinstance(value, str) and SHA256_HEX.fullmatch(value) is not None


# --- the rules stamped into /pieces (spec §3.9): kbpack/index/pieces.py cuts by them, search
# weighs by them ---------------------------------------------------------------------------------
PIECE_MIN_CHARS = 120
PIECE_MAX_CHARS = 600
PIECE_RULE = (
    f"sentence pieces of each chunk's content: blocks as the chunker cuts them, prose at sentence "
    f"ends, code and tables at line ends, packed greedily to at least {PIECE_MIN_CHARS} and at "
    f"most {PIECE_MAX_CHARS} characters (a longer unit cut at spaces); a chunk of one piece has "
    "none; each piece is embedded as header + '\\n\\n' + piece (spec/FORMAT.md 3.9)"
)
PIECE_WEIGHT = 0.5  # score = (cos(chunk) + PIECE_WEIGHT * max cos(pieces)) / (1 + PIECE_WEIGHT)
