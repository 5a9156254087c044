"""Text from the cluster or the ledger, made safe to print on a person's terminal.

Names, node names, admission webhook messages and Event text are written by whoever may
create pods and Events, and the ledger keeps them as written. Printed raw, an ESC or OSC
sequence in one of them could move the cursor, retitle the terminal, rewrite an earlier line
or hide part of a line. Every command that prints such text (`compare`, `history`,
`explain`) sends it through `printable` (text) or `printable_json` (`-o json`), one place.
"""

from __future__ import annotations


def _escape(character: str) -> str:
    code = ord(character)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def printable(text: str) -> str:
    """`text` with every character `str.isprintable` refuses (C0 and C1 controls such as ESC
    and CSI, bidirectional overrides, line separators, unassigned code points) written as a
    Python-style escape (`\\x1b`), so what the cluster wrote cannot act on the terminal.
    Printable text comes back unchanged."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape(c) for c in text)


def printable_lines(text: str) -> str:
    """`printable` of each line of `text`, its newlines kept: a whole command's output."""
    return "\n".join(printable(line) for line in text.split("\n"))


def _json_escape(character: str) -> str:
    code = ord(character)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def printable_json(document: str) -> str:
    """A JSON text (as orjson writes it) with every character `printable` would escape, other
    than the layout's newlines, written as a JSON `\\u` escape: the same values once parsed.
    Outside strings a JSON text is ASCII and printable, so only string contents change."""
    if document.replace("\n", "").isprintable():
        return document
    return "".join(c if c == "\n" or c.isprintable() else _json_escape(c) for c in document)
