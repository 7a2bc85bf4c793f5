"""`envrun srun python` and `envrun srun torchrun` with a venv overlay on each kind of base (issue 11),
under the real local Slurm, exactly as written in a project directory: no --image, the environment comes
from the envrun.yaml that `envbuild build` wrote, or from the one .sif in the directory. The DDP script
imports the overlay's package in every rank, so a rank that ran the base's Python alone would fail."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import OVERLAY_BASES, OVERLAY_PACKAGE, REPO, run_cli
from tests.e2e.test_ddp import check_two_ranks_agree

pytestmark = [pytest.mark.slow, pytest.mark.apptainer, pytest.mark.slurm]
ENVRUN = str(REPO / "bin/envrun")


def _project_script(project: Path) -> str:
    """ddp_minimal.py, run after importing the overlay's package (the project directory is what is bound)."""
    script = project / "train_with_extras.py"
    if not script.exists():
        shutil.copy(REPO / "examples/ddp_minimal.py", project)
        script.write_text(f"import runpy, sys, {OVERLAY_PACKAGE}\n"
                          "assert sys.prefix == '/user-software', sys.prefix\n"
                          "runpy.run_path('ddp_minimal.py', run_name='__main__')\n")
    return script.name


@pytest.mark.parametrize("kind", OVERLAY_BASES)
@pytest.mark.parametrize("launcher", ["torchrun", "python"])
def test_srun_verbatim_in_a_project_with_an_overlay(kind: str, launcher: str, overlay_projects: dict[str, Path]) -> None:
    project = overlay_projects[kind]
    result = run_cli([ENVRUN, "srun", launcher, _project_script(project), "--steps", "20", "--json"], cwd=project,
                     timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    check_two_ranks_agree(result.stdout)


def test_srun_torchrun_verbatim_next_to_a_single_sif(reference_image: Path, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    image = project / "env.sif"
    os.link(reference_image, image) if os.stat(reference_image).st_dev == os.stat(project).st_dev else shutil.copy(reference_image, image)
    shutil.copy(REPO / "examples/ddp_minimal.py", project)
    env = {k: "" for k in ("ENVRUN_IMAGE",) if k in os.environ}
    result = run_cli([ENVRUN, "srun", "torchrun", "ddp_minimal.py", "--steps", "20", "--json"], cwd=project, timeout=600,
                     env_extra=env)
    assert result.returncode == 0, result.stdout + result.stderr
    check_two_ranks_agree(result.stdout)


def test_nothing_found_lists_every_place_looked(tmp_path: Path) -> None:
    result = run_cli([ENVRUN, "python", "-c", "1"], cwd=tmp_path, env_extra={"ENVRUN_IMAGE": ""})
    assert result.returncode == 2
    assert "envrun.yaml" in result.stderr and "ENVRUN_IMAGE" in result.stderr and "*.sif" in result.stderr
