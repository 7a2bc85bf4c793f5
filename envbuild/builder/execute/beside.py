"""Commands run in the background beside a step's own actions: the spec's tests beside the squash.

The tests only read the finished tree (`apptainer exec` without --writable mounts the sandbox read-only,
and byte code was compiled at install time, so Python writes nothing), so they can run while mksquashfs
reads the same tree. On a cold build of the reference spec they end well within the squash.

The commands also run side by side, as many at a time as there are CPUs but at most MAX_SIDE_BY_SIDE:
a spec's tests are separate commands (each its own `apptainer exec`), and most of their time is one
Python process importing modules on one core. Side by side, the reference spec's two tests take about
as long as the longer one alone, which on a `--layered` +1 build is the longest part of the squash step.
The cap is for memory, not CPUs: a login node has many cores but a per-user memory limit, and one test
importing torch, transformers and lightning takes hundreds of MB.

Each command runs in a session of its own (as the executor's tools); their output is kept per command
and written to the log in the spec's order. The step then waits for them (`JoinBeside`) before it makes
its result complete. A command that fails stops the others and the step's foreground tool at once
(`on_failure`), so a failing test does not wait for a squash; a step that fails or is interrupted
stops the commands.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, TextIO

from envbuild.builder.execute.tools import start_child, stop_child, tool_environment
from envbuild.builder.plan.actions import JoinBeside, Run, StartBeside, Step
from envbuild.builder.plan.planrender import redact
from envbuild.shared.errors import ToolError

_TAIL_LINES = 25
MAX_SIDE_BY_SIDE = 4


class BesideFailed(ToolError):
    pass


class Beside:
    """The background commands of one step (see the module's docstring)."""

    def __init__(self, name: str, runs: tuple[Run, ...], environ: dict[str, str], *,
                 on_failure: Callable[[], None] = lambda: None, parallel: int | None = None) -> None:
        self.name = name
        self.runs = runs
        self.environ = environ
        self.on_failure = on_failure
        self.failure: BesideFailed | None = None
        self._outputs: list[list[str]] = [[] for _ in runs]  # every line of each command, for the build log
        self._pending = deque(enumerate(runs))
        self._stopping = threading.Event()
        self._processes: dict[int, subprocess.Popen[str]] = {}
        self._lock = threading.Lock()
        width = max(1, min(len(runs), parallel or min(os.cpu_count() or 1, MAX_SIDE_BY_SIDE)))
        self._threads = [threading.Thread(target=self._work, name=f"envbuild-{name}-{n}", daemon=True) for n in range(width)]

    def start(self) -> Beside:
        for thread in self._threads:
            thread.start()
        return self

    def _work(self) -> None:
        while not self._stopping.is_set():
            with self._lock:
                if not self._pending:
                    return
                index, run = self._pending.popleft()
            try:
                self._run_one(index, run)
            except Exception as exc:  # noqa: BLE001 - reported in the main thread, like a tool's failure
                if not self._stopping.is_set():  # else stop() closed the output under the reader
                    self._fail(BesideFailed(f"step {self.name!r} could not run: {exc}", "see the build log"))
                return

    def _run_one(self, index: int, run: Run) -> None:
        output = self._outputs[index]
        output.append(f"$ {redact(run.describe())}")
        started = time.monotonic()
        tail: deque[str] = deque(maxlen=_TAIL_LINES)
        with self._lock:
            if self._stopping.is_set():
                return
            process: subprocess.Popen[str] | None
            try:
                process = start_child(run.argv, env=tool_environment(self.environ, run.env), cwd=run.cwd)
            except FileNotFoundError:
                process = None
            if process is not None:
                self._processes[index] = process
        if process is None:
            tail.append(f"{run.argv[0]}: not found")
            code = 127
        else:
            assert process.stdout is not None
            for raw in process.stdout:
                line = redact(raw.rstrip("\n"))
                output.append(line)
                tail.append(line)
            code = process.wait()
            with self._lock:
                self._processes.pop(index, None)
        output.append(f"  ({time.monotonic() - started:.1f} s)")
        if code != 0 and not self._stopping.is_set():
            lines = "\n".join("    " + line for line in tail)
            self._fail(BesideFailed(
                f"step {self.name!r} failed: {Path(run.argv[0]).name} exited with status {code}\n"
                f"  command: {redact(run.describe())}\n  last lines of output:\n{lines}",
                "fix the command (or the environment it tests); the image was not kept",
            ))

    def _fail(self, failure: BesideFailed) -> None:
        """The first failure is the one reported; the other commands and the step's tool are stopped."""
        with self._lock:
            if self.failure is not None or self._stopping.is_set():
                return
            self.failure = failure
            self._stopping.set()
            running = list(self._processes.values())
        self.on_failure()  # the step's tool first: it may be a long squash
        for process in running:
            stop_child(process)

    def join(self, log: TextIO) -> None:
        """Wait for the commands; their output goes to `log`; raise BesideFailed when one failed."""
        for thread in self._threads:
            thread.join()
        self._write(log)
        if self.failure is not None:
            raise self.failure

    def stop(self, log: TextIO | None = None) -> None:
        """Stop the commands (the step failed or was interrupted); returns once they are gone."""
        with self._lock:
            self._stopping.set()
            running = list(self._processes.values())
        for process in running:
            stop_child(process)
        for thread in self._threads:
            thread.join(timeout=60)
        if log is not None:
            self._write(log)

    def _write(self, log: TextIO) -> None:
        lines = [line for output in self._outputs for line in output]
        if lines:
            log.write(f"--- beside: {self.name}\n" + "".join(line + "\n" for line in lines) + f"--- end of {self.name}\n")
            self._outputs = [[] for _ in self.runs]
        log.flush()


# --- the executor's side (envbuild.builder.execute.executor registers these for StartBeside and JoinBeside) ----------


class BackgroundExecutor(Protocol):
    """What the background handlers use of the executor that runs the step (BuildExecutor): the step's
    background commands, the tool that runs in the foreground now, and the step log."""

    beside: Beside | None
    foreground: subprocess.Popen[str] | None

    @property
    def _log(self) -> TextIO: ...


def start_beside(executor: BackgroundExecutor, step: Step, action: StartBeside) -> None:
    stop_beside(executor)
    executor.beside = Beside(action.name, action.runs, dict(os.environ),
                             on_failure=lambda: _terminate(executor.foreground)).start()


def join_beside(executor: BackgroundExecutor, step: Step, action: JoinBeside) -> None:
    _join_background(executor)


def _join_background(executor: BackgroundExecutor) -> None:
    beside, executor.beside = executor.beside, None
    if beside is not None:
        beside.join(executor._log)


def foreground_started(executor: BackgroundExecutor, process: subprocess.Popen[str]) -> None:
    """The step's tool started: a background command that has failed already stops it at once."""
    executor.foreground = process
    if executor.beside is not None and executor.beside.failure is not None:
        _terminate(process)


def raise_if_beside_failed(executor: BackgroundExecutor) -> None:
    """After the step's tool ended badly: when a background command failed first (and so stopped the tool),
    its failure is the one to report."""
    if executor.beside is not None and executor.beside.failure is not None:
        _join_background(executor)


def stop_beside(executor: BackgroundExecutor) -> None:
    """The step failed or was interrupted: its background commands go first, before any cleanup."""
    beside, executor.beside = executor.beside, None
    if beside is not None:
        beside.stop(executor._log)


def _terminate(process: subprocess.Popen[str] | None) -> None:
    if process is not None and process.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGTERM)
