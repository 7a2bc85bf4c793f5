"""`envbuild`: build and inspect container environments from a YAML spec."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from envbuild import __version__
from envbuild.cli.common import checked_value, reports_errors
from envbuild.cli.lazygroup import LazyGroup
from envbuild.cli.options import BUILD_LOG, CACHE_DIR, DRY_RUN, JSON, OUTPUT, QUIET, SYSTEM, VERBOSE, click_option
from envbuild.commands.validate import VALIDATION_JSON
from envbuild.shared.errors import EXIT_PROBLEMS, SpecProblem, UsageError, exit_status_help
from envbuild.sif.compression import DEFAULT_COMPRESSION

# The build machinery (pydantic models, planners) is imported inside the commands that use it:
# `envbuild packages` over many images should not pay for it at every start.


# The other commands' modules load when they run (envbuild.cli.lazygroup): not at every `envbuild build`.
LAZY_COMMANDS = {
    "packages": "envbuild.cli.inventory_cmds:packages_command", "diff": "envbuild.cli.inventory_cmds:diff_command",
    "inspect": "envbuild.cli.inventory_cmds:inspect_command", "catalogue": "envbuild.cli.inventory_cmds:catalogue_command",
    "cache": "envbuild.cli.cache_cmds:cache_group", "import": "envbuild.cli.convert_cmds:import_command",
    "export": "envbuild.cli.convert_cmds:export_command",
}


def exit_status_epilog(problems: str = "a failed build, what a check found, an image that could not be read") -> str:
    """The exit contract (envbuild.shared.errors) as a click epilog; \\b keeps click from rewrapping its lines."""
    return "\b\n" + exit_status_help(problems)


@click.group(cls=LazyGroup, lazy_subcommands=LAZY_COMMANDS, context_settings={"help_option_names": ["-h", "--help"]},
             epilog=exit_status_epilog())
@click.version_option(__version__, prog_name="envbuild")
def main() -> None:
    """Build reproducible Apptainer/Singularity environments for ML on HPC systems."""


def _heartbeat(value: str) -> float:
    """--heartbeat in the one duration grammar (envbuild.shared.durations); a bare number is seconds, 0 never."""
    from envbuild.shared.durations import parse_duration

    return float(parse_duration(value, "--heartbeat", bare="s", allow_zero=True))


def _compression(value: str) -> str:
    from envbuild.sif.compression import check_compression

    check_compression(value)  # a UsageError naming the accepted values
    return value


_cache_dir_option = click_option(CACHE_DIR, type=click.Path(path_type=Path), envvar="ENVBUILD_CACHE_DIR")


@main.command(epilog=exit_status_epilog("the build failed"))
@click.argument("spec", type=click.Path(path_type=Path))
@click_option(OUTPUT, type=click.Path(path_type=Path), note="the image (.sif), or the venv overlay (.sqsh) of a spec "
              "with overlay:", default_help="./<name>.sif; ./<name>.sqsh for a spec with overlay:")
@click.option("--locked", is_flag=True, help="install exactly SPEC.lock (the lock file next to SPEC); fail if it is "
                                             "missing or stale. Without a flag a current lock is installed and a "
                                             "stale one resolved again and rewritten (as uv sync does)")
@click.option("--frozen", is_flag=True, help="install SPEC.lock as it is, without checking it against the spec")
@click.option("--upgrade", is_flag=True, help="resolve every package anew (newest allowed) and rewrite SPEC.lock")
@click.option("--compression", default=DEFAULT_COMPRESSION, show_default=True, callback=checked_value(_compression), metavar="NAME[:LEVEL]",
              help="squashfs compression: gzip (every runtime reads it; level 6 squashes 3.5x faster than 9 for +1 % size), "
                   "zstd (apptainer >= 1.4 only; 15x faster, faster start-up), lz4, xz; gzip:N, zstd:N set the level")
@click.option("--layered", is_flag=True,
              help="write only the difference to a stored image (a package added, the user layer changed) as a SIF "
                   "squashfs overlay partition over that image's squashfs: seconds instead of a full squash. Runs where "
                   "the runtime mounts SIF overlay partitions (apptainer/SingularityCE as root or setuid with overlay "
                   "enabled; see docs/concepts/layered-images.md); checked with the local runtime, else the whole tree is squashed")
@_cache_dir_option
@click_option(DRY_RUN, note="it prints the build plan")
@click_option(VERBOSE)
@click_option(QUIET)
@click.option("--heartbeat", callback=checked_value(_heartbeat), envvar="ENVBUILD_HEARTBEAT", metavar="DURATION",
              help="without a terminal (batch logs, CI): print `still running: STEP, N s` this often, e.g. 30s or "
                   "2m (a bare number is seconds; default 30s; 0: never; env ENVBUILD_HEARTBEAT)")
@click.option("--keep-work", is_flag=True, help="keep the build sandbox (also after a failure) for inspection")
@click_option(BUILD_LOG, "log_path", type=click.Path(path_type=Path))
@click_option(SYSTEM, note="for a conda env file (a spec names its own)")
@click.option("--accept-licenses", is_flag=True, help="conda env files: accept the Miniforge license (cotainr --accept-licenses)")
@reports_errors
def build(spec: Path, output: Path | None, locked: bool, frozen: bool, upgrade: bool, compression: str, layered: bool,
          cache_dir: Path | None, dry_run: bool, verbose: bool, quiet: bool, heartbeat: float | None, keep_work: bool,
          log_path: Path | None, system: str | None, accept_licenses: bool) -> None:
    """Build SPEC (a YAML file) into a SIF image, or, when SPEC has an `overlay:` section, into a squashfs
    venv overlay (NAME.sqsh) on its base image: run it with envrun --image BASE.sif --overlay NAME.sqsh.

    Layers are kept in the store: an unchanged spec returns at once, a changed package list reuses the
    base and installs only the difference on the nearest env layer, a changed user layer (env, files,
    post, tests) reuses the whole Python environment.

    SPEC may also be a conda environment file (environment.yml: name, channels, dependencies with a
    pip: list), or a spec with a `conda:` section: cotainr builds those, from the system recipe's base
    image (`--system lumi-g`), and envbuild adds its record, labels and the spec's env/files/tests.

    SPEC.lock next to SPEC (uv's conventions): a current lock is installed exactly; when the spec changed
    since, the build says what changed, resolves again and rewrites it; without one it resolves from the
    spec (`envbuild lock SPEC` makes one). --locked refuses a stale lock, --frozen skips the check,
    --upgrade re-resolves everything and writes the lock."""
    from envbuild.builder.sessions.buildrequest import BuildOptions
    from envbuild.commands.build import run_build
    from envbuild.envspec.loadspec import load_build_input
    from envbuild.lock.policy import LockFlags

    LockFlags(locked=locked, frozen=frozen, upgrade=upgrade).check()  # before anything is read
    if quiet and verbose:
        raise UsageError("-q and -v exclude each other", "-q: errors and the result only; -v: every tool's output")
    loaded = load_build_input(spec, system=system, accept_licenses=accept_licenses)
    warn_about(loaded.warnings)
    suffix, what = (".sqsh", "overlay") if loaded.spec.overlay is not None else (".sif", "image")
    output = (output or Path(f"{loaded.spec.name}{suffix}")).absolute()
    if output.suffix != suffix:
        raise UsageError(f"output {output} does not end in {suffix}", f"name the {what} <something>{suffix}")
    if output.is_dir():
        raise UsageError(f"output {output} is a directory", f"give a file path ending in {suffix}")
    options = BuildOptions(
        output=output, keep_work=keep_work, verbose=verbose, locked=locked, frozen=frozen, upgrade=upgrade,
        quiet=quiet, heartbeat_s=heartbeat, compression=compression, layered=layered,
        cache_dir=cache_dir.absolute() if cache_dir else None, log_path=log_path,
        source_date_epoch=_source_date_epoch(),
    )
    plan = run_build(loaded, options, sys.stderr, dry_run=dry_run)
    if plan is not None:
        click.echo(plan, nl=False)


def warn_about(warnings: tuple[SpecProblem, ...]) -> None:
    """A spec's located warnings (secrets it would bake into the image), on stderr; the command goes on."""
    for warning in warnings:
        click.echo(f"warning: {warning.render()}", err=True)


def _source_date_epoch() -> int | None:
    """SOURCE_DATE_EPOCH (reproducible-builds.org): the time recorded in the image and its file system."""
    value = os.environ.get("SOURCE_DATE_EPOCH")
    if not value:
        return None
    if not value.isdigit():
        raise UsageError(f"SOURCE_DATE_EPOCH={value!r} is not a number of seconds since 1970",
                         "set it to e.g. $(git log -1 --format=%ct), or unset it")
    return int(value)


@main.command(epilog=exit_status_epilog("the lock could not be made"))
@click.argument("spec", type=click.Path(path_type=Path))
@click.option("--upgrade", is_flag=True, help="re-resolve every package to the newest allowed version")
@click.option("--upgrade-package", "-P", "upgrade_packages", multiple=True, metavar="NAME",
              help="re-resolve only NAME (repeatable); every other pin is kept")
@_cache_dir_option
@click_option(VERBOSE)
@reports_errors
def lock(spec: Path, upgrade: bool, upgrade_packages: tuple[str, ...], cache_dir: Path | None, verbose: bool) -> None:
    """Pin every Python package of SPEC, with hashes, into SPEC.lock next to it.

    Resolves with uv for the base image's Python and platform and the variant's PyTorch index, and
    records the base's content digest and the recipe. Re-locking keeps existing pins unless --upgrade
    or --upgrade-package asks otherwise. Then `envbuild build SPEC` installs exactly it (--locked: and
    refuses a stale lock). For an overlay spec, pip in
    the base pins exactly what the overlay adds to it."""
    from envbuild.builder.sessions.buildlock import run_lock
    from envbuild.envspec.loadspec import load_spec

    loaded = load_spec(spec)
    warn_about(loaded.warnings)
    path = run_lock(loaded, upgrade=upgrade, upgrade_packages=upgrade_packages,
                    cache_dir=cache_dir.absolute() if cache_dir else None, verbose=verbose, out=sys.stderr)
    click.echo(str(path))


@main.command(epilog=exit_status_epilog("IMAGE (or SPEC, or BASE) does not match: each difference is listed"))
@click.argument("image", type=click.Path(path_type=Path))
@click.argument("spec", type=click.Path(path_type=Path), required=False)
@click.option("--base", type=click.Path(path_type=Path), metavar="BASE.sif",
              help="for a venv overlay (.sqsh): check that BASE is the image it was made for and provides what it kept")
@click_option(JSON, "as_json", note='{"image", "spec", "ok", "passed": [...], "differences": [{"area", "message"}]}')
@reports_errors
def verify(image: Path, spec: Path | None, base: Path | None, as_json: bool) -> None:
    """Check that IMAGE matches its build record and lock, and, given SPEC, that spec (and SPEC.lock).

    IMAGE may be a venv overlay (.sqsh): its record's added packages against its venv, its lock (less
    what it kept from the base), and with --base the base it was made for.

    Exit status 0: everything matches; 1: something differs (each difference is listed)."""
    from envbuild.inventory.overlayfile import is_overlay_file
    from envbuild.verify.imagecheck import render_verification, verification_to_dict, verify_image

    if is_overlay_file(str(image)):
        from envbuild.verify.overlaycheck import verify_overlay

        result = verify_overlay(image, spec, base)
    elif base is not None:
        raise UsageError(f"--base is for venv overlays; {image} is not one (not a squashfs file)",
                         "leave out --base: an image carries its own base")
    else:
        result = verify_image(image, spec)
    if as_json:
        click.echo(json.dumps(verification_to_dict(result), indent=2))
    else:
        click.echo(render_verification(result), nl=False)
    if not result.ok:
        sys.exit(EXIT_PROBLEMS)


@main.command(epilog=exit_status_epilog("a file has a problem (each is listed)"))
@click.argument("specs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click_option(SYSTEM, note="for a conda env file, as `envbuild build --system` (a spec names its own)")
@click_option(JSON, "as_json", note=VALIDATION_JSON)
@reports_errors
def validate(specs: tuple[Path, ...], system: str | None, as_json: bool) -> None:
    """Check spec files (or conda env files, as `envbuild build` reads them, their pip list included);
    print each problem with file:line and how to fix it."""
    from envbuild.commands.validate import validate_file, validation_to_dict

    results = []
    for path in specs:
        result = validate_file(path, system)
        results.append(result)
        if as_json:
            continue
        if result.ok:
            click.echo(f"{path}: ok ({result.name}, system {result.system})")
        else:
            click.echo(result.rendered_problems, err=True)
        for warning in result.rendered_warnings:
            click.echo(warning, err=True)
    if as_json:
        click.echo(json.dumps(validation_to_dict(results), indent=2))
    if not all(result.ok for result in results):
        sys.exit(EXIT_PROBLEMS)


@main.command()
def schema() -> None:
    """Print the JSON Schema of the spec format (for editors)."""
    from envbuild.envspec.jsonschema import spec_json_schema

    click.echo(json.dumps(spec_json_schema(), indent=2))


if __name__ == "__main__":
    main()
