"""Thin executor: carries out a BuildPlan's actions on this machine, with progress and a log file."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from envbuild.atomicfile import atomic_write
from envbuild.build.actions import (
    Action,
    CheckReachable,
    CheckTorchFamily,
    ClampTimes,
    CopyFile,
    CopyTree,
    GuardTree,
    MakeDirs,
    MergeJson,
    RecordDigest,
    Remove,
    Rename,
    Run,
    SnapshotTree,
    Step,
    Touch,
    WriteFile,
    WriteRunWrappers,
)
from envbuild.build.progress import Progress, clean_line
from envbuild.build.render import redact
from envbuild.build.request import BasePlan, BuildPlan
from envbuild.errors import EnvbuildError, ToolError

_TAIL_LINES = 25


class StepFailed(ToolError):
    pass


class BuildExecutor:
    """Runs steps in order. A failed step runs its cleanup actions, and the work directory is removed
    unless `keep_work`; the log file keeps every line the tools printed."""

    def __init__(self, log_path: Path, *, store_root: Path, verbose: bool = False, keep_work: bool = False,
                 out: TextIO | None = None) -> None:
        self.log_path = log_path
        self.store_root = store_root
        self.verbose = verbose
        self.keep_work = keep_work
        self.out = out or sys.stderr
        self._tail: deque[str] = deque(maxlen=_TAIL_LINES)

    def execute(self, plan: BuildPlan) -> None:
        started = time.monotonic()
        self.execute_steps(plan.steps, plan.work_dir, "build")
        self._say(f"built {plan.output} in {time.monotonic() - started:.0f} s (log: {self.log_path})")

    def execute_base(self, plan: BasePlan) -> None:
        self.execute_steps(plan.steps, None, "base")

    def execute_steps(self, steps: tuple[Step, ...], work_dir: str | None, phase: str) -> None:
        """Run `steps` in order; a failure runs the step's cleanup and removes `work_dir` (unless keep_work)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "a", encoding="utf-8") as log:
            self._log = log
            total = len(steps)
            for number, step in enumerate(steps, 1):
                try:
                    self._run_step(step, f"{phase} {number}/{total}")
                except BaseException:
                    self._fail(work_dir, step)
                    raise

    # -- steps ------------------------------------------------------------------------------------

    def _run_step(self, step: Step, position: str) -> None:
        label = f"[{position}] {step.title}"
        if step.lock is None:
            self._run_unlocked(step, label)
            return
        from envbuild.store.locks import entry_lock

        kind, name = step.lock
        with entry_lock(self.store_root, kind, name, on_wait=lambda message: self._say(f"{label}: {message}")):
            self._run_unlocked(step, label)

    def _run_unlocked(self, step: Step, label: str) -> None:
        if step.skip_if_exists and os.path.exists(step.skip_if_exists):
            self._say(f"{label}: cached")
            self._log.write(f"\n=== {label}: cached ({step.skip_if_exists})\n")
            return
        self._log.write(f"\n=== {label}\n")
        self._log.flush()
        started = time.monotonic()
        with Progress(label, self.out, enabled=not self.verbose) as self._progress:
            if self.verbose:
                self._say(f"{label} ...")
            for action in step.actions:
                self._log.write(f"$ {redact(action.describe())}\n")
                self._log.flush()
                self._do(step, action)
        self._say(f"{label}: done in {time.monotonic() - started:.1f} s")

    def _fail(self, work_dir: str | None, step: Step) -> None:
        for action in step.cleanup:
            try:
                self._do(step, action)
            except Exception as exc:  # noqa: BLE001 - cleanup must not hide the original failure
                self._log.write(f"cleanup failed: {exc}\n")
        if work_dir is None:
            pass
        elif self.keep_work:
            self._say(f"kept the work directory for inspection: {work_dir}")
        else:
            shutil.rmtree(work_dir, ignore_errors=True)
        self._log.flush()

    def _say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    # -- actions ----------------------------------------------------------------------------------

    def _do(self, step: Step, action: Action) -> None:
        handler = _ACTION_HANDLERS.get(type(action))
        if handler is None:  # pragma: no cover - the Action union is closed
            raise TypeError(f"unknown action {action!r}")
        handler(self, step, action)

    def _check_reachable(self, step: Step, action: CheckReachable) -> None:
        from envbuild.build.reachable import unreachable

        started = time.monotonic()
        missing = unreachable(action.checks, action.timeout_s)
        for url, what in action.checks:
            self._log.write(f"{'UNREACHABLE' if any(m[0] == url for m in missing) else 'reachable'}: {url} ({what})\n")
        if missing:
            lines = "\n".join(f"  - {redact(url)} ({what}): {why}" for url, what, why in missing)
            raise StepFailed(
                f"step {step.name!r}: the build needs network sources this machine cannot reach "
                f"(checked in {time.monotonic() - started:.1f} s, before downloading anything):\n{lines}",
                action.fix or "build where these hosts answer, or through a proxy (https_proxy)",
            )

    def _check_torch_family(self, step: Step, action: CheckTorchFamily) -> None:
        from envbuild.build.familycheck import check_torch_family

        self._log.write(check_torch_family(action) + "\n")

    def _write_file(self, step: Step, action: WriteFile) -> None:
        atomic_write(action.path, action.content, mode=action.mode)

    def _merge_json(self, step: Step, action: MergeJson) -> None:
        path = Path(action.path)
        data = {}
        if path.exists():
            try:
                data = json.loads(path.read_text(encoding="utf-8") or "{}")
            except json.JSONDecodeError:
                data = {}  # the base's labels file is unreadable; ours replaces it
        data.update(dict(action.values))
        mode = path.stat().st_mode & 0o7777 if path.exists() else 0o644
        atomic_write(action.path, json.dumps(data, indent=2, sort_keys=True) + "\n", mode=mode)

    def _copy_tree(self, step: Step, action: CopyTree) -> None:
        self._run(step, Run(action.argv()))

    def _copy_file(self, step: Step, action: CopyFile) -> None:
        if os.path.isdir(action.src):
            # --remove-destination: existing files are replaced, never written through (they may
            # be hard links into a store layer).
            self._run(step, Run(("cp", "-a", "--reflink=auto", "--remove-destination", "-T", action.src, action.dest)))
        else:
            partial = f"{action.dest}.envbuild-partial"
            shutil.copy2(action.src, partial)
            os.replace(partial, action.dest)
        if action.mode is not None:
            os.chmod(action.dest, action.mode)

    def _make_dirs(self, step: Step, action: MakeDirs) -> None:
        for path in action.paths:
            os.makedirs(path, exist_ok=True)

    def _touch(self, step: Step, action: Touch) -> None:
        for path in action.paths:
            Path(path).touch()

    def _remove(self, step: Step, action: Remove) -> None:
        for path in action.paths:
            if os.path.islink(path) or os.path.isfile(path):
                os.unlink(path)
            elif os.path.isdir(path):
                shutil.rmtree(path)

    def _rename(self, step: Step, action: Rename) -> None:
        os.replace(action.src, action.dest)

    def _snapshot_tree(self, step: Step, action: SnapshotTree) -> None:
        Path(action.dest).write_text(json.dumps(file_states(action.path)), encoding="utf-8")

    def _guard_tree(self, step: Step, action: GuardTree) -> None:
        before = json.loads(Path(action.snapshot).read_text(encoding="utf-8"))
        after = file_states(action.path)
        changed = sorted(name for name, state in before.items() if list(after.get(name, state)) != list(state))
        if changed:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(action.invalidate)
            shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
            self._say(f"warning: the installer wrote through hard links into {action.path} ({shown}); "
                      f"that layer is marked incomplete and will be rebuilt when needed")

    def _clamp_times(self, step: Step, action: ClampTimes) -> None:
        clamp_times(action.path, action.epoch)

    def _record_digest(self, step: Step, action: RecordDigest) -> None:
        from envbuild.treedigest import main as record_digest

        record_digest([action.path, action.dest])

    def _write_wrappers(self, step: Step, action: WriteRunWrappers) -> None:
        from envbuild.launch.wrappers import render_wrapper, wrapped_commands
        from envbuild.recipes.load import load_recipe

        entries = [*_venv_commands(action.venv_bin), *action.extra_commands]
        recipe = load_recipe(action.system)
        dest = Path(action.dest)
        dest.mkdir(parents=True, exist_ok=True)
        names, kept = [], []
        for name in wrapped_commands(entries):
            target = dest / name
            if not is_replaceable_wrapper(target):
                kept.append(name)  # someone else's file: never overwrite it
                continue
            atomic_write(target, render_wrapper(name, action.image, recipe, action.runtime_name, overlays=action.overlays),
                         mode=0o755)
            names.append(name)
        self._log.write(f"wrote {len(names)} wrappers: {' '.join(names)}\n")
        if kept:
            self._say(f"warning: kept existing files in {dest} that envbuild did not write: {' '.join(kept)}")

    def _run(self, step: Step, action: Run) -> None:
        env = dict(os.environ)
        env.update(dict(action.env))
        self._tail.clear()
        try:
            process = subprocess.Popen(
                action.argv, env=env, cwd=action.cwd, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
            )
        except FileNotFoundError:
            raise StepFailed(
                f"step {step.name!r}: {action.argv[0]} is not installed (or not on PATH)",
                _install_hint(action.argv[0]),
            ) from None
        assert process.stdout is not None
        for raw in process.stdout:
            line = clean_line(raw)
            self._log.write(line + "\n")
            self._tail.append(line)
            if self.verbose:
                self.out.write(line + "\n")
                self.out.flush()
            elif line.strip() and getattr(self, "_progress", None) is not None:
                self._progress.update(line)
        code = process.wait()
        self._log.flush()
        if code != 0:
            tail = "\n".join("    " + redact(x) for x in self._tail)
            raise StepFailed(
                f"step {step.name!r} failed: {Path(action.argv[0]).name} exited with status {code}\n"
                f"  command: {redact(action.describe())}\n  last lines of output:\n{tail}",
                f"read the full log {self.log_path}; rerun with -v to watch the tools' output",
            )


# Action type -> the executor's method that carries it out (the Action union is closed: one entry each).
_ACTION_HANDLERS: dict[type, Callable[[BuildExecutor, Step, Any], None]] = {
    CheckReachable: BuildExecutor._check_reachable, CheckTorchFamily: BuildExecutor._check_torch_family,
    Run: BuildExecutor._run, WriteFile: BuildExecutor._write_file, MergeJson: BuildExecutor._merge_json,
    CopyTree: BuildExecutor._copy_tree, CopyFile: BuildExecutor._copy_file, MakeDirs: BuildExecutor._make_dirs,
    Touch: BuildExecutor._touch, Remove: BuildExecutor._remove, Rename: BuildExecutor._rename,
    SnapshotTree: BuildExecutor._snapshot_tree, GuardTree: BuildExecutor._guard_tree,
    ClampTimes: BuildExecutor._clamp_times, RecordDigest: BuildExecutor._record_digest,
    WriteRunWrappers: BuildExecutor._write_wrappers,
}


def file_states(root: str) -> dict[str, tuple[int, int]]:
    """relative path -> (mtime in ns, size) of every regular file under `root` (lstat, no symlinks)."""
    states: dict[str, tuple[int, int]] = {}
    prefix = len(root.rstrip("/")) + 1
    for directory, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(directory, name)
            info = os.lstat(path)
            if stat.S_ISREG(info.st_mode):
                states[path[prefix:]] = (info.st_mtime_ns, info.st_size)
    return states


def clamp_times(root: str, epoch: int) -> None:
    """Times later than `epoch` become `epoch`, without following symlinks (children before parents:
    changing a directory's entries never touches its own times, but keep the order obvious)."""
    for directory, dirs, files in os.walk(root, topdown=False):
        for name in (*files, *dirs):
            path = os.path.join(directory, name)
            info = os.lstat(path)
            if info.st_mtime > epoch or info.st_atime > epoch:
                os.utime(path, (min(info.st_atime, epoch), min(info.st_mtime, epoch)), follow_symlinks=False)
    info = os.lstat(root)
    if info.st_mtime > epoch:
        os.utime(root, (min(info.st_atime, epoch), epoch), follow_symlinks=False)


def _venv_commands(venv_bin: str) -> list[str]:
    """Executables in the venv's bin/: from a sandbox directory, or read from a finished image (a
    cached image reused for a new output has no sandbox)."""
    if os.path.isdir(venv_bin):
        return [e.name for e in os.scandir(venv_bin) if os.access(e.path, os.X_OK) and not e.is_dir()]
    from envbuild.inventory.overlay import is_overlay_file

    if is_overlay_file(venv_bin):  # a stored overlay: its root is the venv
        from envbuild.inventory.squashfs import Squashfs
        from envbuild.inventory.trees import SquashfsTree

        with Squashfs(venv_bin) as fs:
            children = SquashfsTree(fs).children("/bin") or {}
        return [name for name, kind in children.items() if kind in ("file", "symlink")]
    from envbuild.inventory.image import open_image
    from envbuild.spec.model import VENV_PREFIX

    with open_image(venv_bin) as image:
        children = image.tree.children(f"{VENV_PREFIX}/bin") or {}
    return [name for name, kind in children.items() if kind in ("file", "symlink")]


def is_replaceable_wrapper(path: Path) -> bool:
    """A wrapper may replace `path` only when nothing is there or envbuild wrote it."""
    from envbuild.launch.wrappers import GENERATED_MARK

    if not path.exists() and not path.is_symlink():
        return True
    if path.is_symlink() or not path.is_file():
        return False
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return GENERATED_MARK in handle.read(1024)
    except OSError:
        return False


def _install_hint(program: str) -> str:
    name = Path(program).name
    if name == "debootstrap":
        return "install debootstrap (apt-get install debootstrap), or use a docker://, oras:// or localimage: base"
    if name in ("apptainer", "singularity"):
        return "load or install apptainer/singularity (provision/install.sh on a test machine)"
    return f"install {name} or fix PATH"


def ensure_can_write(path: Path) -> None:
    directory = path.parent
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EnvbuildError(f"cannot create output directory {directory}: {exc.strerror}", "choose another -o path") from None
    if not os.access(directory, os.W_OK):
        raise EnvbuildError(f"cannot write to {directory}", "choose an output path you can write (-o)")
