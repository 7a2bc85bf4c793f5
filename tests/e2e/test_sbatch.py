"""`envrun sbatch --submit --wait` on the real local Slurm with the reference image: a DDP job, a failing
one, and a requeue through the checkpoint hook. Each job runs in its own directory (the submit directory,
where the output file and .envrun/ land), with the example scripts copied in."""

from __future__ import annotations

import shutil
import subprocess
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


def test_requeue_fires_the_checkpoint_hook_and_the_job_comes_back(reference_image: Path, tmp_path: Path) -> None:
    """Time limit 3 minutes, the signal 100 s before it: Slurm sends it up to 60 s early (sbatch(1) --signal), so
    run 0 is asked to checkpoint 20 to 80 s in, after its ranks have started (about 10 s). Run 0 saves and
    requeues; Slurm starts it again once the old job credential has expired (cred_expire=30 on the test cluster,
    provision/cluster.sh); run 1 resumes from the checkpoint. Its signal comes from `scancel --batch
    --signal=USR1` as soon as it has resumed (the same trap in the batch shell, without waiting another 20-80 s
    for Slurm's): it saves again and, at --requeue-max 1, is not requeued: the job ends COMPLETED, exit code 0."""
    shutil.copy(REPO / "examples/checkpoint_requeue.py", tmp_path)
    args = [ENVRUN, "sbatch", "--system", "local", "--image", str(reference_image), "--submit", "--wait", "--time", "3",
            "--signal-before", "100", "--requeue", "--requeue-max", "1", "--", "python", "checkpoint_requeue.py",
            "--steps", "100000"]
    (tmp_path / "wait").mkdir()
    with (tmp_path / "wait/stdout").open("w+") as out_file, (tmp_path / "wait/stderr").open("w+") as err_file, \
            subprocess.Popen(args, cwd=tmp_path, stdout=out_file, stderr=err_file, text=True) as proc:
        try:
            deadline = time.monotonic() + 420
            resumed = None
            while resumed is None and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(1)
                for output in tmp_path.glob("checkpoint_requeue-*.out"):
                    if "RESUMED from step" in output.read_text(errors="replace"):
                        resumed = output.name.removeprefix("checkpoint_requeue-").removesuffix(".out")
            assert resumed is not None, "run 1 never resumed"
            subprocess.run(["scancel", "--batch", "--signal=USR1", resumed], check=True, timeout=30)
            proc.wait(timeout=180)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    result = subprocess.CompletedProcess(args, proc.returncode, (tmp_path / "wait/stdout").read_text(),
                                         (tmp_path / "wait/stderr").read_text())
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "CHECKPOINT at step" in out and "(run 0)" in out
    assert "requeueing job" in out and "is back: restart 1" in out
    first = int(out.split("CHECKPOINT at step ", 1)[1].split()[0])
    assert first > 0, out  # the ranks trained before the request came
    assert f"RESUMED from step {first} (run 1)" in out
    assert "rank 0: got signal SIGUSR1" in out and "rank 1: got signal SIGUSR1" in out  # the signal, not only the file
    assert "SIGUSR1 sent to 2 training process(es)" in out
    assert "not requeueing: the job was restarted 1 times already" in out
    assert "exitcode  : -10" not in out  # no rank killed by the signal
