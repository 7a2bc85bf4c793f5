"""`envbuild import` and `envbuild export`: Apptainer definition files and Dockerfiles to and from specs."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from envbuild.cli.common import reports_errors
from envbuild.cli.options import OUTPUT, SYSTEM, click_option
from envbuild.shared.errors import UsageError

if TYPE_CHECKING:
    from envbuild.convert.formats import RecipeFormat


@click.command("import")
@click.argument("recipe", type=click.Path(path_type=Path))
@click_option(OUTPUT, type=click.Path(path_type=Path), note="the spec", default_help="print it")
@click.option("--format", "fmt", type=click.Choice(["def", "dockerfile"]),
              help="what RECIPE is (default: told from its name and first line)")
@click_option(SYSTEM, default="local", note="written into the spec as its system:", default_help="local")
@click.option("--build-arg", "build_arg", multiple=True, metavar="NAME=VALUE",
              help="a value for a build argument (%arguments / {{ NAME }} of a definition file, ARG of a "
                   "Dockerfile), over the file's default; repeat for more")
@reports_errors
def import_command(recipe: Path, output: Path | None, fmt: str | None, system: str, build_arg: tuple[str, ...]) -> None:
    """Write a spec from an Apptainer/Singularity definition file or a Dockerfile.

    What a spec cannot express (runscripts, CMD, USER...) is listed in a comment at the top of the spec;
    pip installs a spec cannot express stay in post as written. Build arguments are substituted (a used one
    without a value is an error: give it with --build-arg); of a multi-stage file the last stage is imported,
    and copies from an earlier stage are refused."""
    from envbuild.convert.buildargs import parse_build_args
    from envbuild.convert.deffile import import_def
    from envbuild.convert.dockerfile import import_dockerfile
    from envbuild.convert.formats import detect_format
    from envbuild.envspec.loadspec import load_spec_text
    from envbuild.envspec.specmodel import spec_name_for

    output = _file_or_stdout(output)
    if not recipe.is_file():
        raise UsageError(f"{recipe} does not exist or is not a file", "give the path of a .def file or a Dockerfile")
    text = recipe.read_text(encoding="utf-8", errors="replace")
    kind = fmt or detect_format(text, recipe.name)
    name = spec_name_for((output or recipe).stem if (output or recipe).suffix else (output or recipe).name)
    prefix = os.path.relpath(recipe.absolute().parent, (output.absolute().parent if output else Path.cwd()))
    prefix = "" if prefix == "." else prefix
    result = (import_def if kind == "def" else import_dockerfile)(
        text, name, src_prefix=prefix, build_args=parse_build_args(build_arg), source=str(recipe))
    result.spec["system"] = system
    rendered = result.render(str(recipe))
    load_spec_text(rendered, str(output or "<imported spec>"))  # a spec envbuild cannot load is a bug here, not the user's
    if output is None:
        click.echo(rendered, nl=False)
        return
    from envbuild.shared.safefiles import write_file

    write_file(output, rendered)  # a link planted at the name is replaced; a device (/dev/null) written in place
    click.echo(f"wrote {output}" + (f" ({len(result.notes)} note(s) at the top: review them)" if result.notes else ""), err=True)


@click.command("export")
@click.argument("spec", type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["def", "dockerfile"]), required=True,
              help="def: an Apptainer definition file (apptainer build --fakeroot); dockerfile: a Dockerfile")
@click_option(OUTPUT, type=click.Path(path_type=Path), note="the definition file or Dockerfile", default_help="print it")
@click.option("--no-lock", is_flag=True, help="ignore the lock next to SPEC; install the spec's requirements unpinned")
@reports_errors
def export_command(spec: Path, fmt: RecipeFormat, output: Path | None, no_lock: bool) -> None:
    """Write SPEC as a definition file or a Dockerfile, for building without envbuild.

    Carries the base, env, labels, files, post, tests and the Python packages, pinned to SPEC's lock
    (SPEC.lock) when there is one."""
    from envbuild.convert.export import ExportInput, render_export
    from envbuild.envspec.loadspec import load_spec
    from envbuild.lock.lockmodel import lock_path_for
    from envbuild.recipes.loadrecipe import load_recipe

    output = _file_or_stdout(output)
    loaded = load_spec(spec, check_host=False)
    pins, lock_source = None, None
    lock_file = lock_path_for(spec)
    if not no_lock and lock_file.is_file():
        from envbuild.lock.fileformat import read_lock

        lock = read_lock(lock_file.read_text(encoding="utf-8"), str(lock_file))
        pins = {package.name: package.version for package in lock.packages}
        lock_source = str(lock_file)
    torch_index = None
    if loaded.spec.python.pytorch is not None:
        torch_index = loaded.spec.python.pytorch.index_url or load_recipe(loaded.spec.system).pytorch_index_for(
            loaded.spec.python.pytorch.wheel_tag)
    text = render_export(ExportInput(loaded.spec, str(spec), torch_index, pins, lock_source), fmt)
    if output is None:
        sys.stdout.write(text)
        return
    from envbuild.shared.safefiles import write_file

    write_file(output, text)
    click.echo(f"wrote {output}", err=True)


def _file_or_stdout(output: Path | None) -> Path | None:
    """-o -: standard output, as everywhere in envbuild (None: print it)."""
    return None if output is not None and str(output) == "-" else output
