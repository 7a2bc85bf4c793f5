"""Text from outside envbuild's control (an image's labels, package names and versions, paths inside an
image) made safe to print on a terminal: control characters are written as escapes (`\\x1b`, `\\r`), so a
name holding `ESC [ 2 J` shows those characters instead of clearing the screen, and `\\r` cannot draw a
line over another. JSON output needs none of this: json.dumps escapes them and keeps the data exact.

Escaped: C0 controls and DEL, C1 controls (U+0080-U+009F: 0x9B is CSI on some terminals), the Unicode
line and paragraph separators, the bidirectional formatting characters that reorder what is shown
("Trojan Source"), and lone surrogates (bytes that were not UTF-8, kept by surrogateescape), which are
shown as the byte they stand for. A shared leaf: it imports nothing of envbuild."""

from __future__ import annotations

import re

_UNSAFE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")
_UNSAFE_OR_TAB = re.compile(f"[\t{_UNSAFE.pattern[1:-1]}]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # a byte surrogateescape kept: show the byte
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(text: str, *, keep_tabs: bool = False) -> str:
    """`text` with every character that could steer a terminal written as an escape; a tab is kept when
    `keep_tabs` (the lines of a script or spec shown as a block), escaped otherwise (one field of a row)."""
    pattern = _UNSAFE if keep_tabs else _UNSAFE_OR_TAB
    return pattern.sub(_escape, text) if pattern.search(text) else text


def printable_lines(text: str) -> str:
    """Multi-line text (an error with its `fix:` line) with each line made printable and the line breaks kept."""
    return "\n".join(printable(line, keep_tabs=True) for line in text.split("\n"))
