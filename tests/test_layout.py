"""Where things live in envbuild/, checked from the source (nothing is imported): one home per concern, one meaning
per word. tests/test_architecture.py checks the order of the top-level packages; this file checks the folders
inside them, the names of files and folders, and what docstrings say.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict

from tests.test_architecture import PACKAGE_DIR, REPO, find_cycles, import_graph

# A folder name that tools take for something else: build output (`build/`, `dist/`, skipped by structure tools and
# by pytest's default norecursedirs) or a test suite (`spec/` is RSpec's, `test*/` everyone's).
MISLEADING_FOLDER_NAMES = re.compile(r"^(build|dist|out|target|specs?|tests?|testing|test_.*|.*_tests?)$")

# File names that several packages may each have because the file plays the same role in each. Everything else is
# named for what it holds, so that a name found in a traceback, a grep or an editor tab says which file it is.
SAME_ROLE_NAMES = {
    "__init__.py": "each package's own docstring (and, where there is one, its registration table)",
}


def test_no_folder_is_named_like_build_output_or_tests() -> None:
    misleading = [str(path.relative_to(REPO)) for path in PACKAGE_DIR.rglob("*")
                  if path.is_dir() and path.name != "__pycache__" and MISLEADING_FOLDER_NAMES.match(path.name)]
    assert misleading == [], f"rename these source folders (tools take them for build output or tests): {misleading}"


def test_no_two_files_in_different_folders_share_a_name() -> None:
    folders_by_name: dict[str, list[str]] = defaultdict(list)
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        if path.name not in SAME_ROLE_NAMES:
            folders_by_name[path.name].append(str(path.parent.relative_to(REPO)))
    shared = {name: folders for name, folders in folders_by_name.items() if len(folders) > 1}
    assert shared == {}, ("files with the same name in different folders (name each for what it holds, or add the "
                          f"name to SAME_ROLE_NAMES with the role it plays in each): {shared}")


def sibling_edges() -> dict[str, set[tuple[str, str]]]:
    """For each folder F: the imports between F's children (its subfolders and its own modules), as (from, to)
    child names. An import from deep inside one child to deep inside another counts as an edge between the two."""
    edges: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for module, imports in import_graph().items():
        for target in imports:
            source_parts, target_parts = module.split("."), target.split(".")
            common = 0
            while (common < min(len(source_parts), len(target_parts))
                   and source_parts[common] == target_parts[common]):
                common += 1
            if common >= min(len(source_parts), len(target_parts)):
                continue  # one is the other's package (__init__), not two siblings
            parent = ".".join(source_parts[:common])
            edges[parent].add((source_parts[common], target_parts[common]))
    return edges


def cycles_in(edges: set[tuple[str, str]]) -> list[list[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for source, target in edges:
        graph[source].add(target)
    return find_cycles(graph)


def test_no_folder_goes_back_up_to_a_sibling_it_left() -> None:
    """Inside every package, its subfolders and modules import each other one way only: following a spec through
    `envbuild build` (commands.build -> builder.sessions -> builder.execute / builder.plan -> lock -> envspec ...)
    never returns to a folder it left, at any depth. (The top level's order is PACKAGE_ORDER, in
    tests/test_architecture.py; its module cycles are checked there too.)"""
    problems = []
    for parent, edges in sorted(sibling_edges().items()):
        folder_edges = {(a, b) for a, b in edges if (PACKAGE_DIR.parent / parent.replace(".", "/") / a).is_dir()
                        or (PACKAGE_DIR.parent / parent.replace(".", "/") / b).is_dir()}
        problems += [f"{parent}: " + " -> ".join(cycle) for cycle in cycles_in(folder_edges)]
    assert problems == [], "folders that import each other (merge them, or move what both need below both):\n" + "\n".join(problems)


def test_the_folder_check_finds_a_cycle() -> None:
    assert cycles_in({("sessions", "plan"), ("plan", "sessions")}) == [["plan", "sessions", "plan"]]
    assert cycles_in({("sessions", "plan"), ("sessions", "execute"), ("execute", "plan")}) == []


ISSUE_REFERENCE = re.compile(r"\b[Ii]ssues? #?\d+")


def test_docstrings_and_comments_say_what_not_which_issue() -> None:
    """An issue number tells a reader nothing the code does not; what the issue asked is said in words."""
    found = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if ISSUE_REFERENCE.search(line):
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert found == [], "\n".join(found)


def test_every_package_says_what_it_holds() -> None:
    """The docs' module map (docs/gen_reference.py) starts each package with its docstring."""
    silent = [str(path.relative_to(REPO)) for path in sorted(PACKAGE_DIR.rglob("__init__.py"))
              if not ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))]
    assert silent == [], f"packages without a docstring saying what they hold: {silent}"
