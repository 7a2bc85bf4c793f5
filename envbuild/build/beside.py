"""Commands run in the background beside a step's own actions: the spec's tests beside the squash.

The tests only read the finished tree (`apptainer exec` without --writable mounts the sandbox read-only,
and byte code was compiled at install time, so Python writes nothing), so they can run while mksquashfs
reads the same tree. On a cold build of the reference spec they took 8-10 s, the squash 30-35 s.

One background thread runs the commands one after another, each in a session of its own (as the
executor's tools), and keeps their output. The step then waits for them (`JoinBeside`) before it makes
its result complete. A command that fails stops the step's foreground tool at once (`on_failure`), so a
failing test does not wait for a 30 s squash; a step that fails or is interrupted stops the commands.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from envbuild.build.actions import JoinBeside, Run, StartBeside, Step
from envbuild.build.childproc import start_child, stop_child
from envbuild.build.containment import tool_environment
from envbuild.build.render import redact
from envbuild.errors import ToolError

_TAIL_LINES = 25


class BesideFailed(ToolError):
    pass


class Beside:
    """The background commands of one step (see the module's docstring)."""

    def __init__(self, name: str, runs: tuple[Run, ...], environ: dict[str, str], *,
                 on_failure: Callable[[], None] = lambda: None) -> None:
        self.name = name
        self.runs = runs
        self.environ = environ
        self.on_failure = on_failure
        self.output: list[str] = []  # every line, for the build log
        self.failure: BesideFailed | None = None
        self._tail: deque[str] = deque(maxlen=_TAIL_LINES)
        self._stopping = threading.Event()
        self._process: object = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run_all, name=f"envbuild-{name}", daemon=True)

    def start(self) -> Beside:
        self._thread.start()
        return self

    def _run_all(self) -> None:
        try:
            for run in self.runs:
                if self._stopping.is_set():
                    return
                self.output.append(f"$ {redact(run.describe())}")
                code = self._run_one(run)
                if self._stopping.is_set():
                    return
                if code != 0:
                    tail = "\n".join("    " + line for line in self._tail)
                    self.failure = BesideFailed(
                        f"step {self.name!r} failed: {Path(run.argv[0]).name} exited with status {code}\n"
                        f"  command: {redact(run.describe())}\n  last lines of output:\n{tail}",
                        "fix the command (or the environment it tests); the image was not kept",
                    )
                    self.on_failure()
                    return
        except Exception as exc:  # noqa: BLE001 - reported in the main thread, like a tool's failure
            if self._stopping.is_set():
                return  # stop() closed the output under the reader
            self.failure = BesideFailed(f"step {self.name!r} could not run: {exc}", "see the build log")
            self.on_failure()

    def _run_one(self, run: Run) -> int:
        try:
            with self._lock:
                if self._stopping.is_set():
                    return 0
                process = start_child(run.argv, env=tool_environment(self.environ, run.env), cwd=run.cwd)
                self._process = process
        except FileNotFoundError:
            self._tail.append(f"{run.argv[0]}: not found")
            return 127
        self._tail.clear()
        assert process.stdout is not None
        for raw in process.stdout:
            line = redact(raw.rstrip("\n"))
            self.output.append(line)
            self._tail.append(line)
        code = process.wait()
        with self._lock:
            self._process = None
        return code

    def join(self, log: TextIO) -> None:
        """Wait for the commands; their output goes to `log`; raise BesideFailed when one failed."""
        self._thread.join()
        self._write(log)
        if self.failure is not None:
            raise self.failure

    def stop(self, log: TextIO | None = None) -> None:
        """Stop the commands (the step failed or was interrupted); returns once they are gone."""
        self._stopping.set()
        with self._lock:
            process = self._process
        if process is not None:
            stop_child(process)  # type: ignore[arg-type]
        self._thread.join(timeout=60)
        if log is not None:
            self._write(log)

    def _write(self, log: TextIO) -> None:
        if self.output:
            log.write(f"--- beside: {self.name}\n" + "".join(line + "\n" for line in self.output) + f"--- end of {self.name}\n")
            self.output = []
        log.flush()


# --- the executor's side (envbuild.build.executor registers these for StartBeside and JoinBeside) ----------


def start_beside(executor: Any, step: Step, action: StartBeside) -> None:
    stop_beside(executor)
    executor.beside = Beside(action.name, action.runs, dict(os.environ),
                             on_failure=lambda: _terminate(executor.foreground)).start()


def join_beside(executor: Any, step: Step, action: JoinBeside) -> None:
    beside, executor.beside = executor.beside, None
    if beside is not None:
        beside.join(executor._log)


def foreground_started(executor: Any, process: subprocess.Popen[str]) -> None:
    """The step's tool started: a background command that has failed already stops it at once."""
    executor.foreground = process
    if executor.beside is not None and executor.beside.failure is not None:
        _terminate(process)


def raise_if_beside_failed(executor: Any) -> None:
    """After the step's tool ended badly: when a background command failed first (and so stopped the tool),
    its failure is the one to report."""
    if executor.beside is not None and executor.beside.failure is not None:
        join_beside(executor, None, None)  # type: ignore[arg-type]


def stop_beside(executor: Any) -> None:
    """The step failed or was interrupted: its background commands go first, before any cleanup."""
    beside, executor.beside = getattr(executor, "beside", None), None
    if beside is not None:
        beside.stop(getattr(executor, "_log", None))


def _terminate(process: subprocess.Popen[str] | None) -> None:
    if process is not None and process.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGTERM)
