"""`envrun sbatch --submit --wait` while a job waits in the queue: off a terminal a plain `still waiting:`
line at the heartbeat interval (never a control character); the job's own output resets the interval."""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

import pytest

from envbuild.slurm.batch.submit import wait_for_job


def test_a_pending_job_shows_life_in_a_batch_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVBUILD_HEARTBEAT", "0.05")
    log = tmp_path / "train-7.out"
    states = iter(["PENDING"] * 6 + ["RUNNING", "COMPLETED"])

    def fake(argv: list[str]) -> subprocess.CompletedProcess[str]:
        state = next(states)
        if state == "RUNNING":
            log.write_text("step 1\n")
        return subprocess.CompletedProcess(argv, 0, f"JobId=7 JobState={state} ExitCode=0:0 StdOut={log}", "")

    out, err = io.StringIO(), io.StringIO()
    assert wait_for_job("7", str(tmp_path), out=out, err=err, run=fake, poll_s=0.03) == 0
    lines = err.getvalue().splitlines()
    assert lines[0] == "envrun: job 7 PENDING"
    assert any(line.startswith("envrun: still waiting: job 7 PENDING, ") and line.endswith(" s") for line in lines), lines
    assert lines[-1] == "envrun: job 7 ended: COMPLETED, exit code 0:0 -> 0"
    assert out.getvalue() == "step 1\n"
    assert "\x1b" not in err.getvalue() and "\r" not in err.getvalue()
