"""Running a sweep's jobs: submit each run's batch script (written by `envrun sbatch`'s planner), follow the jobs
until they end, read each one's output and record the result in the report directory after every change.

Progress goes out as plain lines (a point, its job id, state and elapsed time), on each change of state and
every `heartbeat_s` while a job runs: no escape codes, so a log file or CI output reads the same as a terminal.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

from envbuild.shared.errors import EnvbuildError
from envbuild.slurm.batch.submit import FINAL_STATES
from envbuild.slurm.sweep import state as sweepstate
from envbuild.slurm.sweep.metrics import mean_gpu_util, parse_output
from envbuild.slurm.sweep.points import ScalePoint

# writes the run's batch script; returns (script path, output path pattern with %j)
ScriptWriter = Callable[[ScalePoint, int], tuple[str, str]]


@dataclass
class Slurm:
    """The Slurm calls a sweep makes (envbuild.slurm.batch.submit's by default; tests pass stand-ins)."""

    submit: Callable[[str, str], str]
    fields: Callable[[str], dict[str, str]]

    @classmethod
    def real(cls) -> Slurm:
        from envbuild.slurm.batch.submit import job_fields, submit

        return cls(submit=submit, fields=job_fields)


@dataclass
class Active:
    point: ScalePoint
    repeat: int
    job_id: str
    log: str
    started: float
    state: str = ""
    said_at: float = 0.0


class SweepRunner:
    def __init__(self, directory: str, state: sweepstate.SweepState, write_script: ScriptWriter, slurm: Slurm,
                 out: TextIO, cwd: str, repeat: int, poll_s: float = 2.0, heartbeat_s: float = 30.0) -> None:
        self.directory = directory
        self.state = state
        self.write_script = write_script
        self.slurm = slurm
        self.out = out
        self.cwd = cwd
        self.repeat = repeat
        self.poll_s = poll_s
        self.heartbeat_s = heartbeat_s

    def say(self, text: str) -> None:
        self.out.write(f"envrun sweep: {text}\n")
        self.out.flush()

    def label(self, point: ScalePoint, repeat: int) -> str:
        return f"{point.describe()}, run {repeat + 1}/{self.repeat}"

    def run(self, work: list[tuple[ScalePoint, int, str]], serial: bool) -> None:
        """Submit what must run (all at once, or one job at a time with `serial`) and follow every job."""
        active: list[Active] = []
        for point, repeat, what in work:
            if what == "follow":
                record = self.state.run_of(point, repeat) or {}
                self.say(f"{self.label(point, repeat)}: following job {record.get('job_id')} from an earlier run")
                active.append(Active(point, repeat, str(record.get("job_id")), str(record.get("log")), time.monotonic()))
        for point, repeat, what in work:
            if what != "run":
                continue
            if serial and active:
                self.follow(active)
                active = []
            active.append(self.submit(point, repeat))
        self.follow(active)

    def submit(self, point: ScalePoint, repeat: int) -> Active:
        script, pattern = self.write_script(point, repeat)
        job_id = self.slurm.submit(script, self.cwd)
        log = pattern.replace("%j", job_id)
        self.state.record(point, {"repeat": repeat, "job_id": job_id, "log": log, "state": sweepstate.SUBMITTED,
                                  "exit_code": 0, "script": script})
        sweepstate.save(self.directory, self.state)
        self.say(f"{self.label(point, repeat)}: submitted job {job_id} (output {log})")
        return Active(point, repeat, job_id, log, time.monotonic())

    def follow(self, active: list[Active]) -> None:
        waiting = list(active)
        while waiting:
            for job in list(waiting):
                try:
                    fields = self.slurm.fields(job.job_id)
                except EnvbuildError as exc:  # Slurm has forgotten it (a sweep resumed long after)
                    self.finish(job, {"JobState": "LOST", "ExitCode": "1:0"}, str(exc.message))
                    waiting.remove(job)
                    continue
                state = fields.get("JobState", "UNKNOWN")
                now = time.monotonic()
                if state != job.state or (state not in FINAL_STATES and now - job.said_at >= self.heartbeat_s):
                    self.say(f"{self.label(job.point, job.repeat)}: job {job.job_id} {state}, "
                             f"{_clock(now - job.started)} elapsed")
                    job.state, job.said_at = state, now
                if state in FINAL_STATES:
                    time.sleep(min(self.poll_s, 1.0))  # the last lines reach the output after the state changes
                    self.finish(job, fields)
                    waiting.remove(job)
            if waiting:
                time.sleep(self.poll_s)

    def finish(self, job: Active, fields: dict[str, str], problem: str = "") -> None:
        from envbuild.slurm.batch.submit import job_exit_code

        state = fields.get("JobState", "UNKNOWN")
        code = job_exit_code(state, fields.get("ExitCode", "0:0")) if state != "LOST" else 1
        text = _read(job.log)
        seen = parse_output(text)
        time_s = seen.step_s if seen.step_s is not None else _run_time(fields.get("RunTime", ""))
        throughput = seen.throughput
        gpu_util, report_page = read_job_report(job.log)
        record: dict[str, Any] = {
            "repeat": job.repeat, "job_id": job.job_id, "log": job.log, "state": state, "exit_code": code,
            "time_s": time_s, "time_from": "step" if seen.step_s is not None else "job",
            "throughput": throughput[0] if throughput else None, "unit": throughput[1] if throughput else None,
            "metrics": seen.metrics, "gpu_util": gpu_util, "report": report_page,
        }
        if problem:
            record["problem"] = problem
        previous = self.state.run_of(job.point, job.repeat) or {}
        if "script" in previous:
            record["script"] = previous["script"]
        self.state.record(job.point, record)
        sweepstate.save(self.directory, self.state)
        result = (f"{time_s:.1f} s" if time_s is not None else "no time") + \
            (f", {throughput[0]:,.1f} {throughput[1]}" if throughput else "")
        verdict = "done" if state == "COMPLETED" and code == 0 else f"FAILED (exit code {code}; log {job.log})"
        self.say(f"{self.label(job.point, job.repeat)}: job {job.job_id} {state}: {verdict}, {result}")


def _clock(seconds: float) -> str:
    whole = int(seconds)
    return f"{whole // 60}:{whole % 60:02d}"


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""


def read_job_report(log: str) -> tuple[float | None, str | None]:
    """(mean GPU utilisation, report.html's path) of the job report that `envrun sbatch`'s script writes beside
    the output `log` (`X-123.out` -> `X-123.report/`). A report that is missing or unreadable (a job killed
    before its step ended) gives (None, None) or no utilisation: the table shows "-", the sweep goes on."""
    import json

    from envbuild.slurm.batch.jobplan import report_directory

    directory = report_directory(log)
    page = os.path.join(directory, "report.html")
    try:
        with open(os.path.join(directory, "report.json"), encoding="utf-8") as handle:
            gpu_util = mean_gpu_util(json.load(handle))
    except (OSError, ValueError):
        gpu_util = None
    return gpu_util, page if os.path.exists(page) else None


def _run_time(text: str) -> float | None:
    """scontrol's RunTime (HH:MM:SS or D-HH:MM:SS): the job's wall time, whole seconds."""
    from envbuild.shared.durations import parse_slurm_time

    if not text or not text[:1].isdigit():
        return None
    try:
        return float(parse_slurm_time(text, "RunTime"))
    except EnvbuildError:
        return None


def log_pattern(directory: str, point: ScalePoint, repeat: int) -> str:
    return os.path.join(os.path.abspath(directory), "jobs", f"{point.key}-r{repeat + 1}-%j.out")
