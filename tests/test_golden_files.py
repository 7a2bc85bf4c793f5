"""tests/golden/ holds exactly the files the golden tests compare with: a file that no case table
produces any more (a renamed or dropped case) is stale and fails here, listing it; a case whose file is
missing fails too. The names come from the case tables the golden tests are parametrized with
(tests/builder/test_plan.py, tests/builder/test_overlayplan.py, tests/builder/test_condaplan.py, tests/launch/test_plan.py,
tests/convert/test_import_export.py, tests/slurm/test_recipedraft.py).

Golden files are rewritten with ENVBUILD_UPDATE_GOLDEN=1 pytest tests/builder/test_plan.py
tests/builder/test_overlayplan.py tests/launch/test_plan.py (review the diff); that never deletes a stale file: git rm it."""

from __future__ import annotations

from tests.builder import test_condaplan as test_condaplan_golden
from tests.builder import test_overlayplan as test_overlayplan_golden
from tests.builder import test_plan as test_buildplan_golden
from tests.builder import test_upperplan as test_upperplan_golden
from tests.catalogue import test_page as test_catalogue_golden
from tests.convert import test_import_export as test_convert_golden
from tests.launch import test_plan as test_launchplan
from tests.slurm import test_recipedraft as test_recipedraft_golden
from tests.slurm import test_script as test_batchscript_golden
from tests.support.golden import GOLDEN


def expected_golden_files() -> set[str]:
    return (test_buildplan_golden.golden_names() | test_overlayplan_golden.golden_names() | test_launchplan.golden_names()
            | test_batchscript_golden.golden_names() | test_convert_golden.golden_names()
            | test_condaplan_golden.golden_names() | test_catalogue_golden.golden_names()
            | test_upperplan_golden.golden_names() | test_recipedraft_golden.golden_names())


def test_no_stale_golden_files() -> None:
    present = {path.name for path in GOLDEN.iterdir()}
    stale = sorted(present - expected_golden_files())
    assert not stale, (
        f"{len(stale)} golden file(s) in {GOLDEN} that no golden test produces: {', '.join(stale)}\n"
        f"  fix: git rm them, or add their case back to the case table")


def test_every_golden_case_has_its_file() -> None:
    missing = sorted(expected_golden_files() - {path.name for path in GOLDEN.iterdir()})
    assert not missing, f"golden files missing: {', '.join(missing)}\n  fix: ENVBUILD_UPDATE_GOLDEN=1 pytest tests/ -k golden"


def test_the_case_tables_are_not_empty() -> None:
    """A guard for the guard: empty tables would make every file stale, never silently pass."""
    assert len(test_buildplan_golden.golden_names()) == 6
    assert len(test_overlayplan_golden.golden_names()) == len(test_overlayplan_golden.GOLDEN_CASES) == 2
    assert len(test_launchplan.golden_names()) == len(test_launchplan.GOLDEN_CASES) == 36
    assert len(test_batchscript_golden.golden_names()) == len(test_batchscript_golden.GOLDEN_CASES) >= 10
    assert len(test_convert_golden.golden_names()) == len(test_convert_golden.GOLDEN_CASES) == 2
    assert len(test_recipedraft_golden.golden_names()) == len(test_recipedraft_golden.GOLDEN_CASES) >= 5
