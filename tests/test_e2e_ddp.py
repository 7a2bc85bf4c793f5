"""End to end: build the reference image from envs/local-cpu-pytorch.yaml and run a 2-process DDP
job in it under the real local Slurm through envrun. Nothing is mocked."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.conftest import REPO, reports, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.apptainer, pytest.mark.slurm]
ENVRUN = str(REPO / "bin/envrun")


def check_two_ranks_agree(output: str) -> list[dict]:
    found = reports(output)
    assert [r["rank"] for r in found] == [0, 1]
    assert all(r["world_size"] == 2 and r["backend"] == "gloo" for r in found)
    assert all(r["params_agree"] for r in found)
    assert len({r["param_checksum"] for r in found}) == 1
    assert all(r["omp_num_threads"] == "1" and r["tokenizers_parallelism"] == "false" for r in found)
    assert found[0]["last_loss"] < found[0]["first_loss"]
    assert "PARAMETERS AGREE" in output
    return found


def test_srun_torchrun_one_task_two_processes(reference_image: Path) -> None:
    result = run_cli([ENVRUN, "--image", str(reference_image), "srun", "torchrun",
                      "examples/ddp_minimal.py", "--steps", "20", "--json"], timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    found = check_two_ranks_agree(result.stdout)
    assert [r["cpu_affinity"] for r in found] == [[0], [1]], "each rank pinned to its own core"


def test_srun_python_two_tasks(reference_image: Path) -> None:
    result = run_cli([ENVRUN, "--image", str(reference_image), "srun", "python",
                      "examples/ddp_minimal.py", "--steps", "20", "--json"], timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    found = check_two_ranks_agree(result.stdout)
    assert [r["local_rank"] for r in found] == [0, 1]
    assert [r["cpu_affinity"] for r in found] == [[0], [1]], "srun binds each task to its own core"


def test_crashing_rank_fails_promptly(reference_image: Path, tmp_path: Path) -> None:
    script = tmp_path / "crash.py"
    script.write_text(
        "import time, torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "if dist.get_rank() == 1: raise SystemExit('rank 1 fails on purpose')\n"
        "time.sleep(600)\n"
    )
    for form in ("torchrun", "python"):
        started = time.monotonic()
        result = run_cli([ENVRUN, "--image", str(reference_image), "--bind", str(tmp_path), "srun", form, str(script)],
                         timeout=300)
        assert result.returncode != 0, form
        assert time.monotonic() - started < 120, f"{form}: the surviving rank was not stopped promptly"
