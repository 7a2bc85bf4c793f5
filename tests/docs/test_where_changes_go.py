"""docs/development.md's "Where a change goes" against the tree: every file, folder and `file:NAME` a row names
exists, NAME is defined at the top of that file, and every registration table of the code is in the table."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "development.md"
# A backticked place in the table: a path (with <placeholders>), optionally `:NAME` of what is defined in it.
PLACE = re.compile(r"`((?:envbuild|recipes|tests|docs)/[^`\s:]*)(?::([A-Za-z_][A-Za-z0-9_]*))?`")


def section() -> str:
    text = PAGE.read_text(encoding="utf-8")
    start = text.index("## Where a change goes")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else None]


def defined_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(target.id for target in node.targets if isinstance(target, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def test_every_place_the_table_names_exists() -> None:
    places = PLACE.findall(section())
    assert len(places) > 20, "the table names fewer places than it did: did its format change?"
    missing = []
    for path_text, name in places:
        concrete = path_text.split("<", 1)[0]  # `recipes/<site>.yaml`: the folder must exist
        path = REPO / concrete
        if not path.exists():
            missing.append(path_text)
        elif name and name not in defined_names(path):
            missing.append(f"{path_text}:{name} (no such name defined at the top of the file)")
    assert missing == [], f"docs/development.md's 'Where a change goes' names what is not there: {missing}"


def test_every_registration_table_of_the_code_is_in_the_table() -> None:
    """A table the code dispatches from (rules, sources, formats, commands) is where a change of that kind goes:
    the page must name it, so that a new table cannot be added without saying so there."""
    named = {f"{path}:{name}" for path, name in PLACE.findall(section()) if name}
    tables = set()
    for path in sorted((REPO / "envbuild").rglob("*.py")):
        for name in defined_names(path):
            if name in ("RULES", "GPU_SOURCES", "FORMATS", "SUBCOMMANDS", "LAZY_COMMANDS", "LAUNCHERS"):
                tables.add(f"{path.relative_to(REPO).as_posix()}:{name}")
    assert tables <= named, f"tables the page does not name: {sorted(tables - named)}"
