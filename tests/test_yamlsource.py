"""The YAML source locator (envbuild.shared.yamlsource): where every key and item sits (1-based line and
column), refusing duplicate keys at any depth with both places named, and syntax and file errors as
located problems with a fix."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from envbuild.shared.errors import SpecError, UsageError
from envbuild.shared.yamlsource import Position, load_yaml_file, parse_yaml_text
from tests.support.cputime import cpu_seconds

TEXT = """\
name: demo
python:
  packages:
    - six
    -   idna
  pytorch: {version: "2.13.0"}
list_of_maps:
  - a: 1
    b: 2
"""


def test_every_key_and_item_is_located() -> None:
    document = parse_yaml_text(TEXT, "x.yaml")
    assert document.file == "x.yaml"
    assert document.data["python"]["packages"] == ["six", "idna"]
    assert document.positions == {
        (): Position(1, 1),
        ("name",): Position(1, 1),
        ("python",): Position(2, 1),
        ("python", "packages"): Position(3, 3),
        ("python", "packages", 0): Position(4, 7),
        ("python", "packages", 1): Position(5, 9),
        ("python", "pytorch"): Position(6, 3),
        ("python", "pytorch", "version"): Position(6, 13),
        ("list_of_maps",): Position(7, 1),
        ("list_of_maps", 0): Position(8, 5),
        ("list_of_maps", 0, "a"): Position(8, 5),
        ("list_of_maps", 0, "b"): Position(9, 5),
    }


def test_a_missing_field_is_placed_at_its_nearest_located_parent() -> None:
    document = parse_yaml_text(TEXT, "x.yaml")
    assert document.position_of(("python", "packages", 1)) == Position(5, 9)
    assert document.position_of(("python", "packages", 7)) == Position(3, 3)
    assert document.position_of(("python", "absent", "deeper")) == Position(2, 1)
    assert document.position_of(("nothing",)) == Position(1, 1)


def test_document_starting_below_comments_is_placed_there() -> None:
    document = parse_yaml_text("# comment\n\nname: demo\n", "x.yaml")
    assert document.positions[()] == Position(3, 1)
    assert document.position_of(("absent",)) == Position(3, 1)


def test_an_empty_document_has_no_data_and_sits_at_the_top() -> None:
    document = parse_yaml_text("# only a comment\n", "x.yaml")
    assert document.data is None and document.positions == {}
    assert document.position_of(("name",)) == Position(1, 1)


def problem_of(text: str) -> str:
    with pytest.raises(SpecError) as caught:
        parse_yaml_text(text, "x.yaml")
    (problem,) = caught.value.problems
    assert caught.value.exit_code == 2
    return problem.render()


@pytest.mark.parametrize(("text", "where", "key", "first"), [
    ("name: a\nbase: b\nname: c\n", "x.yaml:3:1", "name", 1),
    ("python:\n  packages: [six]\n  pytorch: {}\n  packages: [idna]\n", "x.yaml:4:3", "packages", 2),
    ("env: {A: '1', B: '2', A: '3'}\n", "x.yaml:1:23", "A", 1),
    ("tests:\n  - {x: 1}\n  - x: 1\n    y: 2\n    x: 3\n", "x.yaml:5:5", "x", 3),
])
def test_duplicate_keys_are_refused_at_any_depth_naming_both_places(text: str, where: str, key: str, first: int) -> None:
    assert problem_of(text) == (
        f"{where}: (top level): YAML syntax: duplicate key {key!r} (key {key!r} first given on line {first})\n"
        "    fix: keep one of the two: the later one would silently replace the first"
    )


def test_the_same_key_in_sibling_mappings_is_no_duplicate() -> None:
    assert parse_yaml_text("a: {x: 1}\nb: {x: 2}\n", "x.yaml").data == {"a": {"x": 1}, "b": {"x": 2}}


@pytest.mark.parametrize(("text", "expected"), [
    ("name: demo\nbase: [unclosed\n", "x.yaml:3:1: (top level): YAML syntax: expected ',' or ']', but got '<stream end>'"),
    ("a: b: c\n", "x.yaml:1:5: (top level): YAML syntax: mapping values are not allowed here"),
    ("a:\n  - x\n b: 2\n", "x.yaml:3:2: (top level): YAML syntax: expected <block end>, but found '<block mapping start>'"),
    ("a: *nowhere\n", "x.yaml:1:4: (top level): YAML syntax: found undefined alias 'nowhere'"),
])
def test_syntax_errors_are_located_with_a_fix(text: str, expected: str) -> None:
    rendered = problem_of(text)
    assert rendered.splitlines() == [
        expected, "    fix: check indentation and quoting near this line (values with ':' or '#' need quotes)"]


def test_unsafe_tags_are_refused_not_run() -> None:
    assert "could not determine a constructor for the tag" in problem_of("a: !!python/object/apply:os.system ['true']\n")


def test_files_are_read_and_named(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("a:\n  b: 1\n")
    document = load_yaml_file(path)
    assert document.file == str(path) and document.positions[("a", "b")] == Position(2, 3)
    path.write_text("a: 1\na: 2\n")
    with pytest.raises(SpecError, match=rf"^{path}:2:1: \(top level\): YAML syntax: duplicate key 'a'"):
        load_yaml_file(path)


@pytest.mark.parametrize(("make", "message", "fix"), [
    (lambda p: None, "no such file", "check the path"),
    (lambda p: p.mkdir(), "is a directory", "give the path of a .yaml file"),
    (lambda p: p.write_bytes(b"name: \xff\xfe\n"), "not UTF-8 text (invalid start byte at byte 6)", "save the spec as UTF-8"),
])
def test_unreadable_files_are_a_usage_error_with_a_fix(tmp_path: Path, make: Callable[[Path], object], message: str,
                                                     fix: str) -> None:
    path = tmp_path / "s.yaml"
    make(path)
    with pytest.raises(UsageError) as caught:
        load_yaml_file(path)
    assert caught.value.exit_code == 2
    assert caught.value.message.startswith(f"{path}: {message}")
    assert caught.value.hint and fix in caught.value.hint


def test_alias_bomb_is_refused_quickly() -> None:

    lines = ['a: &a ["x","x","x","x","x","x","x","x","x","x"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 10) + "]")
    start = cpu_seconds()
    with pytest.raises(SpecError) as caught:
        parse_yaml_text("\n".join(lines) + "\n", "bomb.yaml")
    assert cpu_seconds() - start < 5
    assert "expands to more than 100000 values through aliases" in caught.value.render()


def test_small_aliases_still_work() -> None:
    doc = parse_yaml_text("base: &b {x: 1}\nother: *b\n", "ok.yaml")
    assert doc.data == {"base": {"x": 1}, "other": {"x": 1}}


@pytest.mark.parametrize(("text", "expected"), [
    ("name: x\x01y\n", "bad.yaml:1:8: (top level): YAML syntax: character U+0001 is not allowed"),
    ("a: " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply"),
])
def test_control_characters_and_deep_nesting_are_located_errors(text: str, expected: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_yaml_text(text, "bad.yaml")
    assert expected in caught.value.render()
