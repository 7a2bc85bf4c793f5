"""`envbuild build SPEC` from start to end: picks the session for the spec's kind (pip image, venv overlay,
conda), settles the lock first (SPEC.lock read and decided once, after uv's conventions, by
envbuild.builder.sessions.lockdecision; installed or resolved again by envbuild.builder.sessions.buildlock), hands the session
the lock so read (it reads no lock file itself), then builds or prints the plan.

The lock is settled here, outside the sessions, because resolving one runs `envbuild lock`'s own session
(envbuild.builder.sessions.imagelock), which is made of the build session's parts."""

from __future__ import annotations

from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from envbuild.builder.sessions.buildrequest import BuildOptions
    from envbuild.builder.sessions.buildsession import Session
    from envbuild.envspec.loadspec import LoadedSpec


def make_session(loaded: LoadedSpec, options: BuildOptions, out: TextIO) -> Session:
    if loaded.spec.conda is not None:
        from envbuild.builder.sessions.condasession import CondaBuildSession

        return CondaBuildSession(loaded, options, out=out)
    if loaded.spec.overlay is not None:
        from envbuild.builder.sessions.overlaysession import OverlaySession

        return OverlaySession(loaded, options, out=out)
    from envbuild.builder.sessions.imagesession import BuildSession

    return BuildSession(loaded, options, out=out)


def run_build(loaded: LoadedSpec, options: BuildOptions, out: TextIO, *, dry_run: bool) -> str | None:
    """Build (None), or with dry_run the plan's text, headed by the lock case that applies."""
    from envbuild.builder.sessions.buildlock import dry_run_lock, lock_for_build
    from envbuild.builder.sessions.outputpath import ensure_can_write

    session = make_session(loaded, options, out)
    overlay = loaded.spec.overlay is not None
    if loaded.spec.conda is None:  # conda resolves a conda env itself; its session refuses the lock flags
        if dry_run:
            note, lock = dry_run_lock(loaded, options, overlay=overlay)
            session.choose_lock(lock, note)
        else:
            ensure_can_write(options.output)  # before minutes of resolving
            try:
                lock = lock_for_build(loaded, options, out, overlay=overlay,
                                      while_resolving=session.while_resolving())
            except BaseException:
                # What the session took while resolving (the parent env layer's copy, its locks) goes now,
                # not with the next build's sweep of abandoned work directories.
                session.release()
                raise
            session.choose_lock(lock)
    if dry_run:
        return session.dry_run()
    session.build()
    return None
