"""envrun signal-ranks: which recorded processes get the checkpoint signal, and that another member of a group
project cannot turn it against the user's own processes (records in a directory they may write, a link, a
recorded process of no job or of another job)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from envbuild.shared.errors import UsageError
from envbuild.slurm.batch.forward import children_map, job_of, private_records, signal_ranks, targets


def test_targets_pick_this_nodes_ranks_and_a_launchers_children(tmp_path: Path) -> None:
    for name in ("node1.100.rank", "node1.200.children", "node2.300.rank", "junk"):
        (tmp_path / name).touch()
    tmp_path.chmod(0o700)
    tree = {200: [201, 202], 201: [250]}  # 250: a DataLoader worker of rank 201: left alone
    entries = private_records(str(tmp_path))
    assert targets(entries, "node1", tree) == [100, 201, 202]
    assert targets(entries, "node2", tree) == [300]
    assert private_records(str(tmp_path / "missing")) == []


def test_a_recorded_process_gets_the_signal(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    child = subprocess.Popen([sys.executable, "-c", "import signal, sys, time\n"
                              "signal.signal(signal.SIGUSR1, lambda *a: sys.exit(7))\n"
                              "print('ready', flush=True)\ntime.sleep(30)"], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "ready"
    (tmp_path / f"nodeX.{child.pid}.rank").touch()
    tmp_path.chmod(0o700)
    assert child.pid in children_map().get(os.getpid(), [])
    assert signal_ranks("USR1", str(tmp_path), node="nodeX") == 1
    assert child.wait(timeout=10) == 7
    assert "nodeX: SIGUSR1 sent to 1 training process(es)" in capsys.readouterr().out
    time.sleep(0)
    assert signal.SIGUSR1 == 10


def _sleeper(job: str | None) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "SLURM_JOB_ID"} | ({"SLURM_JOB_ID": job} if job else {})
    child = subprocess.Popen([sys.executable, "-c", "import signal, sys, time\n"
                              "signal.signal(signal.SIGUSR1, lambda *a: sys.exit(7))\n"
                              "print('ready', flush=True)\ntime.sleep(30)"], stdout=subprocess.PIPE, text=True, env=env)
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    return child


def test_only_processes_of_this_job_get_the_signal(tmp_path: Path, capsys, monkeypatch) -> None:
    """A record naming the user's process of another job, or of none (a Jupyter server on the login node), is
    left alone: SIGUSR1 would end it."""
    ours, other_job, no_job = _sleeper("4242"), _sleeper("4243"), _sleeper(None)
    try:
        records = tmp_path / "ranks"
        records.mkdir(mode=0o700)
        for child in (ours, other_job, no_job):
            (records / f"nodeX.{child.pid}.rank").touch()
        assert job_of(ours.pid) == "4242" and job_of(no_job.pid) is None
        monkeypatch.setenv("SLURM_JOB_ID", "4242")
        assert signal_ranks("USR1", str(records), node="nodeX") == 1
        assert ours.wait(timeout=10) == 7
        time.sleep(0.3)
        assert other_job.poll() is None and no_job.poll() is None
        out = capsys.readouterr().out
        assert f"not signalled: {min(other_job.pid, no_job.pid)}" in out and "not processes of job 4242" in out
    finally:
        for child in (ours, other_job, no_job):
            child.kill()
            child.wait()


@pytest.mark.parametrize("planted", ["group-writable", "link"])
def test_records_another_member_could_write_are_not_read(tmp_path: Path, planted: str) -> None:
    records = tmp_path / "ranks"
    if planted == "link":
        target = tmp_path / "elsewhere"
        target.mkdir(mode=0o700)
        (target / "nodeX.1.rank").touch()
        records.symlink_to(target)
    else:
        records.mkdir()
        records.chmod(0o770)
        (records / "nodeX.1.rank").touch()
    with pytest.raises(UsageError) as caught:
        signal_ranks("USR1", str(records), node="nodeX")
    assert str(records) in caught.value.message and caught.value.hint


def _job_setup(tmp_path: Path) -> str:
    """The requeue script's set-up lines, as the job's batch shell runs them, then the trap's checkpoint file."""
    from types import SimpleNamespace

    from envbuild.slurm.batch.requeue import requeue_setup

    lines = requeue_setup(SimpleNamespace(signal="USR1", grace_s=90, max_restarts=3), "true")  # type: ignore[arg-type]
    # srun, scontrol and the watchdog's sleep are stand-ins that return at once: a real `sleep 75` left behind by
    # killing its subshell would hold the output pipe open past the test's timeout
    stand_ins = ["trap - USR1", "srun() { :; }", "scontrol() { :; }", "sleep() { :; }"]
    return "\n".join([*lines, *stand_ins, "checkpoint_now", "wait", "echo done"])


@pytest.mark.parametrize("planted", ["link-to-victims-dir", "strangers-file", "none"])
def test_the_jobs_directory_is_its_own_whatever_was_planted_at_its_name(tmp_path: Path, planted: str) -> None:
    """In a group project another member can name `.envrun/job-<next id>` before the job starts: a link there is
    removed (never what it points to), and the job's directory and records are made afresh, 0700."""
    project = tmp_path / "project"
    (project / ".envrun").mkdir(parents=True)
    victim = tmp_path / "victims-data"
    (victim / "ranks").mkdir(parents=True)
    (victim / "ranks" / "thesis.tex").write_text("keep")
    planted_at = project / ".envrun" / "job-77"
    if planted == "link-to-victims-dir":
        planted_at.symlink_to(victim)
    elif planted == "strangers-file":
        planted_at.write_text("x")
    done = subprocess.run(["bash", "-c", _job_setup(tmp_path)], cwd=project, capture_output=True, text=True,
                          env={**os.environ, "SLURM_JOB_ID": "77", "PWD": str(project)}, timeout=30)
    assert done.returncode == 0 and done.stdout.strip() == "done", done.stdout + done.stderr
    assert (victim / "ranks" / "thesis.tex").read_text() == "keep" and sorted(os.listdir(victim)) == ["ranks"]
    job_dir = project / ".envrun" / "job-77"
    assert not job_dir.is_symlink() and oct(job_dir.stat().st_mode & 0o777) == "0o700"
    assert oct((job_dir / "ranks").stat().st_mode & 0o777) == "0o700"
    assert (job_dir / "checkpoint-now").is_file()
