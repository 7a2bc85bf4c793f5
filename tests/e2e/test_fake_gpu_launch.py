"""GPU launch paths on the local Slurm's fake GPUs (gres backed by dummy device nodes; no accelerator in
CI): a LUMI-shaped recipe with 2 "GCDs" per node, one task per GPU, per-task ROCR_VISIBLE_DEVICES and
srun's mask_cpu binding derived from the recipe's GPU-to-core map."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.apptainer, pytest.mark.slurm]

FAKE_GPU_RECIPE = """\
name: fakegpu
description: two fake GCDs per node on the local test Slurm, shaped like LUMI-G
node:
  gpus: 2
  gpu_vendor: amd
  cores: 2
  gpu_cores: {0: '1', 1: '0'}   # deliberately crossed: rank 0 must land on core 1
partitions:
  debug: {full_node: true}
launch:
  gpu_request: --gres=gpu:{gpus}
  per_task_gpu_env: {ROCR_VISIBLE_DEVICES: SLURM_LOCALID}
  forbidden_srun_options:
    - options: [--gpus-per-task]
      unless: --gres-flags=allow-task-sharing
      why: per-task GPU cgroups break GPU-to-GPU communication
"""
SHOW = ("import json, os; print('TASK ' + json.dumps({k: os.environ.get(k) for k in "
        "('RANK', 'LOCAL_RANK', 'WORLD_SIZE', 'LOCAL_WORLD_SIZE', 'ROCR_VISIBLE_DEVICES', 'CUDA_VISIBLE_DEVICES', "
        "'MASTER_ADDR', 'OMP_NUM_THREADS')} | {'cpus': sorted(os.sched_getaffinity(0))}))")


@pytest.fixture
def recipes(tmp_path: Path) -> dict[str, str]:
    directory = tmp_path / "recipes"
    directory.mkdir()
    shutil.copy(REPO / "recipes" / "local.yaml", directory / "local.yaml")
    (directory / "fakegpu.yaml").write_text(FAKE_GPU_RECIPE)
    return {"ENVBUILD_RECIPES": str(directory)}


def test_one_task_per_fake_gpu_with_masks_and_visible_devices(reference_image: Path, recipes: dict[str, str]) -> None:
    result = run_cli([str(REPO / "bin/envrun"), "--system", "fakegpu", "--image", str(reference_image), "--explain",
                      "srun", "-p", "debug", "--gres=gpu:2", "python", "-c", SHOW], env_extra=recipes, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    tasks = sorted((json.loads(line[5:]) for line in result.stdout.splitlines() if line.startswith("TASK ")),
                   key=lambda t: t["RANK"])
    assert [t["RANK"] for t in tasks] == ["0", "1"]
    assert [t["ROCR_VISIBLE_DEVICES"] for t in tasks] == ["0", "1"]
    assert all(t["CUDA_VISIBLE_DEVICES"] == "0,1" for t in tasks)  # Slurm's gres sets it; the tasks share the node's GPUs
    assert all(t["WORLD_SIZE"] == "2" and t["LOCAL_WORLD_SIZE"] == "2" and t["OMP_NUM_THREADS"] == "1" for t in tasks)
    assert [t["cpus"] for t in tasks] == [[1], [0]], "mask_cpu from the recipe's gpu_cores"
    assert "mask_cpu" in result.stderr


def test_forbidden_per_task_gpu_flag_is_refused_before_srun(reference_image: Path, recipes: dict[str, str]) -> None:
    result = run_cli([str(REPO / "bin/envrun"), "--system", "fakegpu", "--image", str(reference_image),
                      "srun", "--gpus-per-task=1", "python", "-c", "print(1)"], env_extra=recipes, timeout=60)
    assert result.returncode == 2
    assert "--gpus-per-task on fakegpu: per-task GPU cgroups break GPU-to-GPU communication" in result.stderr
