"""The user's arguments reach the program byte for byte (spaces, quotes, $, ;, newlines, unicode),
through real srun + apptainer + python: nothing on the way re-parses them with a shell."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import REPO, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.apptainer, pytest.mark.slurm]
ENVRUN = str(REPO / "bin/envrun")
PRINT_ARGV = "import json, sys; print('ARGV ' + json.dumps(sys.argv[1:]))"

# Any text an argv word can hold: no NUL (the kernel ends a word there) and no lone surrogates.
word = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40)
tricky = st.sampled_from(["", " ", "a b", "'", '"', "$HOME", "$(id)", "`id`", ";", "&&", "|", "\\", "\n", "*", "~",
                          "-n", "--help", "--", "é漢🙂", "\t", "%s", "${X:-y}", "!"])
argvs = st.lists(st.one_of(word, tricky), max_size=8)


def argv_seen(output: str) -> list[str]:
    lines = [line for line in output.splitlines() if line.startswith("ARGV ")]
    assert len(lines) == 1, output
    return json.loads(lines[0][5:])


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(args=argvs)
def test_srun_python_argv_is_exact(reference_image: Path, args: list[str]) -> None:
    result = run_cli([ENVRUN, "--image", str(reference_image), "srun", "-n", "1", "python", "-c", PRINT_ARGV, *args],
                     timeout=300)
    assert result.returncode == 0, result.stderr
    assert argv_seen(result.stdout) == args


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(args=argvs)
def test_direct_python_argv_is_exact(reference_image: Path, args: list[str]) -> None:
    result = run_cli([ENVRUN, "--image", str(reference_image), "python", "-c", PRINT_ARGV, *args], timeout=300)
    assert result.returncode == 0, result.stderr
    assert argv_seen(result.stdout) == args


def test_srun_torchrun_argv_is_exact(reference_image: Path, tmp_path: Path) -> None:
    script = tmp_path / "show.py"
    script.write_text("import json, os, sys\nif os.environ['LOCAL_RANK'] == '0': print('ARGV ' + json.dumps(sys.argv[1:]))\n")
    args = ["a b", "$HOME; echo hi", "'quoted'", "line\nbreak", "é漢🙂", "--nproc-per-node=7", "-m", ""]
    result = run_cli([ENVRUN, "--image", str(reference_image), "--bind", str(tmp_path), "srun", "torchrun", str(script), *args],
                     timeout=300)
    assert result.returncode == 0, result.stderr
    assert argv_seen(result.stdout) == args
