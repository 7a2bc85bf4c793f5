"""`envbuild build SPEC` from start to end: picks the session for the spec's kind (pip image, venv overlay,
conda), settles the lock first (SPEC.lock read and decided once, after uv's conventions, by
envbuild.builder.sessions.lockdecision; installed or resolved again by envbuild.builder.sessions.buildlock), hands the session
the lock so read (it reads no lock file itself), then builds or prints the plan.

The lock is settled here, outside the sessions, because resolving one runs `envbuild lock`'s own session
(envbuild.builder.sessions.imagelock), which is made of the build session's parts."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO, cast

from envbuild.shared.errors import UsageError

if TYPE_CHECKING:
    from envbuild.builder.sessions.buildrequest import BuildOptions
    from envbuild.builder.sessions.buildsession import Session
    from envbuild.envspec.loadspec import LoadedSpec


@dataclass(frozen=True)
class DryRun:
    """A dry run's plan, and the error the real build would stop with where the plan knows it will (a conda
    build whose Miniforge license is not accepted): shown after the plan, with the build's exit status."""

    text: str
    stop: UsageError | None = None


def build_spec(spec: Path, *, output: Path | None, locked: bool, frozen: bool, upgrade: bool, compression: str,
               layered: bool | None, cache_dir: Path | None, dry_run: bool, verbose: bool, quiet: bool,
               heartbeat_s: float | None, keep_work: bool, log_path: Path | None, system: str | None,
               accept_licenses: bool, source_date_epoch: int | None, out: TextIO) -> DryRun | None:
    """`envbuild build SPEC`: the spec read (its warnings on `out`, with the build's progress), the output named
    (./NAME.sif, or ./NAME.sqsh for a spec with overlay:), then built (None) or, with dry_run, the plan."""
    from envbuild.builder.sessions.buildrequest import BuildOptions
    from envbuild.envspec.loadspec import load_build_input
    from envbuild.lock.policy import LockFlags

    LockFlags(locked=locked, frozen=frozen, upgrade=upgrade).check()  # before anything is read
    out = cast("TextIO", _Said(out))  # a stream that keeps what it is given
    loaded = load_build_input(spec, system=system, accept_licenses=accept_licenses)
    out.write("".join(f"warning: {warning.render()}\n" for warning in loaded.warnings))
    suffix, what = (".sqsh", "overlay") if loaded.spec.overlay is not None else (".sif", "image")
    output = (output or Path(f"{loaded.spec.name}{suffix}")).absolute()
    if output.suffix != suffix:
        raise UsageError(f"output {output} does not end in {suffix}", f"name the {what} <something>{suffix}")
    if output.is_dir():
        raise UsageError(f"output {output} is a directory", f"give a file path ending in {suffix}")
    options = BuildOptions(
        output=output, keep_work=keep_work, verbose=verbose, locked=locked, frozen=frozen, upgrade=upgrade,
        quiet=quiet, heartbeat_s=heartbeat_s, compression=compression, layered=layered,
        cache_dir=cache_dir.absolute() if cache_dir else None, log_path=log_path, source_date_epoch=source_date_epoch,
    )
    if not dry_run:
        from envbuild.commands.uptodate import note_lock_before
        from envbuild.lock.lockmodel import lock_path_for

        note_lock_before(str(lock_path_for(loaded.path).absolute()))
    text = run_build(loaded, options, out, dry_run=dry_run)
    if text is None:
        return None
    if loaded.spec.conda is None:
        return DryRun(text)
    from envbuild.builder.sessions.condasession import license_stop

    return DryRun(text, license_stop(loaded))


class _Said:
    """The build's progress stream, kept as it is written: an up-to-date verdict is recorded with what the
    command printed before it (envbuild.commands.uptodate), for the next identical command to print."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.text: list[str] = []

    def write(self, text: str) -> int:
        self.text.append(text)
        return self.out.write(text)

    def flush(self) -> None:
        self.out.flush()

    def __getattr__(self, name: str) -> object:  # isatty, fileno, encoding: the stream's own
        return getattr(self.out, name)


def _remember_if_up_to_date(session: Session, said: _Said) -> None:
    """A verdict whose result line is the last thing printed is recorded (nothing after it: no ./envrun.yaml
    update, no note), so the light check prints exactly what this command printed."""
    if session.up_to_date is None:
        return
    from envbuild.commands.uptodate import remember_verdict

    result, inputs = session.up_to_date
    text = "".join(said.text)
    last = text.rstrip("\n").rpartition("\n")[2]
    if last.startswith(result + " (") and text.endswith(" s)\n"):
        remember_verdict(inputs, text[: len(text) - len(last) - 1], result)


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
    if isinstance(out, _Said):
        _remember_if_up_to_date(session, out)
    return None
