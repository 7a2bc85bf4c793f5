"""The lock a build installs: reads SPEC.lock, lets envbuild.lock.policy decide (uv's conventions: a current
lock is installed exactly, a stale one is resolved again and rewritten, --locked / --frozen / --upgrade),
and carries that decision out. `--dry-run` only says which case applies."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from envbuild.errors import EnvbuildError

if TYPE_CHECKING:
    from envbuild.app.build.request import BuildOptions
    from envbuild.lock.model import Lock
    from envbuild.lock.policy import LockDecision, LockState
    from envbuild.spec.load import LoadedSpec

LoadedLock = tuple["Lock", str, Path]  # the lock, its text, its file


def read_lock_state(loaded: LoadedSpec, *, overlay: bool) -> tuple[LockState, Lock | None]:
    """What is next to the spec: the lock file, whether it reads, and why it no longer fits the spec."""
    from envbuild.app.build.request import torch_index_for
    from envbuild.lock.fileformat import read_lock
    from envbuild.lock.model import lock_inputs, lock_path_for
    from envbuild.lock.policy import LockState
    from envbuild.lock.staleness import stale_reasons

    path = lock_path_for(loaded.path)
    lockable = bool(loaded.spec.python.requirements())
    if not path.is_file():
        return LockState(str(path), exists=False, lockable=lockable), None
    try:
        lock = read_lock(path.read_text(encoding="utf-8"), str(path))
    except (EnvbuildError, OSError):
        return LockState(str(path), exists=True, readable=False, lockable=lockable), None
    torch_index = None if overlay else torch_index_for(loaded)
    stale = tuple(stale_reasons(lock, lock_inputs(loaded.spec, torch_index)))
    return LockState(str(path), exists=True, stale=stale, packages=len(lock.packages), lockable=lockable), lock


def decide(loaded: LoadedSpec, options: BuildOptions, *, overlay: bool) -> tuple[LockDecision, LockState]:
    from envbuild.lock.policy import LockFlags, decide_lock

    state, _ = read_lock_state(loaded, overlay=overlay)
    flags = LockFlags(locked=options.locked, frozen=options.frozen, upgrade=options.upgrade)
    return decide_lock(state, flags, spec_path=str(loaded.path)), state


def dry_run_lock(loaded: LoadedSpec, options: BuildOptions, *, overlay: bool) -> tuple[str, LoadedLock | None]:
    """The comment line saying which lock case applies, and the lock to plan with; nothing is written."""
    decision, _ = decide(loaded, options, overlay=overlay)
    lock = _load(loaded, options, decision) if decision.action in ("use", "use-unchecked") else None
    then = " (the steps below are planned without it; the build installs the new lock)" if decision.action == "resolve" else ""
    return f"# lock: {decision.message}{then}\n", lock


def lock_for_build(loaded: LoadedSpec, options: BuildOptions, out: TextIO, *, overlay: bool,
                   while_resolving: Callable[[LoadedLock], None] | None = None) -> LoadedLock | None:
    """The lock this build installs (None: it resolves from the spec), made or refreshed when stale.
    `while_resolving` is given the stale lock just before it is resolved again (envbuild.app.build.prefetch)."""
    from envbuild.app.build.imagesession import check_spec_architecture

    decision, state = decide(loaded, options, overlay=overlay)  # refuses --locked/--frozen without a lock
    check_spec_architecture(loaded)  # a spec for a machine this one cannot build for is refused before any lock talk
    say = (lambda text: None) if options.quiet else (lambda text: print(text, file=out, flush=True))
    if decision.action in ("use", "use-unchecked"):
        lock = _load(loaded, options, decision)
        say(decision.message)
        return lock
    if decision.action == "unlocked":
        if state.lockable:
            say(f"note: {decision.message}")
        return None
    say(decision.message)
    return _resolve(loaded, options, out, overlay=overlay, upgrade=decision.upgrade, while_resolving=while_resolving)


def _load(loaded: LoadedSpec, options: BuildOptions, decision: LockDecision) -> LoadedLock:
    from envbuild.app.build.request import load_fresh_lock
    from envbuild.inventory.torchfamily import check_locked_family
    from envbuild.lock.fileformat import read_lock
    from envbuild.lock.model import lock_path_for

    if decision.action == "use":
        return load_fresh_lock(loaded)  # checked again; a stale lock under --locked is refused with its reasons
    path = lock_path_for(loaded.path)
    text = path.read_text(encoding="utf-8")
    lock = read_lock(text, str(path))
    check_locked_family(lock.packages, str(path), then=f"run `envbuild lock {loaded.path}` again")
    return lock, text, path


def _resolve(loaded: LoadedSpec, options: BuildOptions, out: TextIO, *, overlay: bool, upgrade: bool,
             while_resolving: Callable[[LoadedLock], None] | None = None) -> LoadedLock:
    from envbuild.app.lock.session import read_previous_lock, resolve_lock, write_lock
    from envbuild.lock.model import lock_path_for

    path = lock_path_for(loaded.path)
    out = _WarningsOnly(out) if options.quiet else out  # -q: what changed in the lock is not the result
    previous = read_previous_lock(path, out)
    if previous is not None and while_resolving is not None and not upgrade:
        while_resolving((previous, path.read_text(encoding="utf-8"), path))
    if overlay:
        from envbuild.app.lock.overlay import resolve_overlay_lock

        lock = resolve_overlay_lock(loaded, previous, upgrade=upgrade, upgrade_packages=(), cache_dir=options.cache_dir,
                                    verbose=options.verbose, out=out, quiet=options.quiet)
    else:
        lock = resolve_lock(loaded, previous, upgrade=upgrade, upgrade_packages=(), cache_dir=options.cache_dir,
                            verbose=options.verbose, out=out, quiet=options.quiet)
    text = write_lock(loaded, path, previous, lock, out, for_build=True)
    return lock, text, path


class _WarningsOnly:
    """An output that passes on only warnings (print() writes a line's text and its newline apart)."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self._passing = False

    def write(self, text: str) -> int:
        if text == "\n":
            if self._passing:
                self.out.write(text)
            return 1
        self._passing = text.startswith("warning")
        return self.out.write(text) if self._passing else len(text)

    def flush(self) -> None:
        self.out.flush()
