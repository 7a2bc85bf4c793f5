"""Load YAML while remembering where every key and item sits, so errors can name file:line:column."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from envbuild.shared.errors import SpecError, SpecProblem

FieldPath = tuple[str | int, ...]


@dataclass(frozen=True)
class Position:
    line: int  # 1-based
    column: int  # 1-based


@dataclass
class LocatedDocument:
    """Parsed YAML data plus the position of every mapping key and sequence item."""

    file: str
    data: Any
    positions: dict[FieldPath, Position]

    def position_of(self, path: FieldPath) -> Position:
        """The position of `path`, or of its nearest located ancestor (a missing field is
        reported where its parent mapping starts)."""
        probe = tuple(path)
        while probe:
            if probe in self.positions:
                return self.positions[probe]
            probe = probe[:-1]
        return self.positions.get((), Position(1, 1))


# A spec is a few hundred nodes; aliases (*name) may repeat an anchored part, but nine levels of ten aliases
# (1 KB of text) expand to a billion nodes, which kept a loader busy for minutes and gigabytes. Every later
# stage (validation, planning) walks the expanded data, so the expansion is capped here, where it is counted.
MAX_EXPANDED_NODES = 100_000


class _TooLarge(Exception):
    def __init__(self, node: yaml.Node) -> None:
        self.node = node


def _walk(node: yaml.Node, path: FieldPath, positions: dict[FieldPath, Position], budget: list[int]) -> None:
    budget[0] -= 1
    if budget[0] < 0:
        raise _TooLarge(node)
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node.value)
            child = (*path, key)
            mark = key_node.start_mark
            positions[child] = Position(mark.line + 1, mark.column + 1)
            _walk(value_node, child, positions, budget)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            child = (*path, index)
            mark = item.start_mark
            positions[child] = Position(mark.line + 1, mark.column + 1)
            _walk(item, child, positions, budget)


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys: a silently overwritten key loses the user's input."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: dict[Any, yaml.Node] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if not isinstance(key, (str, int, float, bool, type(None))):  # `? [a, b]` or `? {x: 1}` as a key
            raise yaml.MarkedYAMLError(problem=f"a key must be a plain value, not a {type(key).__name__}",
                                       problem_mark=key_node.start_mark)
        if key in seen:
            first = seen[key].start_mark
            raise yaml.MarkedYAMLError(
                context=f"key {key!r} first given on line {first.line + 1}",
                context_mark=first,
                problem=f"duplicate key {key!r}",
                problem_mark=key_node.start_mark,
            )
        seen[key] = key_node
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def parse_yaml_text(text: str, file: str) -> LocatedDocument:
    """Parse `text` (named `file` in messages). YAML syntax errors, characters YAML does not allow, nesting too
    deep for the parser and alias expansions beyond MAX_EXPANDED_NODES become a located SpecError."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        positions: dict[FieldPath, Position] = {}
        if node is not None:
            positions[()] = Position(node.start_mark.line + 1, node.start_mark.column + 1)
            _walk(node, (), positions, [MAX_EXPANDED_NODES])
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, column = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        problem = exc.problem or "invalid YAML"
        hint = "check indentation and quoting near this line (values with ':' or '#' need quotes)"
        if exc.context and "first given" in exc.context:
            problem = f"{problem} ({exc.context})"
            hint = "keep one of the two: the later one would silently replace the first"
        raise SpecError([SpecProblem(file, line, column, "", f"YAML syntax: {problem}", hint)]) from None
    except yaml.reader.ReaderError as exc:  # a control character or other byte YAML does not allow
        line, column = _line_column(text, exc.position)
        code = ord(exc.character) if isinstance(exc.character, str) else int(exc.character)
        raise SpecError([SpecProblem(file, line, column, "", f"YAML syntax: character U+{code:04X} is not allowed in YAML",
                                     "delete it; it is often pasted from a terminal or a word processor")]) from None
    except _TooLarge as exc:
        mark = exc.node.start_mark
        raise SpecError([SpecProblem(file, mark.line + 1, mark.column + 1, "", "the document expands to more than "
                                     f"{MAX_EXPANDED_NODES} values through aliases (*name)",
                                     "write the values out, or use fewer nested aliases")]) from None
    except RecursionError:
        raise SpecError([SpecProblem(file, 1, 1, "", "YAML nested too deeply for the parser",
                                     "a spec needs a few levels; check for unclosed brackets")]) from None
    return LocatedDocument(file=file, data=data, positions=positions)


def _line_column(text: str, position: int) -> tuple[int, int]:
    before = text[:position]
    return before.count("\n") + 1, position - (before.rfind("\n") + 1) + 1


def load_yaml_file(path: Path) -> LocatedDocument:
    """Read and parse a YAML file; unreadable files become a clear error."""
    from envbuild.shared.errors import UsageError

    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file", "check the path to the spec") from None
    except IsADirectoryError:
        raise UsageError(f"{path}: is a directory, not a spec file", "give the path of a .yaml file") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})", "save the spec as UTF-8") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror}") from None
    return parse_yaml_text(text, str(path))
