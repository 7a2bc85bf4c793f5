"""Test helpers live in one place, tests/support/: a module under tests/ that is neither a test file nor a
conftest is a helper some test imports, and a reader looking for it should not have to search every folder."""

from __future__ import annotations

from tests.conftest import REPO

TESTS = REPO / "tests"
# A script rather than a helper: it regenerates the README's picture (python -m tests.catalogue.example).
SCRIPTS = {TESTS / "catalogue" / "example.py"}


def test_helpers_live_in_tests_support() -> None:
    strays = sorted(
        str(path.relative_to(REPO)) for path in TESTS.rglob("*.py")
        if not path.name.startswith("test_") and path.name not in ("conftest.py", "__init__.py")
        and TESTS / "support" not in path.parents and TESTS / "fixtures" not in path.parents
        and TESTS / "golden" not in path.parents and path not in SCRIPTS)
    assert not strays, f"helper modules outside tests/support/: {strays}; fix: git mv them into tests/support/"
