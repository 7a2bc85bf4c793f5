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


SHOW_TASK = ("import json, os; print('TASK ' + json.dumps({'omp': os.environ.get('OMP_NUM_THREADS'), "
             "'cpus': sorted(os.sched_getaffinity(0)), 'rank': os.environ.get('RANK')}))")


def tasks_shown(output: str) -> list[dict]:
    import json

    return [json.loads(line[5:]) for line in output.splitlines() if line.startswith("TASK ")]


def test_one_task_with_two_cores_gets_two_threads(reference_image: Path) -> None:
    """`srun -n1 -c2 python`: the user's numbers win over the recipe's, and the threads follow the task's cores."""
    result = run_cli([ENVRUN, "--image", str(reference_image), "--explain", "srun", "-n1", "-c2", "python", "-c", SHOW_TASK],
                     timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert tasks_shown(result.stdout) == [{"omp": "2", "cpus": [0, 1], "rank": "0"}]
    assert "OMP_NUM_THREADS=2: the 2 CPUs of each task" in result.stderr


@pytest.mark.parametrize("cpus", ["1", "2"])
def test_wrapper_threads_follow_the_task_cores(reference_image: Path, cpus: str) -> None:
    """The run wrappers compute OMP_NUM_THREADS where they run: `srun -c N bin/python` sees N."""
    wrapper = reference_image.parent / "bin" / "python"
    assert wrapper.is_file(), "the build writes run wrappers next to the image"
    result = run_cli(["srun", "-n1", "-c", cpus, str(wrapper), "-c", SHOW_TASK], timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    [task] = tasks_shown(result.stdout)
    assert task["omp"] == cpus and len(task["cpus"]) == int(cpus)
