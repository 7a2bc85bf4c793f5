"""`envbuild`: build and inspect container environments from a YAML spec."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from envbuild import __version__
from envbuild.cli.common import checked_value, exit_with, reports_errors
from envbuild.cli.lazygroup import LazyGroup
from envbuild.cli.options import BUILD_LOG, CACHE_DIR, DRY_RUN, JSON, OUTPUT, QUIET, SYSTEM, VERBOSE, click_option
from envbuild.commands.validate import VALIDATION_JSON
from envbuild.shared.errors import UsageError, exit_status_help
from envbuild.sif.compression import DEFAULT_COMPRESSION

# The commands' modules (pydantic models, planners) are imported inside the commands that use them:
# `envbuild packages` over many images should not pay for the build machinery at every start.


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
              help="squashfs compression: gzip (every apptainer and singularity reads it), zstd (apptainer >= 1.4 "
                   "only; quicker to squash and to start), lz4 (quickest, largest), xz (smallest, slowest); gzip:N, "
                   "zstd:N set the level (docs/concepts/build.md)")
@click.option("--full", is_flag=True,
              help="squash the whole tree into a single-partition image, even where the difference to a stored image "
                   "could be layered over it: for an image that runs on any runtime (another site's, underlay mode)")
@click.option("--layered", is_flag=True,
              help="the default where a stored image fits (a package added, the user layer changed, the same "
                   "compression): only the difference is written, as a SIF squashfs overlay partition over that image's "
                   "squashfs, in seconds instead of a full squash; checked with the local runtime, else the whole tree "
                   "is squashed (docs/concepts/layered-images.md). Given, it also layers with SOURCE_DATE_EPOCH set and "
                   "says when no stored image fits")
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
def build(spec: Path, output: Path | None, locked: bool, frozen: bool, upgrade: bool, compression: str, full: bool,
          layered: bool, cache_dir: Path | None, dry_run: bool, verbose: bool, quiet: bool, heartbeat: float | None, keep_work: bool,
          log_path: Path | None, system: str | None, accept_licenses: bool) -> None:
    """Build SPEC (a YAML file) into a SIF image, or, when SPEC has an `overlay:` section, into a squashfs
    venv overlay (NAME.sqsh) on its base image: run it with envrun --image BASE.sif --overlay NAME.sqsh.

    Layers are kept in the store: an unchanged spec returns at once, a changed package list reuses the
    base and installs only the difference on the nearest env layer, a changed user layer (env, files,
    post, tests) reuses the whole Python environment. Where a stored image of the nearest env layer fits, only
    the difference is written over it (a layered image, checked with the local runtime); --full squashes the
    whole tree.

    SPEC may also be a conda environment file (environment.yml: name, channels, dependencies with a
    pip: list), or a spec with a `conda:` section: cotainr builds those, from the system recipe's base
    image (`--system lumi-g`), and envbuild adds its record, labels and the spec's env/files/tests.

    SPEC.lock next to SPEC (uv's conventions): a current lock is installed exactly; when the spec changed
    since, the build says what changed, resolves again and rewrites it; without one it resolves from the
    spec (`envbuild lock SPEC` makes one). --locked refuses a stale lock, --frozen skips the check,
    --upgrade re-resolves everything and writes the lock."""
    from envbuild.commands.build import build_spec

    if quiet and verbose:
        raise UsageError("-q and -v exclude each other", "-q: errors and the result only; -v: every tool's output")
    if full and layered:
        raise UsageError("--full and --layered exclude each other",
                         "--full: one squashfs of the whole tree; --layered: the difference over a stored image")
    plan = build_spec(spec, output=output, locked=locked, frozen=frozen, upgrade=upgrade, compression=compression,
                      layered=False if full else (True if layered else None),
                      cache_dir=cache_dir, dry_run=dry_run, verbose=verbose, quiet=quiet,
                      heartbeat_s=heartbeat, keep_work=keep_work, log_path=log_path, system=system,
                      accept_licenses=accept_licenses, source_date_epoch=_source_date_epoch(), out=sys.stderr)
    if plan is not None:
        click.echo(plan.text, nl=False)
        if plan.stop is not None:  # the real build would stop there: the dry run exits as it would
            raise plan.stop


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
    from envbuild.commands.lock import lock_spec

    click.echo(str(lock_spec(spec, upgrade=upgrade, upgrade_packages=upgrade_packages,
                             cache_dir=cache_dir.absolute() if cache_dir else None, verbose=verbose, out=sys.stderr)))


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
    from envbuild.commands.verify import verify as verify_image

    text, status = verify_image(image, spec, base, as_json=as_json)
    click.echo(text, nl=False)
    exit_with(status)


@main.command(epilog=exit_status_epilog("a file could not be checked (each is listed); a spec's problems exit 2, "
                                        "as from `envbuild build`"))
@click.argument("specs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click_option(SYSTEM, note="for a conda env file, as `envbuild build --system` (a spec names its own)")
@click_option(JSON, "as_json", note=VALIDATION_JSON)
@reports_errors
def validate(specs: tuple[Path, ...], system: str | None, as_json: bool) -> None:
    """Check spec files (or conda env files, as `envbuild build` reads them, their pip list included);
    print each problem with file:line and how to fix it, and exit as `envbuild build` would on them."""
    from envbuild.commands.validate import validate_file, validation_status, validation_to_dict

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
    exit_with(validation_status(results))


@main.command()
def schema() -> None:
    """Print the JSON Schema of the spec format (for editors)."""
    from envbuild.commands.validate import spec_schema_text

    click.echo(spec_schema_text(), nl=False)


if __name__ == "__main__":
    main()
