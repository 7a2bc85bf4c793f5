"""Real apptainer: envrun leaves its container shim out where nothing can set $WITH_CONDA (envbuild's own image,
read from the SIF itself), and keeps it, with the activation run, where the host gives WITH_CONDA."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from envbuild.launch.imageenv import image_with_conda
from tests.conftest import REPO

pytestmark = [pytest.mark.slow, pytest.mark.apptainer]
ENVRUN = str(REPO / "bin/envrun")
SHOW = "import json, os, sys; print('SEEN ' + json.dumps([sys.argv[1:], os.environ.get('ACTIVATED')]))"


def envrun(image: Path, *words: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ENVRUN, "--image", str(image), *words], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "ENVRUN_PLAN_CACHE": "off", **env}, check=False)


def seen(output: str) -> list[object]:
    lines = [line for line in output.splitlines() if line.startswith("SEEN ")]
    assert len(lines) == 1, output
    found: list[object] = json.loads(lines[0][5:])
    return found


def test_envbuilds_image_runs_the_program_without_a_shell_before_it(reference_image: Path) -> None:
    assert image_with_conda(str(reference_image)) == ""  # its scripts, read from the SIF
    dry = envrun(reference_image, "--dry-run", "python", "-c", SHOW, "a b", "$HOME")
    assert dry.returncode == 0, dry.stderr
    assert "envrun-task" not in dry.stdout and "no shell in the container before the program" in dry.stdout
    result = envrun(reference_image, "python", "-c", SHOW, "a b", "$HOME", "")
    assert result.returncode == 0, result.stderr
    assert seen(result.stdout) == [["a b", "$HOME", ""], None]


def test_a_host_with_conda_keeps_the_activation(reference_image: Path) -> None:
    result = envrun(reference_image, "python", "-c", SHOW, "x", WITH_CONDA="export ACTIVATED=yes")
    assert result.returncode == 0, result.stderr
    assert seen(result.stdout) == [["x"], "yes"]
    failing = envrun(reference_image, "python", "-c", SHOW, WITH_CONDA="false")
    assert failing.returncode == 1 and "could not activate the image's environment" in failing.stderr
