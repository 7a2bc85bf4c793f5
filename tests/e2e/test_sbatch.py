"""`envrun sbatch --submit --wait` on the real local Slurm with the reference image: a DDP job, a failing
one, and a requeue through the checkpoint hook. Each job runs in its own directory (the submit directory,
where the output file and .envrun/ land), with the example scripts copied in."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, reports, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.apptainer, pytest.mark.slurm]
ENVRUN = str(REPO / "bin/envrun")


def submit(work: Path, image: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    return run_cli([ENVRUN, "sbatch", "--system", "local", "--image", str(image), "--submit", "--wait", *args],
                   cwd=work, timeout=timeout)


def test_ddp_job_runs_as_a_batch_job_and_ranks_agree(reference_image: Path, tmp_path: Path) -> None:
    shutil.copy(REPO / "examples/ddp_minimal.py", tmp_path)
    result = submit(tmp_path, reference_image, "--", "python", "ddp_minimal.py", "--steps", "10", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    job_id = result.stdout.splitlines()[0]
    assert job_id.isdigit()
    found = reports(result.stdout)
    assert [r["rank"] for r in found] == [0, 1] and all(r["world_size"] == 2 and r["params_agree"] for r in found)
    assert (tmp_path / f"ddp_minimal-{job_id}.out").exists()
    script = next((tmp_path / ".envrun/jobs").glob("ddp_minimal-*.sbatch")).read_text()
    assert "#SBATCH --ntasks-per-node=1" in script and "srun torchrun ddp_minimal.py --steps 10 --json" in script
    assert f"job {job_id} ended: COMPLETED, exit code 0:0 -> 0" in result.stderr


def test_a_job_whose_training_raises_exits_non_zero(reference_image: Path, tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text("raise RuntimeError('loss is nan')\n")
    result = submit(tmp_path, reference_image, "--launcher", "srun", "--", "python", "broken.py")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "RuntimeError: loss is nan" in result.stdout
    assert "FAILED, exit code 1:0 -> 1" in result.stderr


def _start_requeued_job_now(work: Path, stop: threading.Event) -> None:
    """Slurm holds a requeued job back for about two minutes (BeginTime) before it may start again; the
    test moves that start to now, as an administrator could, so that the test takes one minute, not three."""
    while not stop.is_set():
        ids = list(work.glob("checkpoint_requeue-*.out"))
        if ids:
            job_id = ids[0].stem.rsplit("-", 1)[1]
            state = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True).stdout
            if "JobState=PENDING" in state and "Restarts=1" in state:
                subprocess.run(["scontrol", "update", f"jobid={job_id}", "StartTime=now"], capture_output=True)
                return
        time.sleep(1)


def test_requeue_fires_the_checkpoint_hook_and_the_job_comes_back(reference_image: Path, tmp_path: Path) -> None:
    """Time limit 2 minutes, the signal 100 s before it: each run is asked to checkpoint about 20-50 s in
    (slurmctld checks time limits every 30 s). Run 0 saves and requeues; run 1 resumes from the checkpoint,
    saves again and, at --requeue-max 1, is not requeued: the job ends COMPLETED with exit code 0."""
    shutil.copy(REPO / "examples/checkpoint_requeue.py", tmp_path)
    stop = threading.Event()
    nudge = threading.Thread(target=_start_requeued_job_now, args=(tmp_path, stop), daemon=True)
    nudge.start()
    try:
        result = submit(tmp_path, reference_image, "--time", "2", "--signal-before", "100", "--requeue",
                        "--requeue-max", "1", "--", "python", "checkpoint_requeue.py", "--steps", "100000",
                        timeout=420)
    finally:
        stop.set()
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "CHECKPOINT at step" in out and "(run 0)" in out
    assert "requeueing job" in out and "is back: restart 1" in out
    first = int(out.split("CHECKPOINT at step ", 1)[1].split()[0])
    assert f"RESUMED from step {first} (run 1)" in out
    assert "rank 0: got signal SIGUSR1" in out and "rank 1: got signal SIGUSR1" in out  # the signal, not only the file
    assert "not requeueing: the job was restarted 1 times already" in out
    assert "signal 10" not in out.lower() and "exitcode  : -10" not in out  # no rank killed by the signal
