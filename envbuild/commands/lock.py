"""`envbuild lock SPEC`: every Python package of the spec pinned, with hashes, into SPEC.lock next to it. The old
lock is read once and its pins kept unless upgrading; the resolution is the one a build runs for a stale lock
(envbuild.builder.sessions.buildlock.resolve_spec_lock), and SPEC.lock is written only when its content changes."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path
    from typing import TextIO

    from envbuild.envspec.loadspec import LoadedSpec


def lock_spec(spec: Path, *, upgrade: bool, upgrade_packages: tuple[str, ...], cache_dir: Path | None, verbose: bool,
              out: TextIO) -> Path:
    """Read SPEC (its warnings on `out`, with the resolution's progress) and write its lock; the lock file's path."""
    from envbuild.envspec.loadspec import load_spec

    loaded = load_spec(spec)
    out.write("".join(f"warning: {warning.render()}\n" for warning in loaded.warnings))
    return run_lock(loaded, upgrade=upgrade, upgrade_packages=upgrade_packages, cache_dir=cache_dir, verbose=verbose,
                    out=out)


def run_lock(loaded: LoadedSpec, *, upgrade: bool, upgrade_packages: tuple[str, ...], cache_dir: Path | None,
             verbose: bool, out: TextIO) -> Path:
    """Resolve the loaded spec, keeping the old lock's pins unless upgrading, and write SPEC.lock (only when its
    content changes); the old lock is read once."""
    from envbuild.builder.sessions.buildlock import resolve_spec_lock
    from envbuild.builder.sessions.lockdecision import previous_lock, read_lock_file, write_lock

    file = read_lock_file(loaded.path)
    lock = resolve_spec_lock(loaded, previous_lock(file, out), overlay=loaded.spec.overlay is not None, upgrade=upgrade,
                             upgrade_packages=upgrade_packages, cache_dir=cache_dir, verbose=verbose, out=out,
                             quiet=False)
    write_lock(loaded, file, lock, out)
    return file.path
