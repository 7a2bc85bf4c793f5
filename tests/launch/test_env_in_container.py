"""A project's env: on a real launch (issue 28): it reaches the program in the container exactly as written,
and none of the host processes envrun starts (srun, apptainer) has it. The host side is recorded by
stand-ins for `srun` and `apptainer` first on PATH that write their environment and then exec the real
program; the container side is the program's own report. A planted envrun.yaml reaches neither."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.support.trust_accounts import ENVRUN, plant

pytestmark = [pytest.mark.slow, pytest.mark.apptainer]

REPORT = "import json, os; print('ENV ' + json.dumps({k: os.environ.get(k) for k in ('LD_PRELOAD', 'PROBE')}))"


def recording(bin_dir: Path, program: str, dump: Path) -> None:
    """bin_dir/program: writes its environment to dump/program.PID.env, then runs the real program."""
    real = shutil.which(program)
    assert real, f"{program} is not installed"
    script = bin_dir / program
    script.write_text(f'#!/bin/sh\nenv > "{dump}/{program}.$$.env"\nexec {real} "$@"\n')
    script.chmod(0o755)


@pytest.fixture
def launch(tmp_path: Path):
    """Run envrun in a directory with recording stand-ins; returns (result, host environments seen)."""
    bin_dir, dump = tmp_path / "bin", tmp_path / "dump"
    bin_dir.mkdir()
    dump.mkdir()
    for program in ("apptainer", "srun"):
        recording(bin_dir, program, dump)

    def run(args: list[str], cwd: Path) -> tuple[object, list[str]]:
        env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "HOME": str(tmp_path / "home"), "ENVRUN_IMAGE": "",
               "ENVRUN_CONFIG": "", "XDG_CONFIG_HOME": "", "ENVBUILD_SYSTEM": "local"}
        for old in dump.iterdir():
            old.unlink()
        result = run_cli([ENVRUN, *args], env_extra=env, cwd=cwd, timeout=300)
        return result, [path.read_text() for path in sorted(dump.iterdir())]

    return run


def seen_in_container(stdout: str) -> dict[str, str | None]:
    lines = [line for line in stdout.splitlines() if line.startswith("ENV ")]
    assert len(lines) == 1, stdout
    return json.loads(lines[0][4:])


def project_with_env(root: Path, image: Path, marker: Path) -> tuple[Path, str]:
    hostile = f"$(touch {marker}) `touch {marker}` $HOME \\ 'q' \"d\" ;x"
    root.mkdir()
    (root / "envrun.yaml").write_text(f"image: {image}\nenv:\n  LD_PRELOAD: /nonexistent/evil.so\n"
                                      f"  PROBE: {json.dumps(hostile)}\n")
    return root, hostile


def assert_host_clean(host_environments: list[str], programs: int) -> None:
    assert len(host_environments) >= programs, "the stand-ins ran"
    for environment in host_environments:
        names = {line.split("=", 1)[0] for line in environment.splitlines() if "=" in line}
        assert "LD_PRELOAD" not in names and "PROBE" not in names, environment


def test_the_projects_env_reaches_the_program_as_written_and_no_host_process(tmp_path: Path, reference_image: Path,
                                                                            launch) -> None:
    marker = tmp_path / "proj" / "executed"
    project, hostile = project_with_env(tmp_path / "proj", reference_image, marker)
    result, host = launch(["python", "-c", REPORT], project)
    assert result.returncode == 0, result.stderr
    assert seen_in_container(result.stdout) == {"LD_PRELOAD": "/nonexistent/evil.so", "PROBE": hostile}
    assert not marker.exists(), "a value was evaluated as a command"
    assert_host_clean(host, 1)


@pytest.mark.slurm
def test_under_srun_neither_srun_nor_the_tasks_apptainer_sees_it(tmp_path: Path, reference_image: Path, launch) -> None:
    marker = tmp_path / "proj" / "executed"
    project, hostile = project_with_env(tmp_path / "proj", reference_image, marker)
    result, host = launch(["srun", "-n", "1", "python", "-c", REPORT], project)
    assert result.returncode == 0, result.stderr
    assert seen_in_container(result.stdout) == {"LD_PRELOAD": "/nonexistent/evil.so", "PROBE": hostile}
    assert not marker.exists()
    assert_host_clean(host, 2)


def test_a_planted_project_file_reaches_neither_side(tmp_path: Path, reference_image: Path, launch) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    planted = plant(project / "envrun.yaml", "env: {LD_PRELOAD: /nonexistent/evil.so, PROBE: planted}\n")
    result, host = launch(["--image", str(reference_image), "python", "-c", REPORT], project)
    assert result.returncode == 0, result.stderr
    assert result.stderr.startswith(f"envrun: warning: ignoring {planted}: owned by ")
    assert seen_in_container(result.stdout) == {"LD_PRELOAD": None, "PROBE": None}
    assert_host_clean(host, 1)
