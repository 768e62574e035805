"""Untrusted text made safe for a terminal: the one function every human-readable output of
kbpack passes a pack's or a file's text through (query results, the prompt format, diff,
inspect, build and update summaries, errors, progress lines, serve's log).

A document's name or text is untrusted: ``bad\\x1b]0;OWNED\\x07\\x1b[2J.md`` retitled the window
and cleared the screen (issue 30). Escaped visibly, so that a person sees what is there:

* C0 controls, DEL and C1 controls (``\\x9b`` is a one-byte CSI on some terminals) as
  ``\\xNN``: ESC, BEL, CSI and OSC sequences lose the byte that starts them;
* bidirectional overrides, embeddings, isolates and marks (U+202A-202E, U+2066-2069,
  U+200E/200F, U+061C) as ``\\uNNNN``: they reorder what a line shows ("Trojan Source");
* newline and tab escaped too in a one-line field (a name cannot split a line), kept in text.

A backslash is not escaped: the output is for reading, not for parsing back (``--json`` is).
"""

from __future__ import annotations

_C0_C1 = (*range(0x00, 0x20), *range(0x7F, 0xA0))
_BIDI = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))

_FIELD = {c: f"\\x{c:02x}" for c in _C0_C1} | {c: f"\\u{c:04x}" for c in _BIDI}
_TEXT = {c: e for c, e in _FIELD.items() if c not in (0x09, 0x0A)}
# in JSON (which escapes C0 itself) the rest become JSON escapes: the same string parsed back
_JSON = {c: f"\\u{c:04x}" for c in (*range(0x7F, 0xA0), *_BIDI)}


def printable(text: str, lines: bool = False) -> str:
    """``text`` with every control and bidi character escaped; ``lines``: keep newlines and
    tabs (text shown as text), else escape them (a one-line field: a name, a locator)."""
    return text.translate(_TEXT if lines else _FIELD)


def json_printable(dumped: str) -> str:
    """A JSON document (``json.dumps(..., ensure_ascii=False)``) with DEL, C1 and bidi
    characters written as ``\\uNNNN`` escapes: the same JSON value, nothing raw for a terminal.
    Valid because outside strings JSON holds only ASCII punctuation and digits."""
    return dumped.translate(_JSON)


__all__ = ["json_printable", "printable"]
