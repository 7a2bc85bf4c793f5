"""Shell words of a batch script's body as bash reads them (bash(1) "SHELL GRAMMAR", "QUOTING"): the simple
commands, each word with its quotes removed, comments; redirections, here-document bodies and the commands
inside `$(...)` and `<(...)` left out. The grammar is tree-sitter-bash's (a full bash grammar in C: arrays,
`declare`, functions, `case`, `[[ ]]`, arithmetic, process substitution, here-documents), imported only when a
script is read.

Why tree-sitter-bash: the regular-expression tokenizer this replaced split `nodes=( $(cmd) )`, `case` items and
`$((N - 1))` into commands bash never runs, and bashlex (a yacc parser in Python) raises on much that bash
accepts and is slower; docs/reports/performance.md has the side-by-side figures (bench/check_parser.py).

A long script stays fast: with `wanted`, the lines before the first multi-line construct that the caller does
not need, and that open or close nothing (no keyword, bracket or operator), are blanked before the parse, and
those that are bare words are split in C. Pure.
"""

from __future__ import annotations

import heapq
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from tree_sitter import Node, Parser

# A line, continued or not, with its quotes closed and no `$(`, backquote or here-document: one match in C.
# Each alternative takes a run of plain characters (whole: a lookahead and its backreference, the atomic group
# Python 3.10 lacks), one character or one quoted string, and no two start alike, so a line that does not match
# fails without backtracking into other ways of splitting it.
_PLAIN_LOGICAL_LINE = re.compile(r"""(?:(?=(?P<run>[^'"\\\n`$#<]+))(?P=run)|'[^']*'|"(?:[^"\\`$]|\\.|\$(?!\())*"|\\.|\$(?!\()|<(?!<)"""
                                 r"""|(?<![^\s;&|(])\#[^\n]*|\#)*(?:\n|\Z)""", re.DOTALL)
# what makes a line more than blank-separated words: quotes, operators, redirections, comments, escapes other
# than a continuation
_NOT_BARE_WORDS = re.compile(r"""['"`;&|()<>#{}\[\]]|\\(?!\n)""")
# what may open or close a construct that spans lines, or join a line to the next: such a line is parsed
_STRUCTURAL = re.compile(r"[(){};&|\[\]]")
_RESERVED = frozenset(("if", "then", "elif", "else", "fi", "case", "esac", "for", "select", "while", "until", "do",
                       "done", "in", "function", "time", "coproc", "!", "{", "}", "[[", "]]"))
_OPENS = frozenset(("if", "case", "for", "select", "while", "until", "{"))
_CLOSES = frozenset(("fi", "esac", "done", "}"))
_KEYWORDISH = re.compile(r"[^\s;&|()]+")
_DOUBLE_ESCAPES = re.compile(r"\\([$`\"\\\n])")
_ESCAPE = re.compile(r"\\(.)", re.DOTALL)
# nodes that hold no command of the script's own (words, expansions, `$(...)`, `<(...)`, tests, here-documents)
_LEAVES = frozenset((
    "word", "string", "raw_string", "ansi_c_string", "translated_string", "number", "concatenation",
    "simple_expansion", "expansion", "command_substitution", "process_substitution", "arithmetic_expansion",
    "test_command", "heredoc_body", "heredoc_start", "heredoc_end", "file_redirect", "herestring_redirect",
    "variable_name", "extglob_pattern", "brace_expression", "regex", "special_variable_name",
))


_COMMANDS = frozenset(("command", "declaration_command", "unset_command", "variable_assignment",
                       "variable_assignments"))


class Word(NamedTuple):  # a tuple: a long script has millions of them
    text: str  # quotes removed; `$(...)` and `$NAME` kept as written
    quoted: bool  # any part was quoted (a quoted `$X` is still one word after expansion)
    expands: bool = True  # no part in single quotes or escaped: bash expands its $NAME


@dataclass(frozen=True)
class SimpleCommand:
    line: int  # where its first word is
    texts: tuple[str, ...]  # its words, quotes removed; never empty
    closed: bool  # False: bash cannot parse the script from here on (a quote or `$(` that never closes, ...)
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

    With `wanted`, the caller says which commands can matter to it: a line that needs no grammar (it opens and
    closes nothing, before any multi-line quote, `$(` or here-document) and in which `wanted` finds nothing is
    left out unread."""
    early_commands: list[SimpleCommand] = []
    early_comments: list[Comment] = []
    if wanted is not None:
        text = _blank_plain_lines(text, first_line, wanted, early_commands, early_comments)
    source = text.encode("utf-8", "surrogatepass")
    tree = _parser().parse(source)
    reader = _TreeReader(source, first_line, wanted)
    reader.read(tree.root_node)
    if early_commands and reader.error_line is not None:
        early_commands = [replace_closed(command) if command.line >= reader.error_line else command
                          for command in early_commands]
    commands = list(heapq.merge(early_commands, reader.commands, key=lambda command: command.line))
    comments = list(heapq.merge(early_comments, reader.comments, key=lambda comment: comment.line))
    return commands, comments


def replace_closed(command: SimpleCommand) -> SimpleCommand:
    return SimpleCommand(command.line, command.texts, False, command.quoting)


_PARSER: list[Parser] = []


def _parser() -> Parser:
    """tree-sitter's parser for bash, made once (imported here: envrun's launch path never reads a script)."""
    if not _PARSER:
        import tree_sitter_bash
        from tree_sitter import Language, Parser

        _PARSER.append(Parser(Language(tree_sitter_bash.language())))
    return _PARSER[0]


def _blank_plain_lines(text: str, first_line: int, wanted: re.Pattern[str], commands: list[SimpleCommand],
                       comments: list[Comment]) -> str:
    """`text` with the lines the caller does not need made empty (their newlines kept, so lines keep their
    numbers); bare-word lines it needs go to `commands` and whole-line comments to `comments`, and are blanked
    too. Only while every line so far is whole in itself and at the top level: from the first line that is
    not (a quote or `$(` that goes on, a here-document, unbalanced brackets, a keyword that opens a block), the
    rest is left to the grammar."""
    pieces: list[str] = []
    position, end, line = 0, len(text), first_line
    depth = 0  # blocks opened (if, case, for, while, until, {) and not yet closed, on the lines read so far
    joined = False  # the line before ends in an operator that carries the command on (|, &&, ||)
    while position < end:
        match = _PLAIN_LOGICAL_LINE.match(text, position)
        stop = match.end() if match is not None else position
        if stop == position:
            break
        segment = text[position:stop]
        newlines = segment.count("\n")
        blank = False
        if segment.startswith("#"):  # a whole-line comment (#SBATCH lines after the first command)
            comments.append(Comment(line, segment.rstrip("\n"), True))
            blank = True
        elif depth == 0 and not joined and not _STRUCTURAL.search(segment):
            words = segment.replace("\\\n", " ").split()
            if not _RESERVED.intersection(words):
                if not wanted.search(segment):
                    blank = True
                elif not _NOT_BARE_WORDS.search(segment):
                    commands.append(SimpleCommand(line, tuple(words), True))
                    blank = True
        if not blank:
            if segment.count("(") != segment.count(")"):
                break  # a case item, a multi-line array or subshell: the grammar reads the rest
            for word in _KEYWORDISH.findall(segment.split(" #", 1)[0]):
                depth += (word in _OPENS) - (word in _CLOSES)
            if depth < 0:
                break
            joined = segment.rstrip().endswith(("|", "&&"))
        pieces.append("\n" * newlines if blank else segment)
        line += newlines
        position = stop
    pieces.append(text[position:])
    return "".join(pieces)


class _TreeReader:
    """The commands and comments of tree-sitter's tree, in the order of the text."""

    def __init__(self, source: bytes, first_line: int, wanted: re.Pattern[str] | None = None) -> None:
        self.source = source
        self.first_line = first_line
        # the caller's pattern on the tree's bytes, so that a command it does not want is never decoded
        self.wanted = re.compile(wanted.pattern.encode(), wanted.flags & ~re.UNICODE) if wanted is not None else None
        self.commands: list[SimpleCommand] = []
        self.comments: list[Comment] = []
        self.error_byte = len(source) + 1  # where bash stops understanding the text (none: past its end)
        self.error_line: int | None = None

    def read(self, root: Node) -> None:
        if root.has_error:
            self.error_byte = _first_error(root)
            self.error_line = self.first_line + self.source.count(b"\n", 0, self.error_byte)
        stack = [root]
        while stack:
            node = stack.pop()
            kind = node.type
            if kind in _COMMANDS and self.wanted is not None and not self.wanted.search(
                    self.source[node.start_byte:node.end_byte]):
                continue  # a command the caller has no use for (its comments, if any, are not #SBATCH lines)
            if kind == "command":
                self.add_command(node)
            elif kind in ("declaration_command", "unset_command"):
                self.add(node, node.children)
            elif kind == "variable_assignment":  # X=1, nodes=(a b): one word, no program
                self.add(node, [node])
            elif kind == "variable_assignments":
                self.add(node, node.named_children)
            elif kind == "comment":
                self.comments.append(Comment(self.first_line + node.start_point.row, self.text(node),
                                             node.start_point.column == 0))
            elif kind not in _LEAVES:
                stack.extend(reversed(node.children))

    def text(self, node: Node) -> str:
        return self.source[node.start_byte:node.end_byte].decode("utf-8", "surrogatepass")

    def add_command(self, node: Node) -> None:
        """A command's words, without its redirections. tree-sitter-bash (0.25) reads `A=1 B=2` and the next
        line as one command; bash ends a command at an unescaped newline, and so does this. Nodes with no blank
        between them are one word, as bash splits words at blanks only (the grammar reads
        `--mounts=/a,`pwd`:/b` as two nodes)."""
        parts: list[Node | tuple[Node, ...]] = []
        end = node.start_byte
        for child in node.children:
            gap = self.source[end:child.start_byte]
            if b"\n" in gap and b"\n" in gap.replace(b"\\\n", b""):
                self.add(node, parts)
                parts = []
            touches = parts and child.start_byte == end
            end = child.end_byte
            if child.type.endswith("redirect") or child.type == "comment":
                continue
            if touches:
                last = parts[-1]
                parts[-1] = (*last, child) if isinstance(last, tuple) else (last, child)
            else:
                parts.append(child)
        self.add(node, parts)

    def add(self, node: Node, parts: list[Node] | list[Node | tuple[Node, ...]]) -> None:
        words = [word for word in map(self.part_word, parts) if word is not None]
        if not words:
            return
        first = parts[0]
        line = self.first_line + (first[0] if isinstance(first, tuple) else first).start_point.row
        self.commands.append(SimpleCommand(line, tuple(word.text for word in words), node.end_byte < self.error_byte,
                                           tuple((word.quoted, word.expands) for word in words)))

    def part_word(self, part: Node | tuple[Node, ...]) -> Word | None:
        """The word of a node, or of nodes that touch (one word to bash)."""
        if not isinstance(part, tuple):
            return self.word(part)
        return self.joined(part[-1], list(part), part[0].start_byte)

    def word(self, node: Node) -> Word | None:
        """The word bash makes of a node, its quotes removed; `$X`, `${X}`, `$(...)`, `$((...))` as written."""
        kind = node.type
        raw = self.text(node)
        if kind == "command_name":
            return self.word(node.children[0]) if node.children else None
        if kind == "word" or not node.is_named:
            if "\\" not in raw:
                return Word(raw, False)
            return Word(_ESCAPE.sub(lambda m: "" if m.group(1) == "\n" else m.group(1), raw), True, "\\$" not in raw)
        if kind == "string":
            return Word(_DOUBLE_ESCAPES.sub(lambda m: "" if m.group(1) == "\n" else m.group(1), raw[1:-1]), True)
        if kind == "translated_string":
            return Word(_DOUBLE_ESCAPES.sub(lambda m: "" if m.group(1) == "\n" else m.group(1), raw[2:-1]), True)
        if kind == "raw_string":
            return Word(raw[1:-1], True, False)
        if kind == "ansi_c_string":
            return Word(raw[2:-1], True, False)
        if kind == "concatenation":
            return self.joined(node, node.children, node.start_byte)
        if kind == "variable_assignment":
            value = node.child_by_field_name("value")
            if value is None or value.type == "array":
                return Word(raw, False)
            return self.joined(node, [value], node.start_byte)
        return Word(raw, False)

    def joined(self, node: Node, parts: list[Node], start: int) -> Word:
        """The node's text with each part's quotes removed; what lies between the parts as written."""
        texts: list[str] = []
        quoted, expands = False, True
        for part in parts:
            if part.start_byte > start:
                texts.append(self.source[start:part.start_byte].decode("utf-8", "surrogatepass"))
            word = self.word(part)
            if word is not None:
                texts.append(word.text)
                quoted, expands = quoted or word.quoted, expands and word.expands
            start = part.end_byte
        if start < node.end_byte:
            texts.append(self.source[start:node.end_byte].decode("utf-8", "surrogatepass"))
        return Word("".join(texts), quoted, expands)


def _first_error(root: Node) -> int:
    """Where the first ERROR or MISSING node of the tree starts: bash stops understanding the script there."""
    node = root
    while True:
        for child in node.children:
            if child.is_error or child.is_missing:
                return int(child.start_byte)
            if child.has_error:
                node = child
                break
        else:
            return int(node.start_byte)
