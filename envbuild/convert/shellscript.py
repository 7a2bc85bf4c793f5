"""The shell scripts of imported build files (%post, RUN) read line by line, keeping what the shell would see.

Continuation lines are joined (a pip install may span several), but a here-document is kept byte for byte
with the command that opens it (its body is data, indentation included, never a command to rewrite), and a
comment line is kept as it is (it runs nothing, so nothing in it is noted or taken out)."""

from __future__ import annotations

import re
from typing import NamedTuple

# <<EOF, <<-EOF, <<'EOF', <<"EOF" (not <<<, a here-string)
HEREDOC = re.compile(r"(?<!<)<<(?!<)(-?)\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\2")


class ScriptLine(NamedTuple):
    line: int  # where it starts in the file
    text: str
    verbatim: bool  # a here-document or a comment: to be kept exactly as written


# One part of a word as shlex.split reads it (posix): a run of plain and escaped characters, a single-quoted
# string, a double-quoted one (each written so that no two ways of splitting it exist: an unclosed quote fails
# without backtracking); or the blanks between words, or (with comments) the `#` that starts a comment.
_BLANKS = " \t\r\n"


def _word_part(comments: bool) -> re.Pattern[str]:
    bare = rf"""[^{_BLANKS}'"\\{"#" if comments else ""}]"""
    return re.compile(rf"""(?={bare}|\\.){bare}*(?:\\.{bare}*)*|'[^']*'|"[^"\\]*(?:\\.[^"\\]*)*"|(?P<blank>[{_BLANKS}]+)"""
                      + (r"|(?P<hash>\#)" if comments else ""), re.DOTALL)


_WORD_PART = {comments: _word_part(comments) for comments in (False, True)}
_ESCAPED_IN_DOUBLE_QUOTES = re.compile(r"""\\([\\"])""")
_ESCAPED = re.compile(r"\\(.)", re.DOTALL)


def split_words(text: str, *, comments: bool = False) -> list[str]:
    """shlex.split(text, comments=comments), in time linear in the text: shlex builds each word a character at a
    time by string concatenation, quadratic in a word's length (a 1 MB ENV or LABEL value took minutes). A
    ValueError for an unclosed quote or a backslash at the end, as shlex's. With `comments`, a `#` outside quotes
    starts a comment to the end of its line."""
    pattern = _WORD_PART[comments]
    words: list[str] = []
    word: list[str] | None = None  # the parts of the word being read; None between words
    position = 0
    while position < len(text):
        part = pattern.match(text, position)
        if part is None:
            raise ValueError("No escaped character" if text[position] == "\\" else "No closing quotation")
        position = part.end()
        if part["blank"] is not None or (comments and part["hash"] is not None):
            if word is not None:
                words.append("".join(word))
                word = None
            if comments and part["hash"] is not None:
                end_of_line = text.find("\n", position)
                position = len(text) if end_of_line < 0 else end_of_line
            continue
        piece = part.group()
        if piece[0] == "'":
            piece = piece[1:-1]
        elif piece[0] == '"':  # split keeps each escaped character: joined, \" is "
            piece = "".join(_ESCAPED_IN_DOUBLE_QUOTES.split(piece[1:-1]))
        elif "\\" in piece:
            piece = "".join(_ESCAPED.split(piece))
        if word is None:
            word = []
        word.append(piece)
    if word is not None:
        words.append("".join(word))
    return words


def heredoc_delimiters(text: str) -> list[str]:
    return [match[3] for match in HEREDOC.finditer(text)]


def script_lines(script: str, first_line: int) -> list[ScriptLine]:
    """Logical lines of `script`, whose first line is line `first_line` of the file."""
    result: list[ScriptLine] = []
    raw_lines = script.splitlines()
    index = 0
    while index < len(raw_lines):
        start = index
        raw = raw_lines[index]
        if raw.strip().startswith("#"):
            result.append(ScriptLine(first_line + index, raw.strip(), True))
            index += 1
            continue
        current = ""
        while raw.rstrip().endswith("\\") and index + 1 < len(raw_lines):
            current += raw.rstrip()[:-1].rstrip() + " "
            index += 1
            raw = raw_lines[index]
        current = (current + raw.strip()).strip()
        index += 1
        delimiters = heredoc_delimiters(current)
        if delimiters:
            body = [current]
            while delimiters and index < len(raw_lines):
                body.append(raw_lines[index])
                if raw_lines[index].strip() == delimiters[0]:
                    delimiters.pop(0)
                index += 1
            result.append(ScriptLine(first_line + start, "\n".join(body), True))
        elif current:
            result.append(ScriptLine(first_line + start, current, False))
    return result
