"""End to end: build the reference image from envs/local-cpu-pytorch.yaml and run a 2-process DDP
job in it under the real local Slurm through envrun. Nothing is mocked."""

from __future__ import annotations

import re
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
    """Rank 1 exits with an error while rank 0 waits in a 10-minute sleep. The job must fail within
    the time bound *because of* that rank: its own error text is in the output, srun reports the task
    that exited with code 1, and srun (--kill-on-bad-exit) terminates the step. With `srun python` the
    surviving task is the one srun terminates; with `srun torchrun` torchrun stops the other rank and
    names rank 1 as the root cause, then its task's exit ends the step.
    (Slurm 22.05 prints e.g. "srun: error: vm: task 1: Exited with exit code 1" and
    "srun: launch/slurm: _step_signal: Terminating StepId=65.0".)"""
    script = tmp_path / "crash.py"
    script.write_text(
        "import time, torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "if dist.get_rank() == 1: raise SystemExit('rank 1 fails on purpose')\n"
        "time.sleep(600)\n"
    )
    for form, failed_task in (("torchrun", 0), ("python", 1)):
        started = time.monotonic()
        result = run_cli([ENVRUN, "--image", str(reference_image), "--bind", str(tmp_path), "srun", form, str(script)],
                         timeout=300)
        elapsed = time.monotonic() - started
        output = result.stdout + result.stderr
        assert result.returncode != 0, f"{form}: {output}"
        assert elapsed < 120, f"{form}: the surviving rank was not stopped promptly ({elapsed:.0f} s)\n{output}"
        assert "rank 1 fails on purpose" in result.stderr, f"{form}: not the planted failure:\n{output}"
        assert re.search(rf"^srun: error: \S+: task {failed_task}: Exited with exit code 1$", result.stderr, re.M), \
            f"{form}: srun did not report task {failed_task} exiting with code 1:\n{output}"
        assert re.search(r"^srun: .*Terminating StepId=\d+\.\d+$", result.stderr, re.M), \
            f"{form}: srun did not terminate the step (--kill-on-bad-exit):\n{output}"
        if form == "python":
            assert re.search(r"^srun: error: \S+: task 0: Terminated$", result.stderr, re.M), \
                f"the waiting rank was not terminated by srun:\n{output}"
        else:
            assert result.returncode == 1, output
            root_cause = result.stderr.split("Root Cause (first observed failure):", 1)[-1]
            assert "rank      : 1 (local_rank: 1)" in root_cause and "exitcode  : 1 " in root_cause, \
                f"torchrun did not name rank 1 as the root cause:\n{output}"


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
