"""`envbuild import` and `envbuild export` (definition files and Dockerfiles to and from specs): their options and
output; the work is in envbuild.commands.convert, the formats in envbuild.convert.formats."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from envbuild.cli.common import reports_errors
from envbuild.cli.options import OUTPUT, SYSTEM, click_option
from envbuild.convert.formats import format_names, sorted_formats


@click.command("import")
@click.argument("build_file", type=click.Path(path_type=Path))
@click_option(OUTPUT, type=click.Path(path_type=Path), note="the spec", default_help="print it")
@click.option("--format", "fmt", type=click.Choice(format_names()),
              help="what BUILD_FILE is (default: told from its name, else from its lines: Bootstrap: or FROM/ARG/RUN)")
@click_option(SYSTEM, default="local", note="written into the spec as its system:", default_help="local")
@click.option("--build-arg", "build_arg", multiple=True, metavar="NAME=VALUE",
              help="a value for a build argument (%arguments / {{ NAME }} of a definition file, ARG of a "
                   "Dockerfile), over the file's default; one the file does not have is refused; repeat for more")
@click.option("--offline", is_flag=True,
              help="do not read a Dockerfile's FROM image's config (WORKDIR, ENV) from its registry")
@reports_errors
def import_command(build_file: Path, output: Path | None, fmt: str | None, system: str,
                   build_arg: tuple[str, ...], offline: bool) -> None:
    """Write a spec from an Apptainer/Singularity definition file or a Dockerfile.

    What a spec cannot express (runscripts, CMD, USER...) is listed in a comment at the top of the spec;
    pip installs a spec cannot express stay in post as written. Build arguments are substituted (a used one
    without a value is an error: give it with --build-arg); of a multi-stage file the last stage is imported,
    and copies from an earlier stage are refused. A Dockerfile's FROM image's config is read from its registry
    (a few seconds at most; anonymous, through HTTPS_PROXY), so that its commands start in the base's WORKDIR
    and read the base's ENV as in Docker; where it cannot be read, a note says why."""
    from envbuild.commands.convert import import_build_file

    output = _file_or_stdout(output)
    imported = import_build_file(build_file, output, fmt=fmt, system=system, build_args=build_arg, offline=offline)
    if output is None:
        click.echo(imported.text, nl=False)
        return
    notes = f" ({len(imported.notes)} note(s) at the top: review them)" if imported.notes else ""
    click.echo(f"wrote {output}{notes}", err=True)


@click.command("export")
@click.argument("spec", type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(format_names()), required=True,
              help="; ".join(f"{fmt.name}: {fmt.export_help}" for fmt in sorted_formats()))
@click_option(OUTPUT, type=click.Path(path_type=Path), note="the definition file or Dockerfile", default_help="print it")
@click.option("--no-lock", is_flag=True, help="ignore the lock next to SPEC; install the spec's requirements unpinned")
@reports_errors
def export_command(spec: Path, fmt: str, output: Path | None, no_lock: bool) -> None:
    """Write SPEC as a definition file or a Dockerfile, for building without envbuild.

    Carries the base, env, labels, files, post, tests and the Python packages, pinned to SPEC's lock
    (SPEC.lock) when there is one."""
    from envbuild.commands.convert import export_spec_file

    output = _file_or_stdout(output)
    text = export_spec_file(spec, fmt, output, use_lock=not no_lock)
    if output is None:
        sys.stdout.write(text)
        return
    click.echo(f"wrote {output}", err=True)


def _file_or_stdout(output: Path | None) -> Path | None:
    """-o -: standard output, as everywhere in envbuild (None: print it)."""
    return None if output is not None and str(output) == "-" else output
