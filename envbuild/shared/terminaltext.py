"""Text from outside envbuild's control (an image's labels, package names and versions, paths inside an
image) made safe to print on a terminal: control characters are written as escapes (`\\x1b`, `\\r`), so a
name holding `ESC [ 2 J` shows those characters instead of clearing the screen, and `\\r` cannot draw a
line over another. JSON output needs none of this: json.dumps escapes them and keeps the data exact.

Escaped: C0 controls and DEL, C1 controls (U+0080-U+009F: 0x9B is CSI on some terminals), the Unicode
line and paragraph separators, the bidirectional formatting characters that reorder what is shown
("Trojan Source"), and lone surrogates (bytes that were not UTF-8, kept by surrogateescape), which are
shown as the byte they stand for. A shared leaf: it imports nothing at all (envrun's start-up uses it, and
`re` would cost it milliseconds)."""

from __future__ import annotations

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# Besides the controls, characters that reorder or break what is shown: U+061C, U+200E/F and U+202A-E,
# U+2066-9 (bidirectional formatting), U+2028/9 (line and paragraph separators).
_FORMATTING = (0x061C, 0x200E, 0x200F, *range(0x2028, 0x202F), *range(0x2066, 0x206A))
_tables: dict[bool, dict[int, str]] = {}  # keep_tabs -> str.translate table, made on first use


def _escape(code: int) -> str:
    char = chr(code)
    if char in _NAMED:
        return _NAMED[char]
    if 0xDC80 <= code <= 0xDCFF:  # a byte surrogateescape kept: show the byte
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def _table(keep_tabs: bool) -> dict[int, str]:
    table = _tables.get(keep_tabs)
    if table is None:
        codes = [*range(0x20), *range(0x7F, 0xA0), *_FORMATTING, *range(0xD800, 0xE000)]
        table = _tables[keep_tabs] = {code: _escape(code) for code in codes if not (keep_tabs and code == 0x09)}
    return table


def printable(text: str, *, keep_tabs: bool = False) -> str:
    """`text` with every character that could steer a terminal written as an escape; a tab is kept when
    `keep_tabs` (the lines of a script or spec shown as a block), escaped otherwise (one field of a row)."""
    if text.isprintable():  # the common case, in C: no control, format or separator character at all
        return text
    return text.translate(_table(keep_tabs))


def printable_lines(text: str) -> str:
    """Multi-line text (an error with its `fix:` line) with each line made printable and the line breaks kept."""
    return "\n".join(printable(line, keep_tabs=True) for line in text.split("\n"))
