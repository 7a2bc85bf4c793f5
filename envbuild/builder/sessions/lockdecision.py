"""SPEC.lock in one command, read once and decided once: the result every part of the build takes.

`settle_lock` opens the lock file next to the spec once (not at all when there is none), parses it once,
finds why it no longer fits the spec, and lets envbuild.lock.policy decide what applies after uv's
conventions (a current lock is installed exactly, a stale one resolved again and rewritten, --locked /
--frozen / --upgrade). Its SettledLock is passed down: `installed_lock` checks the lock it installs (still
the spec's, its torch family, its architecture against the system's) and gives the LoadedLock that the
build request and the sessions take; envbuild.builder.sessions.buildlock carries a resolution out from the same
file (`previous_lock`: its pins kept; `write_lock`: its text compared with), as `envbuild lock` does.
Nothing else reads or writes the lock file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from envbuild.shared.errors import EnvbuildError

if TYPE_CHECKING:
    from envbuild.envspec.loadspec import LoadedSpec
    from envbuild.lock.lockmodel import LoadedLock, Lock
    from envbuild.lock.policy import LockDecision, LockFlags, LockState


@dataclass(frozen=True)
class LockFile:
    """SPEC.lock as read, once per command: its text (None: no file, or it could not be read) and the
    lock parsed from it (None: no file, or `error` says why it does not read)."""

    path: Path
    exists: bool
    text: str | None = None
    lock: Lock | None = None
    error: EnvbuildError | OSError | None = None

    def loaded(self) -> LoadedLock:
        """The lock to install; the reading's own error when it does not read."""
        from envbuild.lock.lockmodel import LoadedLock

        if self.error is not None:
            raise self.error
        if self.lock is None or self.text is None:
            # the policy refuses this case first, with the spec's name in its fix
            raise EnvbuildError(f"there is no lock file {self.path}", "make it with: envbuild lock SPEC")
        return LoadedLock(self.lock, self.text, self.path)


def read_lock_file(spec_path: Path) -> LockFile:
    """The lock file next to the spec, opened once (not at all when there is none) and parsed once."""
    from envbuild.lock.fileformat import read_lock
    from envbuild.lock.lockmodel import lock_path_for

    path = lock_path_for(spec_path)
    if not path.is_file():
        return LockFile(path, exists=False)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        return LockFile(path, exists=True, error=exc)
    try:
        return LockFile(path, exists=True, text=text, lock=read_lock(text, str(path)))
    except EnvbuildError as exc:
        return LockFile(path, exists=True, text=text, error=exc)


@dataclass(frozen=True)
class SettledLock:
    """What a build does with SPEC.lock (`settle_lock`): the file as read, what the policy was told (the
    state, with why the lock is stale) and what it decided."""

    file: LockFile
    state: LockState
    decision: LockDecision
    overlay: bool  # an overlay spec's lock: resolved by pip in the base, not by uv on the host

    @property
    def reasons(self) -> tuple[str, ...]:
        """Why the lock no longer fits the spec, one line each; empty when it does (or there is none)."""
        return self.state.stale

    @property
    def installs(self) -> bool:
        """The build installs the lock file as it is (no resolution)."""
        return self.decision.action in ("use", "use-unchecked")

    @property
    def note(self) -> str:
        """--dry-run's comment line saying which lock case applies."""
        then = " (the steps below are planned without it; the build installs the new lock)" \
            if self.decision.action == "resolve" else ""
        return f"# lock: {self.decision.message}{then}\n"


def torch_index_for(loaded: LoadedSpec) -> str | None:
    """The PyTorch variant's wheel index, which the lock records among its inputs."""
    from envbuild.recipes.loadrecipe import load_recipe

    if loaded.spec.python.pytorch is None or loaded.spec.overlay is not None:
        return None  # without PyTorch the recipe has nothing to say; an overlay keeps the base's torch
    return loaded.spec.python.pytorch_index_url(load_recipe(loaded.recipe_ref))


def settle_lock(loaded: LoadedSpec, flags: LockFlags, *, overlay: bool) -> SettledLock:
    """Read SPEC.lock once and decide what the build does with it; refuses --locked/--frozen without a lock."""
    from envbuild.lock.lockmodel import lock_inputs
    from envbuild.lock.policy import LockState, decide_lock
    from envbuild.lock.staleness import stale_reasons

    file = read_lock_file(loaded.path)
    stale: tuple[str, ...] = ()
    if file.lock is not None:
        stale = tuple(stale_reasons(file.lock, lock_inputs(loaded.spec, torch_index_for(loaded))))
    state = LockState(str(file.path), exists=file.exists, readable=file.error is None, stale=stale,
                      packages=len(file.lock.packages) if file.lock is not None else 0,
                      lockable=bool(loaded.spec.python.requirements()))
    return SettledLock(file, state, decide_lock(state, flags, spec_path=str(loaded.path)), overlay)


def installed_lock(loaded: LoadedSpec, settled: SettledLock) -> LoadedLock:
    """The lock file the decision installs, checked before anything is fetched or installed (a lock from an
    older envbuild was never checked): still the spec's (--locked refuses a stale one with its reasons), its
    torch family, its architecture against the system's; --frozen: its torch family only."""
    from envbuild.builder.sessions.localarch import check_lock_arch
    from envbuild.inventory.installedtorch import check_locked_family

    found = settled.file.loaded()
    checked = settled.decision.action == "use"
    if checked and settled.reasons:
        raise EnvbuildError(
            f"--locked: {found.path} is stale for {loaded.path}:\n" + "\n".join(f"  - {r}" for r in settled.reasons),
            f"refresh it with `envbuild lock {loaded.path}` (keeps the other pins) and commit it, or build without --locked",
        )
    check_locked_family(found.lock.packages, str(found.path), then=f"run `envbuild lock {loaded.path}` again")
    if checked:
        check_lock_arch(loaded, found.lock, found.path)
    return found


def load_fresh_lock(loaded: LoadedSpec) -> LoadedLock:
    """--locked's lock for a session the command gave none: the lock next to the spec, checked to still
    describe the spec; a clear error otherwise."""
    from envbuild.lock.policy import LockFlags

    return installed_lock(loaded, settle_lock(loaded, LockFlags(locked=True), overlay=loaded.spec.overlay is not None))


def previous_lock(file: LockFile, out: TextIO) -> Lock | None:
    """The existing lock, whose pins are kept when resolving again; None when there is none or it does not
    parse (said on `out`). A file that cannot be read at all is the error it gave."""
    if isinstance(file.error, OSError):
        raise file.error
    if isinstance(file.error, EnvbuildError):
        print(f"note: ignoring the unreadable old lock ({file.error.message}); resolving from scratch", file=out)
    return file.lock


def write_lock(loaded: LoadedSpec, old: LockFile, lock: Lock, out: TextIO, *, for_build: bool = False) -> str:
    """Write `lock` over `old` when its text changes, saying what changed; returns the lock's text.

    for_build: a build goes on from the resolved lock when the spec's directory is read-only (a shared
    checkout), with a warning, instead of failing after the resolution."""
    from envbuild.lock.fileformat import render_lock

    path = old.path
    text = render_lock(lock, spec_path_for_comment=_relative(loaded.path))
    for line in _changes(old.lock, lock):
        print(line, file=out)
    count = len(lock.packages)
    if text == old.text:
        print(f"{path} is unchanged ({count} packages)", file=out)
        return text
    from envbuild.shared.safefiles import atomic_write

    try:
        atomic_write(path, text)
    except OSError as exc:
        if not for_build:
            raise
        print(f"warning: cannot write {path} ({exc.strerror}); building from the lock resolved now, "
              f"which is kept in the image's record", file=out, flush=True)
        return text
    then = f"later builds install exactly it (envbuild build {loaded.path})" if for_build else \
        f"build it with: envbuild build {loaded.path}"
    print(f"wrote {path} ({count} packages); {then}", file=out, flush=True)
    return text


def _changes(previous: Lock | None, lock: Lock) -> list[str]:
    if previous is None:
        return []
    old = {p.name: p.version for p in previous.packages}
    new = {p.name: p.version for p in lock.packages}
    lines = [f"  + {n} {new[n]}" for n in sorted(new.keys() - old.keys())]
    lines += [f"  - {n} {old[n]}" for n in sorted(old.keys() - new.keys())]
    lines += [f"  ~ {n} {old[n]} -> {new[n]}" for n in sorted(new.keys() & old.keys()) if old[n] != new[n]]
    return lines


def _relative(path: Path) -> str:
    try:
        return str(path.absolute().relative_to(Path.cwd()))
    except ValueError:
        return str(path)
