"""Shell words of a batch script's body as bash reads them (bash(1) "QUOTING", "Here Documents"): simple
commands split at newlines and ; & && || | ( ), each word with its quotes removed, comments, redirections and
here-document bodies left out. Linear in the text: one regular expression walks it (no re-reading of a line
when a quote or a continuation carries on), so even a script of megabytes is read at once.

Why not shlex or bashlex: shlex reads a character at a time in Python (slow on a large script, and it knows
no line numbers, here-documents or `$(...)`), and bashlex is a yacc parser that is slower still and raises on
much that bash accepts. What the checker needs is bash's word splitting and quote removal, which is small
and well defined. Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NamedTuple

_TOKEN = re.compile(r"""
  (?P<blank>[ \t\r\f\v]+)
| (?P<newline>\n)
| (?P<continued>\\\n)
| (?P<redirect>\d*(?:<<-|<<<|<<|>>|>&|<&|<>|>\||&>>|&>|[<>]))
| (?P<operator>&&|\|\||;;&?|;&|\|&|[;&|()])
| (?P<single>'[^']*(?P<single_end>')?)
| (?P<ansi>\$'[^'\\]*(?:\\.[^'\\]*)*(?P<ansi_end>')?)
| (?P<double>"[^"\\]*(?:\\.[^"\\]*)*(?P<double_end>")?)
| (?P<substitution>\$\(|`)
| (?P<escape>\\.?)
| (?P<hash>\#)
| (?P<plain>[^\s;&|()<>'"\\`$#]+|\$)
""", re.VERBOSE | re.DOTALL)
# inside $( ... ): what changes the depth, and the quotes whose insides do not count
_IN_SUBSTITUTION = re.compile(r"""[()]|'[^']*'?|"[^"\\]*(?:\\.[^"\\]*)*"?|\\.""", re.DOTALL)
_BACKQUOTED = re.compile(r"(?:[^`\\]|\\.)*`?", re.DOTALL)
# A line, continued or not, with its quotes closed and no `$(`, backquote or here-document: one match in C.
# Each alternative takes a run of plain characters (whole: a lookahead and its backreference, the atomic group
# Python 3.10 lacks), one character or one quoted string, and no two start alike, so a line that does not match
# fails without backtracking into other ways of splitting it.
_PLAIN_LOGICAL_LINE = re.compile(r"""(?:(?=(?P<run>[^'"\\\n`$#<]+))(?P=run)|'[^']*'|"(?:[^"\\`$]|\\.|\$(?!\())*"|\\.|\$(?!\()|<(?!<)"""
                                 r"""|(?<![^\s;&|(])\#[^\n]*|\#)*(?:\n|\Z)""", re.DOTALL)
# what makes a line more than blank-separated words: quotes, operators, redirections, comments, escapes other
# than a continuation
_NOT_BARE_WORDS = re.compile(r"""['"`;&|()<>#]|\\(?!\n)""")
_DOUBLE_ESCAPES = re.compile(r"\\([$`\"\\\n])")


class Word(NamedTuple):  # a tuple: a long script has millions of them
    text: str  # quotes removed; `$(...)` and `$NAME` kept as written
    quoted: bool  # any part was quoted (a quoted `$X` is still one word after expansion)
    expands: bool = True  # no part in single quotes or escaped: bash expands its $NAME


@dataclass(frozen=True)
class SimpleCommand:
    line: int  # where its first word is
    texts: tuple[str, ...]  # its words, quotes removed
    closed: bool  # False: a quote or `$(` is still open at the end of the text (bash -n fails)
    quoting: tuple[tuple[bool, bool], ...] | None = None  # each word's (quoted, expands); None: all bare words

    @property
    def words(self) -> tuple[Word, ...]:
        if self.quoting is None:
            return tuple(Word(text, False) for text in self.texts)
        return tuple(Word(text, *how) for text, how in zip(self.texts, self.quoting, strict=True))


@dataclass(frozen=True)
class Comment:
    line: int
    text: str
    line_start: bool  # the comment is the whole line, from its first column (#SBATCH lines)


def read_commands(text: str, first_line: int = 1, wanted: re.Pattern[str] | None = None,
                  ) -> tuple[list[SimpleCommand], list[Comment]]:
    """The simple commands of `text` in order, and its comments. `first_line` is the line number of text[0].

    With `wanted`, a line that is whole in itself (no quote, backslash, `$(` or here-document) and in which
    `wanted` finds nothing is passed over unread: the caller says which commands can matter to it, and the
    rest of a long script costs a str.find per line."""
    reader = _Reader(text, first_line)
    position, end = 0, len(text)
    while position < end:
        if wanted is not None:
            skip = _PLAIN_LOGICAL_LINE.match(text, position)
            stop = skip.end() if skip is not None else position
            if stop > position and not wanted.search(text, position, stop):
                if text.startswith("#", position):
                    newline = text.find("\n", position)
                    reader.comments.append(Comment(reader.line, text[position:end if newline < 0 else newline], True))
                reader.line += text.count("\n", position, stop)
                position = stop
                continue
            if stop > position and not _NOT_BARE_WORDS.search(text, position, stop):
                # words and continuations only (a long `srun \` line): split in C, as bash would
                words = text[position:stop].replace("\\\n", " ").split()
                if words:
                    reader.commands.append(SimpleCommand(reader.line, tuple(words), True))
                reader.line += text.count("\n", position, stop)
                position = stop
                continue
        position = reader.run(position)
    return reader.commands, reader.comments


class _Reader:
    def __init__(self, text: str, first_line: int) -> None:
        self.text = text
        self.line = first_line
        self.commands: list[SimpleCommand] = []
        self.comments: list[Comment] = []
        self.words: list[Word] = []
        self.parts: list[str] = []  # the word being read
        self.quoted = False
        self.expands = True
        self.word_line = first_line
        self.command_line = first_line
        self.redirect_target = False  # the next word is a redirection's target, not an argument
        self.heredocs: list[tuple[str, bool]] = []  # delimiters whose bodies start after this line
        self.heredoc_word = False  # the next word is a here-document delimiter
        self.heredoc_strip = False  # <<- : the delimiter line may be indented with tabs
        self.closed = True

    def run(self, position: int) -> int:
        """Read from `position` to the end of the line where every quote, continuation and here-document
        has ended; the position after it."""
        text, end = self.text, len(self.text)
        while position < end:
            match = _TOKEN.match(text, position)
            assert match is not None  # every character starts some token
            kind, token = match.lastgroup, match.group()
            position = match.end()
            if kind == "substitution":
                position = self.substitution(token, position)
                continue
            if kind == "hash" and self.parts:
                self.add_part("#", quoted=False)
                continue
            if kind == "hash":  # a comment, to the end of the line
                stop = text.find("\n", position)
                stop = end if stop < 0 else stop
                line_start = match.start() == 0 or text[match.start() - 1] == "\n"
                self.comments.append(Comment(self.line, text[match.start():stop], line_start))
                position = stop
                continue
            if kind == "plain":
                self.add_part(token, quoted=False)
            elif kind in ("single", "ansi", "double"):
                ends = match.group(f"{kind}_end") is not None
                self.closed = self.closed and ends
                inner = token[2 if kind == "ansi" else 1:len(token) - ends]
                if kind != "double":
                    self.add_part(inner, quoted=True, expands=False)
                    self.line += token.count("\n")
                    continue
                self.add_part(_DOUBLE_ESCAPES.sub(lambda m: "" if m.group(1) == "\n" else m.group(1), inner),
                              quoted=True)
            elif kind == "escape":
                self.add_part(token[1:], quoted=True, expands=token[1:] != "$")
            elif kind == "continued":
                pass
            elif kind == "blank":
                self.end_word()
            elif kind == "redirect":
                self.end_word()
                self.redirect_target = True
                self.heredoc_word = token.lstrip("0123456789") in ("<<", "<<-")
                self.heredoc_strip = token.endswith("-")
            elif kind == "operator":
                self.end_command()
            elif kind == "newline":
                self.end_command()
                self.line += 1
                if self.heredocs:
                    position = self.skip_heredocs(position)
                return position
            self.line += token.count("\n")
        self.end_command()
        return position

    def add_part(self, part: str, quoted: bool, expands: bool = True) -> None:
        if not self.parts and not self.quoted:
            self.word_line = self.line
        self.parts.append(part)
        self.quoted = self.quoted or quoted
        self.expands = self.expands and expands

    def end_word(self) -> None:
        if not self.parts and not self.quoted:
            return
        word = Word("".join(self.parts), self.quoted, self.expands)
        self.parts, self.quoted, self.expands = [], False, True
        if self.redirect_target:
            self.redirect_target = False
            if self.heredoc_word:
                self.heredocs.append((word.text, self.heredoc_strip))
                self.heredoc_word = False
            return
        if not self.words:
            self.command_line = self.word_line
        self.words.append(word)

    def end_command(self) -> None:
        self.end_word()
        if self.words:
            self.commands.append(SimpleCommand(self.command_line, tuple(word.text for word in self.words), self.closed,
                                               tuple((word.quoted, word.expands) for word in self.words)))
        self.words = []
        self.redirect_target = False

    def substitution(self, opener: str, position: int) -> int:
        """`$(...)` or a backquoted command, kept as one opaque part: its insides are another command."""
        text = self.text
        if opener == "`":
            match = _BACKQUOTED.match(text, position)
            assert match is not None
            stop = match.end()
            self.closed = self.closed and text[stop - 1:stop] == "`" and stop > position
        else:
            depth, stop = 1, position
            for match in _IN_SUBSTITUTION.finditer(text, position):
                piece = match.group()
                depth += 1 if piece == "(" else -1 if piece == ")" else 0
                stop = match.end()
                if depth == 0:
                    break
            else:
                stop = len(text)
            self.closed = self.closed and depth == 0
        self.add_part(opener + text[position:stop], quoted=False)
        self.line += text.count("\n", position, stop)
        return stop

    def skip_heredocs(self, position: int) -> int:
        """After the line that opened them: each here-document's body, to the line that is its delimiter."""
        for delimiter, strip in self.heredocs:
            indent = r"\t*" if strip else ""
            found = re.compile(rf"^{indent}{re.escape(delimiter)}$", re.MULTILINE).search(self.text, position)
            stop = found.end() if found else len(self.text)
            stop = stop + 1 if stop < len(self.text) else stop
            self.line += self.text.count("\n", position, stop)
            position = stop
        self.heredocs = []
        return position
