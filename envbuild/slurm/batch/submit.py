"""Submit a batch script and follow it: the executor around Slurm's sbatch and scontrol (tested against the
real Slurm of the test cluster). `job_exit_code` and `parse_job_fields` are pure."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

from envbuild.shared.errors import EXIT_CLEAN, EXIT_PROBLEMS, EnvbuildError, UsageError

if TYPE_CHECKING:
    from envbuild.shared.progress import LiveLine

# JobState values after which nothing more happens (squeue(1) JOB STATE CODES); REQUEUED, PENDING and
# COMPLETING are not among them: a requeued job comes back under the same id.
FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
                "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT"}
Runner = Callable[[list[str]], "subprocess.CompletedProcess[str]"]


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    except FileNotFoundError:
        raise UsageError(f"{argv[0]} is not on PATH", "run this where Slurm's commands are (a login node), or "
                         "write the script with -o FILE and submit it there") from None
    except subprocess.TimeoutExpired:
        raise EnvbuildError(f"{argv[0]} did not answer within 60 s", "check that the Slurm controller is up") from None


def submit(script: str, cwd: str, run: Runner = _run) -> str:
    """sbatch the script file from `cwd` (the job's working directory); the job id."""
    result = run(["sbatch", "--parsable", script])
    if result.returncode != 0:
        raise EnvbuildError(f"sbatch refused {script}: {(result.stderr or result.stdout).strip()}",
                            "the script's #SBATCH lines are explained in its comments; `envrun sbatch --check "
                            f"{script}` checks them against the system's recipe")
    job_id = result.stdout.strip().split(";", 1)[0]
    if not job_id.isdigit():
        raise EnvbuildError(f"sbatch answered {result.stdout.strip()!r} instead of a job id", "submit by hand: "
                            f"sbatch {script}")
    return job_id


def parse_job_fields(text: str) -> dict[str, str]:
    """`scontrol show job -o ID`: one line of Key=Value fields (values without spaces, except Command)."""
    fields: dict[str, str] = {}
    for word in text.split():
        key, eq, value = word.partition("=")
        if eq and key not in fields:
            fields[key] = value
    return fields


def job_exit_code(state: str, exit_code: str) -> int:
    """The exit code `--wait` returns: the script's, 128+signal when a signal ended it, else 1 for a job that
    did not complete (TIMEOUT, NODE_FAIL, ... with no code of its own)."""
    code, _, signal = exit_code.partition(":")
    if code.isdigit() and int(code):
        return int(code)
    if signal.isdigit() and int(signal):
        return 128 + int(signal)
    return EXIT_CLEAN if state == "COMPLETED" else EXIT_PROBLEMS


def wait_for_job(job_id: str, cwd: str, out: TextIO = sys.stdout, err: TextIO = sys.stderr, run: Runner = _run,
                 poll_s: float = 2.0, timeout_s: float | None = None) -> int:
    """Follow the job's output file until the job has ended (through requeues), then its exit code.

    While nothing happens (a job PENDING for an hour), a live line on a terminal, or off one (a CI log) an
    `envrun: still waiting: job N STATE, M s` line every $ENVBUILD_HEARTBEAT seconds (30 by default)."""
    from envbuild.shared.progress import LiveLine

    with LiveLine(f"job {job_id}", err, words="envrun: still waiting", thread=False) as live:
        return _wait(job_id, cwd, out, run, poll_s, timeout_s, live)


def _wait(job_id: str, cwd: str, out: TextIO, run: Runner, poll_s: float, timeout_s: float | None, live: LiveLine) -> int:
    offset, seen_state, path, started = 0, "", "", time.monotonic()
    while True:
        fields = _job_fields(job_id, run)
        state = fields.get("JobState", "UNKNOWN")
        path = _resolve(fields.get("StdOut", path), cwd)
        if state != seen_state:
            restarts = fields.get("Restarts", "0")
            live.say(f"envrun: job {job_id} {state}" + (f" (restart {restarts})" if restarts not in ("", "0") else ""))
            live.set_label(f"job {job_id} {state}")
            seen_state = state
        offset = _follow(path, offset, out, live.clear_for_output)
        if state in FINAL_STATES:
            time.sleep(min(poll_s, 1.0))  # the last lines reach the file after the state changes
            _follow(path, offset, out, live.clear_for_output)
            code = job_exit_code(state, fields.get("ExitCode", "0:0"))
            live.say(f"envrun: job {job_id} ended: {state}, exit code {fields.get('ExitCode', '?')} -> {code}")
            return code
        if timeout_s is not None and time.monotonic() - started > timeout_s:
            raise EnvbuildError(f"job {job_id} still {state} after {timeout_s:.0f} s", f"follow it with squeue -j {job_id}")
        live.tick()
        time.sleep(poll_s)


def job_fields(job_id: str, run: Runner = _run) -> dict[str, str]:
    """The job's fields as scontrol shows them (JobState, ExitCode, StdOut, RunTime, ...), or as accounting
    remembers them once the controller has forgotten the job."""
    return _job_fields(job_id, run)


def _job_fields(job_id: str, run: Runner) -> dict[str, str]:
    result = run(["scontrol", "show", "job", "-o", job_id])
    if result.returncode == 0 and result.stdout.strip():
        return parse_job_fields(result.stdout)
    # gone from the controller's memory (MinJobAge): accounting may still know
    acct = run(["sacct", "-j", job_id, "-X", "-n", "-P", "-o", "State,ExitCode"])
    line = acct.stdout.strip().splitlines()[0] if acct.returncode == 0 and acct.stdout.strip() else ""
    if line:
        state, _, code = line.partition("|")
        return {"JobState": state.split()[0], "ExitCode": code}
    raise EnvbuildError(f"Slurm does not know job {job_id} ({(result.stderr or '').strip() or 'no answer'})",
                        f"look for its output file in {os.getcwd()}")


def _resolve(path: str, cwd: str) -> str:
    return path if not path or os.path.isabs(path) else os.path.join(cwd, path)


def _follow(path: str, offset: int, out: TextIO, before_writing: Callable[[], None] = lambda: None) -> int:
    """Write what the file gained since `offset`; the new offset (0 again if the file was truncated)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            if size < offset:
                offset = 0
            handle.seek(offset)
            data = handle.read()
    except OSError:
        return offset
    if data:
        before_writing()  # the live line makes way
        out.write(data.decode(errors="replace"))
        out.flush()
    return offset + len(data)
