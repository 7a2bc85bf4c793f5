"""The executor's file-system actions: write, merge, copy, remove, rename, copy trees (recording a snapshot
meanwhile), guard trees (the states the hard-link guard compares: file_states), clamp times, record digests,
write run wrappers. Each is `handler(executor, step, action)`, as in
envbuild.builder.execute.executor's handler table; they use only the executor's `_run`, `_say` and `_log`."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import subprocess
import threading
from pathlib import Path
from typing import Any, Protocol, TextIO

from envbuild.builder.execute.wrapperfiles import write_run_wrappers
from envbuild.builder.plan.actions import (
    CheckLinksInside,
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
    Step,
    Touch,
    WriteFile,
    WriteRunWrappers,
    inside_of,
)
from envbuild.imagetree import intree
from envbuild.shared import safefiles
from envbuild.shared.safefiles import atomic_write


class FileActionExecutor(Protocol):
    """What the file actions use of the executor that runs them (envbuild.builder.execute.executor.BuildExecutor):
    its step log, its tool runner, its lasting lines, the hard-link guards it joins and its store's root."""

    guards: list[tuple[threading.Thread, list[str]]]
    store_root: Path

    @property
    def _log(self) -> TextIO: ...
    def _run(self, step: Step, action: Run) -> None: ...
    def _say(self, text: str, *, result: bool = False) -> None: ...


def write_file(executor: FileActionExecutor, step: Step, action: WriteFile) -> None:
    if action.root is not None:
        intree.write_in_tree(action.root, inside_of(action.root, action.path), action.content, action.mode)
        return
    atomic_write(action.path, action.content, mode=action.mode)


def merge_json(executor: FileActionExecutor, step: Step, action: MergeJson) -> None:
    if action.root is not None:
        _merge_json_in_tree(action, action.root)
        return
    path = Path(action.path)
    if not path.exists() and action.base and os.path.exists(action.base):
        path = Path(action.base)
    data = {}
    if path.exists():
        try:
            data = json.loads(path.read_text(encoding="utf-8") or "{}")
        except json.JSONDecodeError:
            data = {}  # the base's labels file is unreadable; ours replaces it
    data.update(dict(action.values))
    mode = path.stat().st_mode & 0o7777 if path.exists() else 0o644
    atomic_write(action.path, json.dumps(data, indent=2, sort_keys=True) + "\n", mode=mode)


def _merge_json_in_tree(action: MergeJson, root: str) -> None:
    """MergeJson of a file in an image tree: read (and the base's, while there is none) resolved inside the
    trees, so that a labels.json linked to a host file is never read into the image; written new in place."""
    inside = inside_of(root, action.path)
    found = intree.read_in_tree(root, inside)
    if found is None and action.base is not None:
        found = (intree.read_in_tree(action.base_root, inside_of(action.base_root, action.base)) if action.base_root
                 else _read_host_file(action.base))
    data: dict[str, Any] = {}
    if found is not None:
        with contextlib.suppress(ValueError):  # unreadable (not JSON, not UTF-8): ours replaces it
            loaded = json.loads(found[0].decode("utf-8") or "{}")
            data = loaded if isinstance(loaded, dict) else {}
    data.update(dict(action.values))
    intree.write_in_tree(root, inside, json.dumps(data, indent=2, sort_keys=True) + "\n",
                         found[1] if found is not None else 0o644)


def _read_host_file(path: str) -> tuple[bytes, int] | None:
    try:
        return Path(path).read_bytes(), os.stat(path).st_mode & 0o7777
    except (FileNotFoundError, NotADirectoryError):
        return None


def check_links_inside(executor: FileActionExecutor, step: Step, action: CheckLinksInside) -> None:
    from envbuild.shared.errors import EnvbuildError

    for inside in action.paths:
        found = intree.link_leading_out(action.root, inside)
        if found is not None:
            link, target = found
            raise EnvbuildError(
                f"step {step.name!r}: {action.what} has {link} as a symbolic link to {target}, outside the tree: "
                f"the container runtime writes its files at {inside} through it, onto this machine",
                f"make {link} a directory or file of the tree itself (not a link out of it), or use another base")


def planned_copy_argv(action: CopyTree) -> tuple[str, ...]:
    """The copy that runs: a hard-linked copy where this user may link the source's files, else a full one."""
    return safefiles.linked_copy_argv(action.src, action.dest) if action.hardlink else action.argv()


def copy_tree(executor: FileActionExecutor, step: Step, action: CopyTree) -> None:
    snapshot = action.snapshot
    argv = planned_copy_argv(action)
    if argv != action.argv():
        executor._log.write(f"  {action.src} belongs to another user, whose files the kernel lets no one else hard-link "
                            f"(fs.protected_hardlinks): copied instead\n")
    if snapshot is None:
        executor._run(step, Run(argv))
        return
    # The record walks the tree in a thread (lstat releases the GIL) while cp runs as its own process.
    failure: list[BaseException] = []

    def record() -> None:
        try:
            safefiles.write_file(snapshot, json.dumps(file_states(action.src)))
        except BaseException as exc:  # noqa: BLE001 - raised in the step's thread below
            failure.append(exc)

    recorder = threading.Thread(target=record, name="envbuild-snapshot", daemon=True)
    recorder.start()
    try:
        executor._run(step, Run(argv))
    finally:
        recorder.join()
    if failure:
        raise failure[0]


def copy_file(executor: FileActionExecutor, step: Step, action: CopyFile) -> None:
    if action.dest_root is not None:
        intree.copy_into_tree(action.src, action.dest_root, inside_of(action.dest_root, action.dest), action.mode)
        return
    if action.unless_exists and os.path.exists(action.dest):
        executor._log.write(f"  {action.dest} was made ahead\n")
        return
    if action.ahead:
        from envbuild.builder.execute.diskspace import DiskFull

        try:
            _copy_file(executor, step, action)
        except DiskFull as no_room:
            executor._log.write(f"  left to the output step: {no_room}\n")
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):  # a full disk, or a quota (common on HPC)
                raise
            executor._log.write(f"  left to the output step: {exc}\n")
        return
    _copy_file(executor, step, action)


def _copy_file(executor: FileActionExecutor, step: Step, action: CopyFile) -> None:
    if os.path.isdir(action.src):
        # --remove-destination: existing files are replaced, never written through (they may
        # be hard links into a store layer).
        executor._run(step, Run(("cp", "-a", "--reflink=auto", "--remove-destination", "-T", action.src, action.dest)))
    else:
        check_room(executor, step, action.src, action.dest)
        # Never half a file at the destination, and never through a link planted there (the output's directory
        # may be a group project's): safefiles copies to an unpredictable name and renames it over the target.
        safefiles.copy_file(action.src, action.dest, mode=_private_mode(executor, action))
        return
    if action.mode is not None:
        safefiles.set_mode(action.dest, action.mode)  # never the mode of what a link planted there points at


def _private_mode(executor: FileActionExecutor, action: CopyFile) -> int | None:
    """The copy's mode: `action.mode` (None: the source's), less the permissions of the readers who cannot read
    one of the image's files[] sources on this host (envbuild.envspec.loadspec.hidden_from). safefiles.copy_file gives
    the bits to a file only its owner could read while it was written."""
    if not action.private_sources:
        return action.mode
    from envbuild.envspec.loadspec import hidden_from
    from envbuild.envspec.specmodel import GROUP, OTHERS

    hidden = 0
    for source, readers in action.private_sources:
        hidden |= hidden_from(source) & readers
    if not hidden:
        return action.mode
    mode = (stat.S_IMODE(os.stat(action.src).st_mode) if action.mode is None else action.mode) & ~hidden
    who = "others" if hidden == OTHERS else "the group and others" if hidden == GROUP | OTHERS else "the group"
    executor._log.write(f"  {action.dest}: mode {mode:04o}: the image holds files[] sources {who} cannot read\n")
    return mode


def check_room(executor: FileActionExecutor, step: Step, src: str, dest: str) -> None:
    """Before a big copy (an image to the output): is there room? A clear error instead of a half copy."""
    from envbuild.builder.execute.diskspace import disk_full_error, free_and_total

    size = os.path.getsize(src)
    try:
        free = free_and_total(os.path.dirname(os.path.abspath(dest)))[0]
    except OSError:
        return
    if size > free:
        raise disk_full_error(step.name, dest, size, f"the image {src}", before=True)


def make_dirs(executor: FileActionExecutor, step: Step, action: MakeDirs) -> None:
    if action.root is not None:
        # `mkdir -p` makes the tree's root too, when it is not there yet (a debootstrap tree on a cold store):
        # the root is a path of envbuild's (store, work dir), not of the image, so it is made by its host path,
        # and a link planted there (whence the tree's writes would be resolved) is refused even when it is there.
        make_host_dirs(action.root, None, store_root=executor.store_root)
    for path in action.paths:
        if action.root is not None:
            intree.make_dirs_in_tree(action.root, inside_of(action.root, path), action.mode)
        else:
            make_host_dirs(path, action.mode, store_root=executor.store_root)


def touch(executor: FileActionExecutor, step: Step, action: Touch) -> None:
    for path in action.paths:
        if action.root is not None:
            intree.touch_in_tree(action.root, inside_of(action.root, path))
        else:
            safefiles.touch(path)


def remove(executor: FileActionExecutor, step: Step, action: Remove) -> None:
    if action.root is not None:
        for path in action.paths:
            intree.remove_in_tree(action.root, inside_of(action.root, path))
        return
    for path in action.paths:
        if os.path.islink(path) or os.path.isfile(path):
            safefiles.remove_file(path)
        elif os.path.isdir(path):
            remove_tree(path)


def remove_tree(path: str) -> None:
    """rm -rf: faster than shutil.rmtree on a build sandbox of 46,000 hard links; --one-file-system refuses to
    descend into anything mounted inside."""
    try:
        done = subprocess.run(("rm", "-rf", "--one-file-system", "--", path), stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, check=False)
    except FileNotFoundError:
        done = None
    if done is None or done.returncode != 0 or os.path.lexists(path):
        safefiles.remove_tree(path)  # no rm here, or it failed: the descriptor walk raises a precise OSError


def rename(executor: FileActionExecutor, step: Step, action: Rename) -> None:
    if action.src_root is not None:
        intree.rename_out_of_tree(action.src_root, inside_of(action.src_root, action.src), action.dest)
        return
    safefiles.rename_path(action.src, action.dest)


def guard_tree(executor: FileActionExecutor, step: Step, action: GuardTree) -> None:
    """Started in a thread: its verdict concerns the parent layer, for later builds, so the rest of this build
    need not wait for the walk of the parent's 46,000 paths; `join_guards` waits at the end of the steps
    (or before a failed step's cleanup) and says what it found."""
    def check() -> None:
        with contextlib.suppress(OSError, AttributeError):
            # This thread only (Linux nice is per thread): beside it run the build's tests, its longest path.
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
        try:
            before = json.loads(Path(action.snapshot).read_text(encoding="utf-8"))
            after = file_states(action.path)
            changed = sorted(name for name, state in before.items() if list(after.get(name, state)) != list(state))
            if changed:
                safefiles.remove_file(action.invalidate)
                shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
                said.append(f"warning: the installer wrote through hard links into {action.path} ({shown}); "
                            f"that layer is marked incomplete and will be rebuilt when needed")
        except OSError as exc:
            said.append(f"warning: could not check {action.path} for writes through hard links: {exc}")
        finally:
            safefiles.remove_file(action.snapshot)

    said: list[str] = []
    thread = threading.Thread(target=check, name="envbuild-guard", daemon=True)
    executor.guards.append((thread, said))
    thread.start()


def join_guards(executor: FileActionExecutor) -> None:
    """Wait for the guards started by guard_tree and say their warnings."""
    guards, executor.guards = executor.guards, []
    for thread, said in guards:
        thread.join()
        for line in said:
            executor._say(line)


def clamp_times(executor: FileActionExecutor, step: Step, action: ClampTimes) -> None:
    clamp_tree_times(action.path, action.epoch)


def record_digest(executor: FileActionExecutor, step: Step, action: RecordDigest) -> None:
    from envbuild.shared.treedigest import main as record_digest

    record_digest([action.path, action.dest, action.reuse or "", action.files_out or ""])


def write_wrappers(executor: FileActionExecutor, step: Step, action: WriteRunWrappers) -> None:
    names, kept = write_run_wrappers(action)
    executor._log.write(f"wrote {len(names)} wrappers: {' '.join(names)}\n")
    if kept:
        executor._say(f"warning: kept existing files in {action.dest} that envbuild did not write: {' '.join(kept)}")


# --- whole trees and directories -----------------------------------------------------------------


def make_host_dirs(path: str, mode: int | None, *, store_root: Path | None) -> None:
    """`mkdir -p path`; with `mode`, every directory it creates gets exactly `mode` (not less the umask), the
    existing ones keep theirs. Never through a link someone else planted: below the store (a group store's
    members may create names in its directories and in a build's), from the store's own directories down by
    descriptor (envbuild.store.places.make_store_dirs); elsewhere (a directory of the user's), its existing
    part resolved as safefiles.open_dir resolves a user's path, the rest made beneath it by descriptor."""
    from envbuild.store.places import below_store, make_store_dirs

    if store_root is not None and below_store(store_root, path) is not None:
        make_store_dirs(store_root, path, mode=mode)
        return
    existing, missing = os.path.abspath(path), []
    while not os.path.lexists(existing):
        existing, name = os.path.split(existing)
        missing.append(name)
    fd = safefiles.open_dir(existing)
    try:
        os.close(safefiles.make_dirs_at(fd, "/".join(reversed(missing)), mode=mode, where=existing))
    finally:
        os.close(fd)


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


def clamp_tree_times(root: str, epoch: int) -> None:
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
