"""Canonical text: the one string every offset and citation points into.

Policy (the same for every format, so a quote looks like the source):

* line endings are ``\\n`` (``\\r\\n`` and lone ``\\r`` become ``\\n``);
* Unicode is NFC;
* NUL characters are removed and lone surrogates replaced by U+FFFD, both counted in
  ``replaced`` (h5py refuses to store either, so unsanitised text would crash a build);
* trailing spaces and tabs are removed from every line, and blank lines at the very start
  and end of a block are dropped (invisible in a quote, and they would only blur chunk edges);
* nothing else is changed: Markdown keeps its markup, other control characters stay.

Decoding order for text files (:func:`decode_text`): a byte-order mark (UTF-8, UTF-16,
UTF-32), then strict UTF-8, then (HTML only) the declared charset, then cp1252 (the usual Windows legacy encoding; its five
undefined bytes map to the Latin-1 code points), recorded in ``Document.decoding``.
"""

from __future__ import annotations

import codecs
import re
import unicodedata
from dataclasses import dataclass

_BOMS: tuple[tuple[bytes, str, str], ...] = (
    # UTF-32 first: its little-endian BOM starts with the UTF-16 little-endian one.
    (codecs.BOM_UTF32_LE, "utf-32-le", "utf-32-le (BOM)"),
    (codecs.BOM_UTF32_BE, "utf-32-be", "utf-32-be (BOM)"),
    (codecs.BOM_UTF8, "utf-8", "utf-8 (BOM)"),
    (codecs.BOM_UTF16_LE, "utf-16-le", "utf-16-le (BOM)"),
    (codecs.BOM_UTF16_BE, "utf-16-be", "utf-16-be (BOM)"),
)


def _cp1252_table() -> str:
    # Python's cp1252 refuses 0x81, 0x8D, 0x8F, 0x90, 0x9D; browsers map them to U+0081 etc.
    chars = []
    for byte in range(256):
        try:
            chars.append(bytes([byte]).decode("cp1252"))
        except UnicodeDecodeError:
            chars.append(chr(byte))
    return "".join(chars)


_CP1252 = _cp1252_table()
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_TRAILING_SPACE = re.compile(r"[ \t]+$", re.MULTILINE)


@dataclass(frozen=True)
class Decoded:
    """Text decoded from bytes: ``decoding`` says how, ``replaced`` counts U+FFFD inserted."""

    text: str
    decoding: str
    replaced: int = 0


def _decode_counting(data: bytes, encoding: str) -> tuple[str, int]:
    """Decode, replacing invalid sequences; the count is exact (one U+FFFD per error)."""
    try:
        return data.decode(encoding), 0
    except UnicodeDecodeError:
        replaced = data.decode(encoding, errors="replace")
        ignored = data.decode(encoding, errors="ignore")
        return replaced, len(replaced) - len(ignored)


def decode_text(data: bytes, declared: str | None = None) -> Decoded:
    """Bytes of a text file -> str. Order: BOM, strict UTF-8, ``declared`` (e.g. an HTML meta
    charset; used only if it decodes strictly), cp1252 fallback. Never raises.

    UTF-8 goes before a declaration because bytes that are valid UTF-8 are almost never
    meant as anything else, while wrong declarations are common."""
    for bom, encoding, label in _BOMS:
        if data.startswith(bom):
            text, bad = _decode_counting(data[len(bom) :], encoding)
            return Decoded(text, label, bad)
    try:
        return Decoded(data.decode("utf-8"), "utf-8")
    except UnicodeDecodeError:
        pass
    if declared:
        try:
            codec = codecs.lookup(declared).name
            if codec not in ("utf-8", "cp1252", "latin-1", "iso8859-1", "ascii"):
                return Decoded(data.decode(codec), f"{codec} (declared)")
        except (LookupError, UnicodeDecodeError, ValueError):
            pass  # a wrong declaration: fall back like an undeclared file
    text, _ = codecs.charmap_decode(data, "strict", _CP1252)
    return Decoded(text, "cp1252 (fallback: not valid UTF-8)")


def canonicalize(text: str) -> tuple[str, int]:
    """Apply the canonical-text policy above. Returns the text and how many characters were
    removed (NUL) or replaced (lone surrogates)."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    replaced = text.count("\x00")
    if replaced:
        text = text.replace("\x00", "")
    text, surrogates = _LONE_SURROGATE.subn("\ufffd", text)
    replaced += surrogates
    if not text.isascii():
        text = unicodedata.normalize("NFC", text)
    text = _TRAILING_SPACE.sub("", text)
    return text.strip("\n"), replaced


def one_line(text: str) -> str:
    """A title or a table cell: canonical, whitespace runs (newlines included) -> one space."""
    text, _ = canonicalize(text)
    return " ".join(text.split())


def is_clean(text: str) -> bool:
    """True when h5py can store ``text`` and it is already canonical (used by tests/verify)."""
    return canonicalize(text)[0] == text and "\x00" not in text
