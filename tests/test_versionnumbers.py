"""Versions as tools print them, read in one place (envbuild.shared.versionnumbers): Slurm's, the container
runtime's, torch's, CUDA's and HIP's. A grammar of version texts checks the reading, and a scan of envbuild/ fails
when a module reads release numbers on its own again (a regex over digits and dots, or its own digit loop)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from envbuild.envspec.torchfamily import _release
from envbuild.host.runtimeversion import parse_version_line
from envbuild.launch.bindstyle import slurm_version_in
from envbuild.shared.versionnumbers import at_least, release_in, release_numbers, version_word
from envbuild.slurm.cluster import Answer, slurm_release, version_from

REPO = Path(__file__).resolve().parent.parent
HOME = REPO / "envbuild/shared/versionnumbers.py"


@pytest.mark.parametrize(("text", "numbers"), [
    ("23.11.10", (23, 11, 10)), ("2.11.0+rocm7.1", (2, 11, 0)), ("2.12.0a0+git1234", (2, 12, 0)),
    ("24.05", (24, 5)), ("v1.4.5-rc.1", (1, 4, 5)), ("1.4.5-1.el9", (1, 4, 5)), ("6.2.41133-dd7f95766", (6, 2, 41133)),
    ("12", (12,)), ("slurm", None), ("", None), (".5", None),
])
def test_release_numbers(text: str, numbers: tuple[int, ...] | None) -> None:
    assert release_numbers(text) == numbers


def test_at_least_compares_release_numbers() -> None:
    assert at_least("23.11.4", "23.11.4") and at_least("24.05.8", "23.11.4") and at_least("23.11.10", "23.11.4")
    assert not at_least("23.11.3", "23.11.4") and not at_least("23.02.7", "23.11.4")
    assert at_least("2.11.0+rocm7.1", "2.11") and at_least("2.12.0a0+git", "2.11")
    assert not at_least("2.10.0+rocm7.0", "2.11") and not at_least("", "2.11")


@pytest.mark.parametrize("line", ["slurm 23.11.4", "slurm-wlm 22.05.8", "slurm 24.05.1\n"])
def test_every_reader_of_a_slurm_version_agrees(line: str) -> None:
    """scontrol's, srun's and the check's readings of one line: the same release."""
    numbers = release_in(line)
    assert numbers is not None
    assert slurm_release(line) == numbers[:2]
    assert release_numbers(slurm_version_in(line.strip())) == numbers
    assert release_numbers(version_word(line)) == numbers
    assert version_from(Answer(0, line)) == version_word(line)


def test_the_runtime_and_torch_readers_use_the_same_reading() -> None:
    assert parse_version_line("apptainer version 1.4.5-1.el9") == ("apptainer", (1, 4, 5))
    assert parse_version_line("singularity-ce version 4.1.0-jammy") == ("singularity-ce", (4, 1, 0))
    assert parse_version_line("apptainer version v1.3") == ("apptainer", (1, 3, 0))
    assert _release("6.2.41133-dd7f95766") == (6, 2) and _release("12.1") == (12, 1)


# A grammar of version texts: release numbers, then at most one of a pre-release, local or distribution part
RELEASES = st.lists(st.integers(min_value=0, max_value=99999), min_size=1, max_size=5)
SUFFIXES = st.sampled_from(["", "a0", "rc1", "+rocm7.0", "+git1234", "-1.el9", "-jammy", ".post1", ".dev3", "+cu121"])


@given(RELEASES, SUFFIXES, st.booleans())
def test_the_release_is_read_from_any_version_text(numbers: list[int], suffix: str, prefix: bool) -> None:
    text = ("v" if prefix else "") + ".".join(map(str, numbers)) + suffix
    assert release_numbers(text) == tuple(numbers)
    assert release_in(f"tool version {text}") == tuple(numbers)
    assert at_least(text, ".".join(map(str, numbers)))


@given(RELEASES, RELEASES)
def test_at_least_is_the_order_of_release_tuples(have: list[int], need: list[int]) -> None:
    width = max(len(have), len(need))
    expected = tuple(have) + (0,) * (width - len(have)) >= tuple(need) + (0,) * (width - len(need))
    assert at_least(".".join(map(str, have)), ".".join(map(str, need))) == expected


# What a module reading release numbers on its own looks like: a regex over digits and dots, or a digit loop
# inside a function about versions
DIGITS_AND_DOTS = re.compile(r"\(\\d\+\)\\\.\(\\d\+\)|\\d\+\\\.\\d\+\(\?:\\\.\\d\+\)")


def test_release_numbers_are_read_in_one_place() -> None:
    offenders: list[str] = []
    for path in sorted((REPO / "envbuild").rglob("*.py")):
        if path == HOME:
            continue
        text = path.read_text()
        for number, line in enumerate(text.splitlines(), 1):
            if DIGITS_AND_DOTS.search(line) and "rocm" not in line:  # variant labels (rocm6.2) are names, not versions
                offenders.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef) and "version" in node.name.lower():
                body = ast.unparse(node)
                if ".isdigit()" in body:
                    offenders.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.name} reads digits itself")
    assert not offenders, ("read versions with envbuild.shared.versionnumbers (release_numbers, release_in, "
                           "version_word, at_least):\n" + "\n".join(offenders))
