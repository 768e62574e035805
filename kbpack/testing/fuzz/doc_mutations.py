"""Mutations of valid documents: bytes for every format, plus what each format's parser reads.

* every format: flipped bits, interesting integers, deleted / duplicated / spliced ranges,
  truncation;
* PDF: numbers (lengths, offsets, object numbers, counts) replaced by interesting ones, the
  ends of streams, objects and dictionaries removed, arrays nested deep;
* DOCX: the zip rebuilt around a mutated ``word/document.xml`` (tags unclosed or nested deep,
  attributes and text changed), or the zip's own bytes damaged;
* HTML and Markdown / text: markup a parser must survive inserted (unclosed and deeply nested
  tags, entities out of range, unterminated comments, headings, fences, tables), control
  characters, NUL, lone surrogate bytes, byte-order marks and other encodings.
"""

from __future__ import annotations

import io
import random
import re
import zipfile
from collections.abc import Callable

INTERESTING = (b"0", b"-1", b"1", b"65535", b"2147483647", b"4294967296", b"99999999999999999999")


def flip(data: bytearray, rng: random.Random) -> str:
    n = rng.choice((1, 2, 8, 32))
    for _ in range(n):
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    return f"flip {n} bits"


def overwrite(data: bytearray, rng: random.Random) -> str:
    at = rng.randrange(len(data))
    value = rng.choice((b"\x00", b"\xff", b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff", b"\x80"))
    data[at : at + len(value)] = value
    return f"overwrite {value!r} at {at}"


def cut(data: bytearray, rng: random.Random) -> str:
    at = rng.randrange(len(data))
    n = rng.choice((1, 16, 512, len(data)))
    del data[at : at + n]
    return f"delete {n} bytes at {at}"


def duplicate(data: bytearray, rng: random.Random) -> str:
    at = rng.randrange(len(data))
    n = rng.choice((1, 64, 4096))
    block = bytes(data[at : at + n]) * rng.choice((1, 2, 50))
    to = rng.randrange(len(data))
    data[to:to] = block
    return f"insert {len(block)} copied bytes at {to}"


def truncate(data: bytearray, rng: random.Random) -> str:
    keep = rng.randrange(len(data))
    del data[keep:]
    return f"truncate to {keep}"


BYTES: tuple[Callable[[bytearray, random.Random], str], ...] = (
    flip,
    flip,
    overwrite,
    cut,
    duplicate,
    truncate,
)


def _replace_match(
    data: bytearray, rng: random.Random, pattern: bytes, make: Callable[[bytes], bytes]
) -> str:
    found = list(re.finditer(pattern, bytes(data)))
    if not found:
        return "no match"
    m = rng.choice(found)
    data[m.start() : m.end()] = make(m.group())
    return f"{m.group()[:20]!r} at {m.start()} replaced"


def pdf(data: bytearray, rng: random.Random) -> str:
    op = rng.choice(("number", "number", "number", "drop", "nest", "bytes"))
    if op == "number":
        return "pdf number: " + _replace_match(
            data, rng, rb"(?<![\w.])\d+(?![\w.])", lambda _: rng.choice(INTERESTING)
        )
    if op == "drop":
        word = rng.choice((rb"endstream", rb"endobj", rb">>", rb"xref", rb"trailer", rb"/Root"))
        return "pdf drop: " + _replace_match(data, rng, re.escape(word), lambda _: b"")
    if op == "nest":
        at = rng.randrange(len(data))
        depth = rng.choice((100, 10_000))
        data[at:at] = rng.choice((b"[", b"<<", b"(")) * depth
        return f"pdf nest {depth} at {at}"
    return rng.choice(BYTES)(data, rng)


MARKUP = (
    b"<table><tr><td>",
    b"<pre>",
    b"</pre>",
    b"<h1>",
    b"<h7>",
    b"<ul><li>" * 300,
    b"<div>" * 3000,
    b"&#xFFFFFFFF;",
    b"&#0;",
    b"&#xD800;",
    b"&nbsp",
    b"<!--",
    b"<![CDATA[",
    b"<script>",
    b"<style>",
    b"<meta charset=utf-16>",
    b"<meta charset=nonsense>",
    b'<a href="',
    b"<title>",
    b"<nav>",
    b"\x00",
    b"\xed\xa0\x80",
    b"\xff\xfe",
    b"\xef\xbb\xbf",
    b"\r",
    b"\x1b[31m",
    b"# ",
    b"\n###### ",
    b"\n=====\n",
    b"\n```\n",
    b"\n| a | b |\n|---|---|\n",
    b"\n" * 1000,
    b"x" * 100_000,
    b"\t" * 10,
    b"\xc3\xa9" * 10 + b"e\xcc\x81",
)


def markup(data: bytearray, rng: random.Random) -> str:
    op = rng.choice(("insert", "insert", "insert", "bytes"))
    if op == "bytes" or not data:
        return rng.choice(BYTES)(data, rng) if data else "empty"
    what = rng.choice(MARKUP)
    at = rng.randrange(len(data) + 1)
    data[at:at] = what * rng.choice((1, 1, 3))
    return f"insert {what[:16]!r} at {at}"


XML_TEXT = (
    b"",
    b" ",
    b"&#x1F680;&#xE9;e&#x301;",
    b"&lt;h1&gt;",
    b"x" * 50_000,
    b"\t" * 100,
    b"# heading",
    b"&#xFFFD;",
    b"&#x2028;",
    b"line\nbreak",
)


def docx(data: bytearray, rng: random.Random) -> str:
    if rng.random() < 0.3:
        return "docx zip: " + rng.choice(BYTES)(data, rng)
    try:
        with zipfile.ZipFile(io.BytesIO(bytes(data))) as z:
            members = {i.filename: z.read(i) for i in z.infolist()}
    except Exception:  # an earlier mutation broke the zip (zlib.error, BadZipFile, ...)
        return "docx zip: " + flip(data, rng)
    name = "word/document.xml" if rng.random() < 0.8 else rng.choice(sorted(members))
    xml = bytearray(members.get(name, b""))
    if not xml:
        return "docx: empty member"
    op = rng.choice(("text", "text", "text", "markup", "tag", "nest", "bytes"))
    if op == "text":  # stays well-formed XML: what python-docx and kbpack's walk then meet
        label = _replace_match(
            xml, rng, rb">[^<]{1,200}<", lambda _: b">" + rng.choice(XML_TEXT) + b"<"
        )
    elif op == "tag":
        label = _replace_match(
            xml, rng, rb"</?w:\w+", lambda _: rng.choice((b"", b"<w:p", b"</w:tbl"))
        )
    elif op == "nest":
        at = xml.find(b"<w:body>")
        depth = rng.choice((50, 5000))
        xml[at + 8 : at + 8] = b"<w:tbl><w:tr><w:tc>" * depth if at >= 0 else b""
        label = f"nest {depth} tables"
    elif op == "markup":
        label = markup(xml, rng)
    else:
        label = rng.choice(BYTES)(xml, rng)
    members[name] = bytes(xml)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for member, content in members.items():
            z.writestr(member, content)
    data[:] = out.getvalue()
    return f"docx {name}: {label}"


BY_KIND: dict[str, Callable[[bytearray, random.Random], str]] = {
    "pdf": pdf,
    "docx": docx,
    "html": markup,
    "md": markup,
    "txt": markup,
}


def mutate(data: bytes, kind: str, rng: random.Random) -> tuple[bytes, str]:
    """One mutant of a document of ``kind`` (1 to 3 mutations stacked)."""
    out = bytearray(data)
    labels = []
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        if not out:
            break
        labels.append(BY_KIND[kind](out, rng))
    return bytes(out), "; ".join(labels)
