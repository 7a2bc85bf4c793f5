"""Thin executor: carries out a BuildPlan's actions on this machine, with progress and a log file."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

from envbuild.builder.execute import fsactions
from envbuild.builder.execute.beside import (
    Beside,
    BesideFailed,
    foreground_started,
    join_beside,
    raise_if_beside_failed,
    start_beside,
    stop_beside,
)
from envbuild.builder.execute.tools import tool_environment
from envbuild.builder.plan.actions import (
    Action,
    CheckLinksInside,
    CheckReachable,
    CheckTorchFamily,
    ClampTimes,
    CopyFile,
    CopyTree,
    GuardTree,
    JoinBeside,
    MakeDirs,
    MergeJson,
    RecordDigest,
    Remove,
    Rename,
    Run,
    StartBeside,
    Step,
    Touch,
    WriteFile,
    WriteRunWrappers,
)
from envbuild.builder.plan.plandata import BasePlan, BuildPlan
from envbuild.builder.plan.planrender import redact
from envbuild.shared import safefiles
from envbuild.shared.errors import ToolError
from envbuild.shared.progress import LiveLine, StepRecord, clean_line, progress_bar, render_summary

_TAIL_LINES = 30  # shown with a failed command: enough for a pip/uv resolution error and its cause
# A line a `python -m envbuild...` helper prints with this prefix is shown like the executor's own notes
# (envbuild.sif.layeredwriter: why it squashed the whole tree after all).
HELPER_NOTE = "envbuild-note: "


class StepFailed(ToolError):
    pass


class BuildExecutor:
    """Runs steps in order. A failed step runs its cleanup actions, and the work directory is removed
    unless `keep_work`; the log file keeps every line the tools printed."""

    def __init__(self, log_path: Path, *, store_root: Path, verbose: bool = False, keep_work: bool = False,
                 out: TextIO | None = None, quiet: bool = False, heartbeat_s: float | None = None,
                 started: float | None = None) -> None:
        """quiet: warnings, errors and the result only; verbose: every tool's output as it comes;
        heartbeat_s: off a terminal, a `still running:` line this often (envbuild.shared.progress);
        started: when the whole command began (time.monotonic()), for the total that finish() prints."""
        self.log_path = log_path
        self.store_root = store_root
        self.verbose = verbose and not quiet
        self.quiet = quiet
        self.heartbeat_s = heartbeat_s
        self.keep_work = keep_work
        self.out = out or sys.stderr
        self.started = time.monotonic() if started is None else started
        self.records: list[StepRecord] = []
        self._tail: deque[str] = deque(maxlen=_TAIL_LINES)
        self._live: LiveLine | None = None
        self.beside: Beside | None = None  # commands in the background of this step (the tests beside the squash)
        self.foreground: subprocess.Popen[str] | None = None  # the step's tool that runs now
        self.guards: list[tuple[threading.Thread, list[str]]] = []  # hard-link guards at work (fsactions.guard_tree)

    def execute(self, plan: BuildPlan) -> None:
        self.execute_steps(plan.steps, plan.work_dir, "build")
        self.finish(f"built {plan.output}")

    def finish(self, result: str) -> None:
        """The end of a build: the table of steps (not with -q), then the result with the whole command's
        time (base layer included) and where the log is."""
        if not self.quiet and self.records:
            self._say(render_summary(self.records))
        log = f" (log: {self.log_path})" if self.log_path.exists() else ""
        self._say(f"{result} in {time.monotonic() - self.started:.0f} s{log}", result=True)

    def execute_base(self, plan: BasePlan) -> None:
        self.execute_steps(plan.steps, None, "base")

    def execute_steps(self, steps: tuple[Step, ...], work_dir: str | None, phase: str) -> None:
        """Run `steps` in order; a failure or an interruption (Interrupted, KeyboardInterrupt) runs the
        step's cleanup and removes `work_dir` (unless keep_work). While a work directory exists, the build
        holds its `work` lock: a work directory whose lock is free belongs to a build that was killed."""
        # The log lies beside the output or in the store, either maybe a group's: its directories are made without
        # following a link another member planted on the way (a plain mkdir -p made them in the link's target), and
        # it is never appended through a planted link.
        safefiles.make_dirs(self.log_path.parent)
        with open(safefiles.open_append(self.log_path), "a", encoding="utf-8") as log, self._work_lock(work_dir):
            self._log = log
            total = len(steps)
            step = steps[0] if steps else None
            try:
                for number, step in enumerate(steps, 1):
                    self._run_step(step, f"{phase} {number}/{total}")
                fsactions.join_guards(self)
            except BaseException as exc:
                if step is not None:
                    self._fail(work_dir, step, exc)
                raise

    @contextlib.contextmanager
    def _work_lock(self, work_dir: str | None) -> Iterator[None]:
        if work_dir is None:
            yield
            return
        from envbuild.store.locks import entry_lock, forget_lock

        name = os.path.basename(work_dir.rstrip("/"))
        with entry_lock(self.store_root, "work", name):
            try:
                yield
            finally:
                if self.keep_work and os.path.isdir(work_dir):
                    from envbuild.store.debris import KEPT

                    safefiles.touch(os.path.join(work_dir, KEPT))  # kept for inspection: not debris for the next build
                if not os.path.exists(work_dir):
                    forget_lock(self.store_root, "work", name)  # one lock file per build would pile up

    # -- steps ------------------------------------------------------------------------------------

    def _run_step(self, step: Step, position: str) -> None:
        label = f"[{position}] {step.title}"
        if step.lock is None:
            self._run_unlocked(step, label)
            return
        from envbuild.store.locks import entry_lock

        kind, name = step.lock
        with entry_lock(self.store_root, kind, name, on_wait=lambda message: self._say(f"{label}: {message}")):
            from envbuild.store.places import refuse_linked_entry

            refuse_linked_entry(self.store_root, kind, name)  # a member's link there would take the writes elsewhere
            self._run_unlocked(step, label)

    def _run_unlocked(self, step: Step, label: str) -> None:
        position = label[1:].partition("]")[0]
        if step.skip_if_exists and os.path.exists(step.skip_if_exists):
            self._say(f"{label}: cached")
            self._log.write(f"\n=== {label}: cached ({step.skip_if_exists})\n")
            self.records.append(StepRecord(position, step.title, 0.0, cached=True))
            return
        self._log.write(f"\n=== {label}\n")
        self._log.flush()
        started = time.monotonic()
        if self.verbose:
            self._say(f"{label} ...")
        # A live line on a terminal, `still running:` lines in a batch log (envbuild.shared.progress).
        with LiveLine(label, self.out, interval=self.heartbeat_s, quiet=self.quiet) as self._live:
            for number, action in enumerate(step.actions):
                self._fault_pause(step, number)
                self._log.write(f"$ {redact(action.describe())}\n")
                self._log.flush()
                action_started = time.monotonic()
                self._do(step, action)
                # Each action's time in the log: where a build's time goes (docs/reports/performance.md).
                self._log.write(f"  ({time.monotonic() - action_started:.1f} s)\n")
        self._live = None
        seconds = time.monotonic() - started
        self.records.append(StepRecord(position, step.title, seconds, cached=False))
        self._say(f"{label}: done in {seconds:.1f} s")

    def _fault_pause(self, step: Step, done: int) -> None:
        """Fault injection for the reliability suite: ENVBUILD_FAULT_PAUSE=STEP:N stops for up to 120 s
        after the first N actions of step STEP, so that a test can deliver a signal at that exact point of
        a real build (for instance between writing the output's partial copy and renaming it)."""
        name, _, after = os.environ.get("ENVBUILD_FAULT_PAUSE", "").partition(":")
        if name != step.name or (after or "0") != str(done):
            return  # unset, another step, or another point (a malformed value pauses nowhere)
        self._say(f"fault pause: step {step.name} after {done} action(s), pid {os.getpid()}", result=True)
        self._log.write(f"fault pause: step {step.name} after {done} action(s)\n")
        self._log.flush()
        time.sleep(120)

    def _fail(self, work_dir: str | None, step: Step, exc: BaseException) -> None:
        from envbuild.shared.interrupts import Interrupted

        interrupted = isinstance(exc, (Interrupted, KeyboardInterrupt))
        if interrupted:
            name = exc.name if isinstance(exc, Interrupted) else "SIGINT"
            self._log.write(f"\n=== interrupted by {name} during step {step.name}\n")
        stop_beside(self)  # its commands go before the cleanup removes what they read
        fsactions.join_guards(self)  # and the guards, which read a parent layer and remove their snapshot
        removed = [p for action in step.cleanup for p in getattr(action, "paths", ()) if os.path.lexists(p)]
        for action in step.cleanup:
            try:
                self._do(step, action)
            except Exception as cleanup_error:  # noqa: BLE001 - cleanup must not hide the original failure
                self._log.write(f"cleanup failed: {cleanup_error}\n")
        if work_dir is None:
            pass
        elif self.keep_work:
            self._say(f"kept the work directory for inspection: {work_dir}")
        elif os.path.lexists(work_dir):
            removed.append(work_dir)
            with contextlib.suppress(OSError):
                safefiles.remove_tree(work_dir)
        if hasattr(exc, "refresh"):
            exc.refresh()  # a full disk: its free space as the cleanup left it
        self._live = None
        if not interrupted and not isinstance(exc, (StepFailed, BesideFailed)) and self.log_path.exists():
            self._say(f"step {step.name!r} failed; its log: {self.log_path}", result=True)  # StepFailed names it
        if interrupted:
            what = ", ".join(removed) if removed else "nothing was half-made"
            self._say(f"interrupted by {name} during step {step.name!r}; removed what it had begun: {what}. "
                      f"Finished layers stay in the store for the next build.")
        self._log.flush()

    def _say(self, text: str, *, result: bool = False) -> None:
        """A lasting line (above the live one); with -q only warnings, interruptions and `result` lines."""
        if self.quiet and not result and not text.startswith(("warning", "interrupted", "kept")):
            return
        if self._live is not None:
            self._live.say(text)
        else:
            print(text, file=self.out, flush=True)

    # -- actions ----------------------------------------------------------------------------------

    def _do(self, step: Step, action: Action) -> None:
        handler = _ACTION_HANDLERS.get(type(action))
        if handler is None:  # pragma: no cover - the Action union is closed
            raise TypeError(f"unknown action {action!r}")
        try:
            handler(self, step, action)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                self._raise_disk_full(step, exc.filename)
            tree = next((getattr(action, name) for name in ("root", "dest_root", "src_root", "base_root", "venv_root")
                         if getattr(action, name, None)), None)
            if tree is None:
                raise
            # Resolved inside an image tree (envbuild.imagetree.intree): what the base put there is in the way.
            raise StepFailed(f"step {step.name!r}: {redact(action.describe())} failed inside the tree {tree}: {exc}",
                             "the base image has a link loop, or a file where a directory must be, on that path; "
                             "fix the base (or choose another), then build again") from exc

    def _check_reachable(self, step: Step, action: CheckReachable) -> None:
        from envbuild.builder.execute.reachable import unreachable

        started = time.monotonic()
        missing = unreachable(action.checks, action.timeout_s)
        for url, what in action.checks:
            self._log.write(f"{'UNREACHABLE' if any(m[0] == url for m in missing) else 'reachable'}: {redact(url)} ({what})\n")
        if missing:
            lines = "\n".join(f"  - {redact(url)} ({what}): {why}" for url, what, why in missing)
            raise StepFailed(
                f"step {step.name!r}: the build needs network sources this machine cannot reach "
                f"(checked in {time.monotonic() - started:.1f} s, before downloading anything):\n{lines}",
                action.fix or "build where these hosts answer, or through a proxy (https_proxy)",
            )

    def _check_torch_family(self, step: Step, action: CheckTorchFamily) -> None:
        from envbuild.inventory.installedtorch import check_torch_family

        self._log.write(check_torch_family(action) + "\n")

    def _run(self, step: Step, action: Run) -> None:
        from envbuild.builder.execute.diskspace import says_disk_full
        from envbuild.builder.execute.tools import start_child, stop_child

        env = tool_environment(os.environ, action.env)
        self._tail.clear()
        if Path(action.argv[0]).name == "debootstrap":
            from envbuild.builder.execute.debootstrapcheck import debootstrap_problem

            problem = debootstrap_problem(action.argv)
            if problem is not None:
                raise StepFailed(f"step {step.name!r}: {problem[0]}", problem[1])
        try:
            process = start_child(action.argv, env=env, cwd=action.cwd)
        except FileNotFoundError:
            raise StepFailed(
                f"step {step.name!r}: {action.argv[0]} is not installed (or not on PATH)",
                _install_hint(action.argv[0]),
            ) from None
        assert process.stdout is not None
        foreground_started(self, process)
        full = False
        try:
            for raw in process.stdout:
                line = redact(clean_line(raw))
                bar = progress_bar(line)
                if bar is not None:  # a progress redraw: the live line's detail, not a log line
                    if self._live is not None:
                        self._live.detail(bar)
                    continue
                self._log.write(line + "\n")
                self._tail.append(line)
                full = full or says_disk_full(line)
                if line.startswith(HELPER_NOTE):  # one of envbuild's own helpers says what the user must know
                    self._say(line[len(HELPER_NOTE):])
                elif self._live is None:
                    if self.verbose:
                        print(line, file=self.out, flush=True)
                elif self.verbose:
                    self._live.say(line)  # -v: every line, as it comes
                elif line.strip():
                    self._live.detail(line)  # the terminal's live line shows the latest (pip's package, a stage)
            code = process.wait()
        except BaseException:
            # Interrupted (or our own error): the tool and everything it started go first, so the
            # cleanup never races a writer.
            stop_child(process)
            raise
        finally:
            self.foreground = None
            self._log.flush()
        if code != 0:
            raise_if_beside_failed(self)  # a failed background command stopped the tool: report it
        if code != 0 and full:
            self._raise_disk_full(step, None)
        if code != 0:
            tail = "\n".join("    " + redact(x) for x in self._tail)
            raise StepFailed(
                f"step {step.name!r} failed: {Path(action.argv[0]).name} exited with status {code}\n"
                f"  command: {redact(action.describe())}\n  last lines of output:\n{tail}",
                f"read the full log {self.log_path}; rerun with -v to watch the tools' output",
            )

    def _raise_disk_full(self, step: Step, path: str | None) -> None:
        from envbuild.builder.execute.diskspace import disk_full_error, fullest, step_need, step_paths

        where = path or fullest(step_paths(step.actions)) or str(self.store_root)
        needed, basis = step_need(step.actions)
        raise disk_full_error(step.name, where, needed, basis) from None


# Action type -> the executor's method that carries it out (the Action union is closed: one entry each).
_ACTION_HANDLERS: dict[type, Callable[[BuildExecutor, Step, Any], None]] = {
    CheckReachable: BuildExecutor._check_reachable, CheckTorchFamily: BuildExecutor._check_torch_family,
    Run: BuildExecutor._run, WriteFile: fsactions.write_file, MergeJson: fsactions.merge_json,
    CopyTree: fsactions.copy_tree, CopyFile: fsactions.copy_file, MakeDirs: fsactions.make_dirs,
    Touch: fsactions.touch, Remove: fsactions.remove, Rename: fsactions.rename,
    GuardTree: fsactions.guard_tree, CheckLinksInside: fsactions.check_links_inside,
    ClampTimes: fsactions.clamp_times, RecordDigest: fsactions.record_digest,
    WriteRunWrappers: fsactions.write_wrappers, StartBeside: start_beside, JoinBeside: join_beside,
}


def _install_hint(program: str) -> str:
    name = Path(program).name
    if name in ("apptainer", "singularity"):
        return "load or install apptainer/singularity (provision/install.sh on a test machine)"
    return f"install {name} or fix PATH"
