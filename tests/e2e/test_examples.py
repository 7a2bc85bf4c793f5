"""The course-exercise examples run in the reference image through envrun under the real Slurm:
plain DDP, a HuggingFace Trainer fine-tune of a tiny GPT-Neo, and Lightning DDP, including the case
where Lightning would take the world size from SLURM_NTASKS under `srun torchrun`."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.conftest import REPO, reports, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.apptainer, pytest.mark.slurm]
ENVRUN = str(REPO / "bin/envrun")


def run_example(image: Path, tmp_path: Path, *command: str) -> list[dict]:
    result = run_cli([ENVRUN, "--image", str(image), "--bind", str(tmp_path), *command], timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    found = reports(result.stdout, "EXAMPLE_REPORT")
    assert [r["rank"] for r in found] == [0, 1], result.stdout[-3000:]
    for report in found:
        assert report["world_size"] == 2
        assert report["params_agree"]
        assert report["omp_num_threads"] == "1" and report["tokenizers_parallelism"] == "false"
    assert [r["cpu_affinity"] for r in found] == [[0], [1]]
    return found


def test_plain_ddp_with_sampler_and_checkpoint(reference_image: Path, tmp_path: Path) -> None:
    found = run_example(reference_image, tmp_path, "srun", "python", "examples/ddp_train.py", "--epochs", "2",
                        "--output-dir", str(tmp_path / "ckpt"))
    assert all(r["checkpoint_matches"] and r["shards_cover_dataset"] for r in found)
    assert found[0]["final_loss"] < found[0]["first_loss"]
    assert (tmp_path / "ckpt").is_dir()


def test_hf_trainer_tiny_gptneo(reference_image: Path, tmp_path: Path) -> None:
    found = run_example(reference_image, tmp_path, "srun", "torchrun", "examples/hf_trainer_gptneo.py", "--max-steps", "6",
                        "--global-batch-size", "8", "--output-dir", str(tmp_path / "hf"), "--no-save")
    assert all(r["trainer_world_size"] == 2 and r["per_device_batch_size"] == 4 for r in found)
    assert math.isfinite(found[0]["eval_perplexity"])


def test_lightning_under_srun_torchrun_sees_torchrun_ranks(reference_image: Path, tmp_path: Path) -> None:
    found = run_example(reference_image, tmp_path, "srun", "torchrun", "examples/lightning_ddp.py", "--epochs", "2",
                        "--output-dir", str(tmp_path / "pl"), "--no-save")
    assert {r["cluster_environment"] for r in found} == {"TorchElasticEnvironment"}
    assert all(r["slurm_ntasks"] is None for r in found)


def test_lightning_under_srun_python_uses_slurm(reference_image: Path, tmp_path: Path) -> None:
    found = run_example(reference_image, tmp_path, "srun", "python", "examples/lightning_ddp.py", "--epochs", "2",
                        "--output-dir", str(tmp_path / "pl"), "--no-save")
    assert {r["cluster_environment"] for r in found} == {"SLURMEnvironment"}


def test_accelerate_under_srun_accelerate_launch(reference_image: Path, tmp_path: Path) -> None:
    """`envrun srun accelerate launch`: one launcher task, which starts 2 processes; on this CPU-only node they
    form one gloo group (MULTI_CPU), each pinned to its core, and the script's arguments arrive byte for byte."""
    args = ["a b", "$HOME; echo hi", "'quoted'", "line\nbreak", "é漢🙂", "--num_processes=7", "-m", ""]
    found = run_example(reference_image, tmp_path, "srun", "accelerate", "launch", "examples/accelerate_ddp.py",
                        "--epochs", "1", *args)
    assert {(r["distributed_type"], r["backend"]) for r in found} == {("MULTI_CPU", "gloo")}
    assert [r["local_rank"] for r in found] == [0, 1]
    assert all(r["argv"] == ["--epochs", "1", *args] for r in found)
    assert found[0]["steps"] == 16  # 1024 samples / 32 per batch / 2 processes: each process its own shard
