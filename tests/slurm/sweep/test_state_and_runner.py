"""Resuming a sweep from its report directory, and the runner over a stand-in Slurm: finished runs are
skipped, failed ones retried, submitted ones followed; every change is saved at once."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from envbuild.shared.errors import EnvbuildError
from envbuild.slurm.sweep import state as sweepstate
from envbuild.slurm.sweep.points import plan_points
from envbuild.slurm.sweep.runner import Slurm, SweepRunner, log_pattern

IDENTITY = {"command": ["python", "train.py"], "system": "local", "image": "/w/env.sif", "launcher": None,
            "overlays": [], "unit": "process"}
POINTS = plan_points("gpus", [1, 2], per_node_capacity=2, unit="process")


class FakeSlurm:
    """Jobs end at once; `outcomes` says per point key how (state, output text); a log is written as Slurm would."""

    def __init__(self, outcomes: dict[str, tuple[str, str]]) -> None:
        self.outcomes = outcomes
        self.jobs: dict[str, tuple[str, str]] = {}  # job id -> (point key, log pattern)
        self.submitted: list[str] = []
        self.patterns: dict[str, tuple[str, str]] = {}  # script -> (key, pattern)

    def write_script(self, directory: str):
        def write(point, repeat):
            script = f"{directory}/jobs/{point.key}-r{repeat + 1}.sbatch"
            self.patterns[script] = (point.key, log_pattern(directory, point, repeat))
            return script, self.patterns[script][1]
        return write

    def submit(self, script: str, cwd: str) -> str:
        job_id = str(100 + len(self.submitted))
        self.submitted.append(script)
        key, pattern = self.patterns[script]
        state, text = self.outcomes[key]
        log = Path(pattern.replace("%j", job_id))
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(text)
        self.jobs[job_id] = (key, state)
        return job_id

    def fields(self, job_id: str) -> dict[str, str]:
        if job_id not in self.jobs:
            raise EnvbuildError(f"Slurm does not know job {job_id}")
        state = self.jobs[job_id][1]
        return {"JobState": state, "ExitCode": "0:0" if state == "COMPLETED" else "1:0", "RunTime": "00:00:20"}


GOOD = ("COMPLETED", "envrun-metric: samples_per_s=50.5\nenvrun-step: wall_ms=12500 exit=0\n")
BAD = ("FAILED", "RuntimeError: loss is nan\nenvrun-step: wall_ms=3000 exit=1\n")


def sweep(directory: Path, fake: FakeSlurm, repeat: int = 1, serial: bool = False) -> tuple[sweepstate.SweepState, str]:
    state = sweepstate.load(str(directory), IDENTITY)
    state.points = sweepstate.merge_points(state.points, POINTS)
    out = io.StringIO()
    runner = SweepRunner(str(directory), state, fake.write_script(str(directory)), Slurm(fake.submit, fake.fields),
                         out, cwd=str(directory), repeat=repeat, poll_s=0.01)
    runner.run(sweepstate.todo(state, POINTS, repeat), serial)
    return state, out.getvalue()


def test_a_failed_point_is_recorded_and_retried_on_the_next_run_while_finished_ones_are_skipped(tmp_path: Path) -> None:
    fake = FakeSlurm({"1n1p": GOOD, "1n2p": BAD})
    state, said = sweep(tmp_path, fake)
    runs = state.table_runs()
    assert runs["1n1p"][0].ok and runs["1n1p"][0].time_s == 12.5 and runs["1n1p"][0].throughput == 50.5
    assert not runs["1n2p"][0].ok and runs["1n2p"][0].state == "FAILED" and runs["1n2p"][0].job_id == "101"
    assert "job 101 FAILED: FAILED (exit code 1; log " in said
    assert all("\x1b" not in line for line in said.splitlines())
    saved = json.loads((tmp_path / "sweep.json").read_text())
    assert saved["runs"]["1n2p"][0]["state"] == "FAILED"

    fake.outcomes["1n2p"] = GOOD
    state, _said = sweep(tmp_path, fake)
    assert fake.submitted[2:] == [f"{tmp_path}/jobs/1n2p-r1.sbatch"]  # only the failed point ran again
    assert all(r[0].ok for r in state.table_runs().values())

    state, _said = sweep(tmp_path, fake, repeat=2)  # a second repeat: one more run per point
    assert len(fake.submitted) == 5 and [len(r) for r in state.table_runs().values()] == [2, 2]


def test_a_job_still_submitted_is_followed_not_submitted_again(tmp_path: Path) -> None:
    fake = FakeSlurm({"1n1p": GOOD, "1n2p": GOOD})
    state = sweepstate.SweepState(identity=IDENTITY, points=POINTS)
    log = log_pattern(str(tmp_path), POINTS[0], 0).replace("%j", "7")
    Path(log).parent.mkdir(parents=True)
    Path(log).write_text(GOOD[1])
    state.record(POINTS[0], {"repeat": 0, "job_id": "7", "log": log, "state": sweepstate.SUBMITTED, "exit_code": 0})
    sweepstate.save(str(tmp_path), state)
    fake.jobs["7"] = ("1n1p", "COMPLETED")
    state, said = sweep(tmp_path, fake, serial=True)
    assert "following job 7 from an earlier run" in said
    assert fake.submitted == [f"{tmp_path}/jobs/1n2p-r1.sbatch"]
    assert state.table_runs()["1n1p"][0].ok


def test_a_job_slurm_forgot_is_a_failed_run(tmp_path: Path) -> None:
    fake = FakeSlurm({"1n1p": GOOD, "1n2p": GOOD})
    state = sweepstate.SweepState(identity=IDENTITY, points=POINTS)
    state.record(POINTS[0], {"repeat": 0, "job_id": "999", "log": "/nowhere.out", "state": sweepstate.SUBMITTED,
                             "exit_code": 0})
    sweepstate.save(str(tmp_path), state)
    state, _said = sweep(tmp_path, fake)
    lost = state.table_runs()["1n1p"][0]
    assert lost.state == "LOST" and not lost.ok
    assert sweepstate.todo(state, POINTS, 1) == [(POINTS[0], 0, "run")]


def test_the_job_time_stands_in_when_the_step_line_is_missing(tmp_path: Path) -> None:
    fake = FakeSlurm({"1n1p": ("COMPLETED", "no lines from envrun here\n"), "1n2p": GOOD})
    state, _said = sweep(tmp_path, fake)
    run = state.table_runs()["1n1p"][0]
    assert run.ok and run.time_s == 20.0 and run.throughput is None
    assert state.run_of(POINTS[0], 0)["time_from"] == "job"


def test_a_report_dir_of_another_sweep_is_refused(tmp_path: Path) -> None:
    sweepstate.save(str(tmp_path), sweepstate.SweepState(identity=IDENTITY, points=POINTS))
    with pytest.raises(EnvbuildError, match="holds another sweep: its command was"):
        sweepstate.load(str(tmp_path), {**IDENTITY, "command": ["python", "other.py"]})
    (tmp_path / "sweep.json").write_text("{not json")
    with pytest.raises(EnvbuildError, match="is not a sweep state"):
        sweepstate.load(str(tmp_path), IDENTITY)


def test_points_of_an_earlier_run_stay_in_the_table() -> None:
    more = plan_points("gpus", [2, 4], per_node_capacity=2, unit="process")
    assert [p.key for p in sweepstate.merge_points(POINTS, more)] == ["1n1p", "1n2p", "2n2p"]


def test_a_long_wait_says_so_in_plain_lines(tmp_path: Path) -> None:
    fake = FakeSlurm({"1n1p": GOOD, "1n2p": GOOD})
    answers = iter(["PENDING", "PENDING", "PENDING", "RUNNING", "COMPLETED"])
    fields = fake.fields
    state = sweepstate.SweepState(identity=IDENTITY, points=POINTS[:1])
    out = io.StringIO()
    runner = SweepRunner(str(tmp_path), state, fake.write_script(str(tmp_path)),
                         Slurm(fake.submit, lambda job: {**fields(job), "JobState": next(answers)}), out,
                         cwd=str(tmp_path), repeat=1, poll_s=0.01, heartbeat_s=0)
    runner.run([(POINTS[0], 0, "run")], serial=False)
    lines = out.getvalue().splitlines()
    assert sum("job 100 PENDING, 0:00 elapsed" in line for line in lines) == 3
    assert lines[-1].startswith("envrun sweep: 1 node x 1 process, run 1/1: job 100 COMPLETED: done, 12.5 s")


class FakeSlurmWithReports(FakeSlurm):
    """Each job also writes its job report beside its output, as `envrun sbatch`'s script does (X-123.report/):
    per point key the GPUs' utilisation in report.json, or None for a report without GPUs."""

    def __init__(self, outcomes: dict[str, tuple[str, str]], utils: dict[str, list[float | None]]) -> None:
        super().__init__(outcomes)
        self.utils = utils

    def submit(self, script: str, cwd: str) -> str:
        job_id = super().submit(script, cwd)
        key, pattern = self.patterns[script]
        report = Path(pattern.replace("%j", job_id)[: -len(".out")] + ".report")
        report.mkdir()
        gpus = [{"node": "n1", "index": i, "util": u} for i, u in enumerate(self.utils[key])]
        (report / "report.json").write_text(json.dumps({"schema": "envrun-report/1", "gpus": gpus}))
        (report / "report.html").write_text("<!DOCTYPE html>")
        return job_id


def test_each_run_records_its_job_report_and_its_mean_gpu_util(tmp_path: Path) -> None:
    fake = FakeSlurmWithReports({"1n1p": GOOD, "1n2p": GOOD}, {"1n1p": [0.5, 1.0, None], "1n2p": []})
    state, _said = sweep(tmp_path, fake)
    first, second = state.table_runs()["1n1p"][0], state.table_runs()["1n2p"][0]
    assert first.gpu_util == pytest.approx(0.75) and second.gpu_util is None
    assert first.report == str(tmp_path / "jobs" / "1n1p-r1-100.report" / "report.html")
    assert second.report is not None and second.report.endswith("1n2p-r1-101.report/report.html")


def test_a_run_without_a_job_report_has_none(tmp_path: Path) -> None:
    state, _said = sweep(tmp_path, FakeSlurm({"1n1p": GOOD, "1n2p": GOOD}))
    run = state.table_runs()["1n1p"][0]
    assert run.ok and run.gpu_util is None and run.report is None
