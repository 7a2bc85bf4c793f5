"""What `envbuild build` does with SPEC.lock, after envbuild.builder.sessions.lockdecision read and decided it once:
installs the lock read (--dry-run says which case applies and writes nothing), or resolves again, keeping
the old lock's pins, and rewrites it. The resolution (resolve_spec_lock, which `envbuild lock` runs too:
envbuild.commands.lock) is uv on the host for an image spec (envbuild.builder.sessions.imagelock), pip in the base
for an overlay spec (envbuild.builder.sessions.overlaylock)."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, TextIO

from envbuild.builder.sessions.lockdecision import installed_lock, previous_lock, settle_lock, write_lock
from envbuild.lock.lockmodel import LoadedLock

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from envbuild.builder.sessions.buildrequest import BuildOptions
    from envbuild.envspec.loadspec import LoadedSpec
    from envbuild.lock.lockmodel import Lock


def dry_run_lock(loaded: LoadedSpec, options: BuildOptions, *, overlay: bool) -> tuple[str, LoadedLock | None]:
    """The comment line saying which lock case applies, and the lock to plan with; nothing is written."""
    settled = settle_lock(loaded, options.lock_flags, overlay=overlay)
    return settled.note, installed_lock(loaded, settled) if settled.installs else None


def lock_for_build(loaded: LoadedSpec, options: BuildOptions, out: TextIO, *, overlay: bool,
                   while_resolving: Callable[[LoadedLock], None] | None = None) -> LoadedLock | None:
    """The lock this build installs (None: it resolves from the spec), made or refreshed when stale.
    `while_resolving` is given the stale lock just before it is resolved again (envbuild.builder.sessions.prefetch)."""
    from envbuild.builder.sessions.localarch import check_spec_architecture

    settled = settle_lock(loaded, options.lock_flags, overlay=overlay)  # refuses --locked/--frozen without a lock
    check_spec_architecture(loaded)  # a spec for a machine this one cannot build for is refused before any lock talk
    decision = settled.decision

    def say(text: str) -> None:
        if not options.quiet:
            print(text, file=out, flush=True)

    if settled.installs:
        installed = installed_lock(loaded, settled)
        say(decision.message)
        return installed
    if decision.action == "unlocked":
        if settled.state.lockable:
            say(f"note: {decision.message}")
        return None
    say(decision.message)
    out = _WarningsOnly(out) if options.quiet else out  # -q: what changed in the lock is not the result
    previous = previous_lock(settled.file, out)
    if previous is not None and while_resolving is not None and not decision.upgrade:
        while_resolving(settled.file.loaded())
    lock = resolve_spec_lock(loaded, previous, overlay=settled.overlay, upgrade=decision.upgrade, upgrade_packages=(),
                             cache_dir=options.cache_dir, verbose=options.verbose, out=out, quiet=options.quiet)
    return LoadedLock(lock, write_lock(loaded, settled.file, lock, out, for_build=True), settled.file.path)


def resolve_spec_lock(loaded: LoadedSpec, previous: Lock | None, *, overlay: bool, upgrade: bool,
                      upgrade_packages: tuple[str, ...], cache_dir: Path | None, verbose: bool, out: TextIO,
                      quiet: bool) -> Lock:
    """The spec's lock resolved now, nothing written: by uv on the host for an image spec
    (envbuild.builder.sessions.imagelock), by pip in the base for an overlay spec (envbuild.builder.sessions.overlaylock)."""
    if overlay:
        from envbuild.builder.sessions.overlaylock import resolve_overlay_lock

        return resolve_overlay_lock(loaded, previous, upgrade=upgrade, upgrade_packages=upgrade_packages,
                                    cache_dir=cache_dir, verbose=verbose, out=out, quiet=quiet)
    from envbuild.builder.sessions.imagelock import resolve_lock

    return resolve_lock(loaded, previous, upgrade=upgrade, upgrade_packages=upgrade_packages, cache_dir=cache_dir,
                        verbose=verbose, out=out, quiet=quiet)


class _WarningsOnly(io.StringIO):
    """An output that passes on only warnings (print() writes a line's text and its newline apart); a
    StringIO for its type only: nothing is kept in it."""

    def __init__(self, out: TextIO) -> None:
        super().__init__()
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
