"""`pip install .` and `pip install -e .` both install `envrun` from scripts/envrun (pyproject.toml's
shared-scripts): the wheel's script with its first line pointed at the environment's Python, no entry-point
launcher. Fresh venvs, envbuild without its dependencies (neither --help nor --version needs them)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent

pytestmark = [pytest.mark.slow, pytest.mark.network]  # pip fetches hatchling through the host's pip configuration


@pytest.mark.parametrize("editable", [False, True], ids=["regular", "editable"])
def test_pip_installs_the_envrun_script(tmp_path: Path, editable: bool) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300)
    target = ["-e", str(REPO)] if editable else [str(REPO)]
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-deps", *target],
                   check=True, timeout=600, cwd=tmp_path)
    script = venv / "bin" / "envrun"
    lines = script.read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith(f"#!{venv / 'bin' / 'python'}"), lines[0]  # the installer's interpreter
    # ours: the kept plan first, then the CLI (scripts/envrun)
    assert "from envbuild.launch.plancache import exec_cached" in lines
    assert "from envbuild.cli.envrun_main import main" in [line.strip() for line in lines]
    assert not any(line.startswith("import re") for line in lines)  # not pip's entry-point launcher
    usage = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert usage.returncode == 0, usage.stderr
    assert usage.stdout.startswith("usage: envrun [options] COMMAND ...")
    version = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert version.stdout.startswith("envrun, version "), version.stderr
