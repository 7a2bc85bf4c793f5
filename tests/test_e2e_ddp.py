"""End to end: build the reference image from envs/local-cpu-pytorch.yaml and run a 2-process DDP
job in it under the real local Slurm through envrun. Nothing is mocked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.apptainer, pytest.mark.slurm]


@pytest.fixture(scope="module")
def reference_image(tmp_path_factory: pytest.TempPathFactory, build_cache: Path) -> Path:
    image = tmp_path_factory.mktemp("reference") / "local-cpu-pytorch.sif"
    result = run_cli([str(REPO / "bin/envbuild"), "build", str(REPO / "envs/local-cpu-pytorch.yaml"), "-o", str(image)],
                     env_extra={"ENVBUILD_CACHE_DIR": str(build_cache)}, timeout=2400)
    assert result.returncode == 0, result.stdout + result.stderr[-5000:]
    return image


def ddp_reports(output: str) -> list[dict]:
    return [json.loads(line.split(" ", 1)[1]) for line in output.splitlines() if line.startswith("DDP_REPORT ")]


def test_srun_torchrun_two_ranks_agree(reference_image: Path) -> None:
    result = run_cli([str(REPO / "bin/envrun"), "--image", str(reference_image), "srun", "torchrun",
                      "examples/ddp_minimal.py", "--steps", "20", "--json"], timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    reports = sorted(ddp_reports(result.stdout), key=lambda r: r["rank"])
    assert [r["rank"] for r in reports] == [0, 1]
    assert all(r["world_size"] == 2 and r["backend"] == "gloo" for r in reports)
    assert all(r["params_agree"] for r in reports)
    assert len({r["param_checksum"] for r in reports}) == 1
    assert all(r["omp_num_threads"] == "1" and r["tokenizers_parallelism"] == "false" for r in reports)
    assert reports[0]["last_loss"] < reports[0]["first_loss"]
    assert "PARAMETERS AGREE" in result.stdout


def test_crashing_rank_fails_promptly(reference_image: Path, tmp_path: Path) -> None:
    script = tmp_path / "crash.py"
    script.write_text(
        "import os, time, torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "if dist.get_rank() == 1: raise SystemExit('rank 1 fails on purpose')\n"
        "time.sleep(600)\n"
    )
    result = run_cli([str(REPO / "bin/envrun"), "--image", str(reference_image), "--bind", str(tmp_path),
                      "srun", "torchrun", str(script)], timeout=300)
    assert result.returncode != 0
