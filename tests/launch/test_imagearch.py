"""envrun refuses a SIF of another architecture before apptainer starts (instead of `exec format error`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from envbuild.host.arch import check_image_arch
from envbuild.recipes.loadrecipe import load_recipe
from envbuild.shared.errors import UsageError
from envbuild.sif.format import read_sif_arch
from tests.conftest import REPO, run_cli
from tests.support.archfixtures import recipes_with_arm_system, recording_tools, sif_with_arch

FIXTURE_SIF = REPO / "tests" / "fixtures" / "inventory" / "layout-a.gzip.sif"  # amd64


def check(image: str, recipe: object, **where: object) -> None:
    check_image_arch(image, read_sif_arch(image), recipe, **where)  # type: ignore[arg-type]


@pytest.fixture
def recipes(tmp_path: Path) -> Path:
    return recipes_with_arm_system(tmp_path / "recipes")


def test_same_architecture_and_unreadable_headers_pass(tmp_path: Path, recipes: Path) -> None:
    local = load_recipe("local", recipes)
    check(str(FIXTURE_SIF), local, under_srun=False, host="x86_64")
    not_sif = tmp_path / "env.sif"
    not_sif.write_bytes(b"not a SIF")
    check(str(not_sif), local, under_srun=False, host="aarch64")  # nothing to compare
    check(str(tmp_path), local, under_srun=False, host="aarch64")  # a sandbox directory


def test_another_architecture_here_or_on_the_systems_nodes_is_refused(tmp_path: Path, recipes: Path) -> None:
    arm = sif_with_arch(FIXTURE_SIF, tmp_path / "arm.sif")
    with pytest.raises(UsageError) as here:
        check(str(arm), load_recipe("local", recipes), under_srun=False, host="x86_64")
    assert here.value.message == (f"image {arm} is aarch64 (its SIF header says arm64), but this machine is x86_64: its "
                                  "programs cannot run here (the container would fail with `exec format error`)")
    assert here.value.hint.startswith("use an image built for x86_64: build the spec on an x86_64 machine")
    armsys = load_recipe("armsys", recipes)
    # Under srun the system's nodes decide, not the login node envrun starts on.
    check(str(arm), armsys, under_srun=True, host="x86_64")
    with pytest.raises(UsageError) as nodes:
        check(str(FIXTURE_SIF), armsys, under_srun=True, host="x86_64")
    assert "is x86_64 (its SIF header says amd64), but system armsys's nodes (recipes/armsys.yaml:3 architecture) " \
           "run aarch64" in nodes.value.message


def test_envrun_refuses_it_before_apptainer_starts(tmp_path: Path, recipes: Path) -> None:
    arm = sif_with_arch(FIXTURE_SIF, tmp_path / "arm.sif")
    record = tmp_path / "started.txt"
    tools = recording_tools(tmp_path / "tools", record, names=("apptainer", "singularity", "srun"))
    env = {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": "", "ENVRUN_CONFIG": "", "ENVRUN_IMAGE": "",
           "ENVBUILD_SYSTEM": "local", "SLURM_JOB_ID": "", "SLURM_JOBID": "", "ENVBUILD_RECIPES": str(recipes),
           "PATH": f"{tools}:{os.environ['PATH']}"}
    if os.uname().machine != "x86_64":
        pytest.skip("written for an x86_64 machine")
    result = run_cli([str(REPO / "bin" / "envrun"), "--image", str(arm), "python", "-V"], env_extra=env, timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith(f"error: image {arm} is aarch64 (its SIF header says arm64), but this machine is x86_64")
    assert "fix: use an image built for x86_64" in result.stderr
    assert not record.exists(), f"the runtime was started: {record.read_text()}"
