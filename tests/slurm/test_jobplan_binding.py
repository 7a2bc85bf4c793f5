"""`envrun sbatch`'s preview of the step's GPU binding on a site whose binding depends on the Slurm release
(lumi-g's launch.gpu_bind): it says what the step will choose where srun's version was read where the script is
written, and that the step decides (reading the version when it starts) where it was not."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from envbuild.commands.sbatch import preview_slurm_version
from envbuild.host.runtime import Runtime
from envbuild.launch.bindstyle import SLURM_NOT_READ
from envbuild.recipes.loadrecipe import load_recipe
from envbuild.slurm.batch.jobplan import BatchRequest, plan_batch
from envbuild.slurm.batch.resources import JobRequest
from tests.support.launch_allocations import HOST

MAP = "--gpu-bind=map:4,5,2,3,6,7,0,1 --gres-flags=allow-task-sharing"
LUMI_8_TASKS = JobRequest(account="project_465000000", launcher="srun")


def explain(slurm: tuple[str, str]) -> str:
    request = BatchRequest(command=("python", "train.py"), job=LUMI_8_TASKS, image="/img/env.sif", cwd="/work/proj",
                           slurm=slurm)
    return "\n".join(plan_batch(load_recipe("lumi-g"), request, Runtime("apptainer", "apptainer"), HOST).explain)


def test_a_new_enough_srun_here_previews_the_map() -> None:
    text = explain(("24.05.8", "`srun --version`, /usr/bin/srun, where this script was written; the step's envrun "
                               "reads it again when it starts"))
    assert text.startswith("--ntasks-per-node=8") and f"\n{MAP}: task i on the i-th block of cores" in text
    assert "srun is Slurm 24.05.8 (`srun --version`, /usr/bin/srun, where this script was written" in text
    assert "mask_cpu" not in text


def test_an_older_srun_here_previews_the_masks_and_says_why() -> None:
    text = explain(("22.05.8", "`srun --version`, /usr/bin/srun, where this script was written"))
    assert f"not {MAP}" in text and "srun is Slurm 22.05.8" in text and "--cpu-bind=mask_cpu:..." in text


def test_without_the_version_the_preview_says_the_step_decides() -> None:
    text = explain(SLURM_NOT_READ)
    assert f"{MAP} (recipes/lumi-g.yaml:" in text and f"not {MAP}" not in text
    assert "else the CPU masks below: envrun reads srun's version when it starts the step" in text


def test_the_version_is_read_here_only_for_a_recipe_whose_binding_needs_it(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    srun = bin_dir / "srun"
    calls = tmp_path / "calls"
    srun.write_text(f"#!/bin/sh\necho x >> {calls}\necho 'slurm 24.05.8'\n")
    srun.chmod(srun.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("HOME", str(tmp_path))
    environ = {"PATH": str(bin_dir)}
    assert preview_slurm_version(load_recipe("puhti"), environ) == SLURM_NOT_READ
    assert not calls.exists()  # no launch.gpu_bind: srun is not asked
    version, source = preview_slurm_version(load_recipe("lumi-g"), environ)
    assert version == "24.05.8" and source.startswith(f"`srun --version`, {srun}, where this script was written")
    assert preview_slurm_version(load_recipe("lumi-g"), {"PATH": str(tmp_path / "none")}) == SLURM_NOT_READ
