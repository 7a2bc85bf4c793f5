"""sbatch/scontrol around a job (pure parts, and the follow loop against a scripted Slurm)."""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

import pytest

from envbuild.shared.errors import EnvbuildError
from envbuild.slurm.batch.submit import job_exit_code, parse_job_fields, submit, wait_for_job


@pytest.mark.parametrize(("state", "code", "expected"), [("COMPLETED", "0:0", 0), ("FAILED", "1:0", 1),
                                                         ("FAILED", "0:9", 137), ("TIMEOUT", "0:0", 1),
                                                         ("CANCELLED", "0:15", 143)])
def test_exit_codes(state: str, code: str, expected: int) -> None:
    assert job_exit_code(state, code) == expected


def test_job_fields() -> None:
    fields = parse_job_fields("JobId=7 JobName=train JobState=RUNNING Reason=None ExitCode=0:0 Restarts=1 "
                              "StdOut=/w/train-7.out")
    assert (fields["JobState"], fields["Restarts"], fields["StdOut"]) == ("RUNNING", "1", "/w/train-7.out")


def done(stdout: str, code: int = 0) -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess([], code, stdout, "" if code == 0 else "sbatch: error: Invalid account")


def test_submit_reads_the_job_id_and_reports_refusals() -> None:
    assert submit("job.sbatch", "/w", run=lambda argv: done("123;cluster\n")) == "123"
    with pytest.raises(EnvbuildError, match=r"sbatch refused job\.sbatch: sbatch: error: Invalid account"):
        submit("job.sbatch", "/w", run=lambda argv: done("", 1))


def test_wait_follows_the_output_through_a_requeue(tmp_path: Path) -> None:
    log = tmp_path / "train-7.out"
    states = iter(["PENDING", "RUNNING", "PENDING", "RUNNING", "COMPLETED"])
    writes = iter(["", "run 0\n", "", "run 1\n", "done\n"])

    def fake(argv: list[str]) -> subprocess.CompletedProcess[str]:
        with open(log, "a") as handle:
            handle.write(next(writes, ""))
        state = next(states)
        return done(f"JobId=7 JobState={state} ExitCode=0:0 Restarts=0 StdOut={log}")

    out, err = io.StringIO(), io.StringIO()
    assert wait_for_job("7", str(tmp_path), out=out, err=err, run=fake, poll_s=0) == 0
    assert out.getvalue() == "run 0\nrun 1\ndone\n"
    assert "job 7 ended: COMPLETED" in err.getvalue()
