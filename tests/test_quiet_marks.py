"""A test that compares a figure the tool measured with an independent truth within a few per cent is marked
`quiet`: tests/run.sh runs those alone, after the other lanes. Beside the image tests, a rank's container start-up
and the sampler's wake-up stretch by tenths of a second, which is more than 5 % of a short step: such a test then
fails for the load, not for the tool (a two-node comparison once ran in the cluster lane and did).

What counts as such a comparison: a use of one of TRUTH_READERS (they read the truth a known program printed of
itself, tests/support/known_load.py) in the test, in a helper of its module it calls, or in a fixture it asks for.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
TRUTH_READERS = frozenset({"assert_agrees_with_truth", "truths", "KNOWN_LOAD"})


def _names_used(node: ast.AST) -> set[str]:
    return {child.id for child in ast.walk(node) if isinstance(child, ast.Name)}


def _marked_quiet(decorators: list[ast.expr]) -> bool:
    return any("quiet" in ast.unparse(decorator) for decorator in decorators)


def _module_marked_quiet(tree: ast.Module) -> bool:
    for statement in tree.body:
        if isinstance(statement, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark"
                                                     for t in statement.targets):
            return "quiet" in ast.unparse(statement.value)
    return False


def unmarked_truth_comparisons(path: Path) -> list[str]:
    """The tests in `path` that read a truth of TRUTH_READERS and are not marked quiet."""
    tree = ast.parse(path.read_text(), str(path))
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    reads: dict[str, bool] = {}

    def reads_truth(name: str, seen: frozenset[str] = frozenset()) -> bool:
        if name in reads:
            return reads[name]
        node = functions[name]
        used = _names_used(node) | {arg.arg for arg in node.args.args}  # a fixture it asks for by name
        found = (bool(used & TRUTH_READERS) and name not in TRUTH_READERS) or any(
            reads_truth(other, seen | {name}) for other in used & set(functions) if other not in seen | {name})
        reads[name] = found
        return found

    if _module_marked_quiet(tree):
        return []
    return [f"{path.relative_to(TESTS.parent)}:{node.lineno}: {name}" for name, node in functions.items()
            if name.startswith("test_") and reads_truth(name) and not _marked_quiet(node.decorator_list)]


def test_every_comparison_with_a_known_programs_truth_is_marked_quiet() -> None:
    found = [line for path in sorted(TESTS.rglob("test_*.py")) for line in unmarked_truth_comparisons(path)]
    assert not found, ("compares a measured figure with a known program's truth but is not marked quiet "
                       "(fix: @pytest.mark.quiet, or split the comparison into a quiet test):\n" + "\n".join(found))


def test_the_scan_finds_an_unmarked_comparison(tmp_path: Path) -> None:
    """The scan itself: a comparison through a helper of its module, unmarked, is found; the marked one is not."""
    sample = tmp_path / "test_sample.py"
    sample.write_text(
        "import pytest\n"
        "def check(report, stdout):\n"
        "    assert_agrees_with_truth(report, stdout)\n"
        "def test_loud(tmp_path):\n"
        "    check({}, '')\n"
        "@pytest.mark.quiet\n"
        "def test_alone(tmp_path):\n"
        "    check({}, '')\n"
        "def test_other(tmp_path):\n"
        "    assert True\n")
    global TESTS
    saved, TESTS = TESTS, tmp_path.parent
    try:
        found = unmarked_truth_comparisons(sample)
    finally:
        TESTS = saved
    assert [line.split(": ")[-1] for line in found] == ["test_loud"]
