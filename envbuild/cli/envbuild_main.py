"""`envbuild`: build and inspect container environments from a YAML spec."""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import click

from envbuild import __version__
from envbuild.cli.common import reports_errors
from envbuild.cli.inventory_cmds import diff_command, inspect_command, packages_command
from envbuild.errors import UsageError

if TYPE_CHECKING:
    from envbuild.buildplan import BuildPlan
    from envbuild.specload import LoadedSpec

# The build machinery (pydantic models, planners) is imported inside the commands that use it:
# `envbuild packages` over many images should not pay for it at every start.


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="envbuild")
def main() -> None:
    """Build reproducible Apptainer/Singularity environments for ML on HPC systems."""


@main.command()
@click.argument("spec", type=click.Path(path_type=Path))
@click.option("-o", "--output", type=click.Path(path_type=Path), help="image to write (default: ./<name>.sif)")
@click.option("--dry-run", is_flag=True, help="print the build plan and run nothing")
@click.option("-v", "--verbose", is_flag=True, help="stream the tools' output")
@click.option("--keep-work", is_flag=True, help="keep the build sandbox (also after a failure) for inspection")
@click.option("--log", "log_path", type=click.Path(path_type=Path), help="log file (default: <output>.build.log)")
@reports_errors
def build(spec: Path, output: Path | None, dry_run: bool, verbose: bool, keep_work: bool, log_path: Path | None) -> None:
    """Build SPEC (a YAML file) into a SIF image."""
    from envbuild.buildexec import BuildExecutor, ensure_can_write
    from envbuild.render import render_build_plan
    from envbuild.specload import load_spec

    loaded = load_spec(spec)
    output = (output or Path(f"{loaded.spec.name}.sif")).absolute()
    if output.suffix != ".sif":
        raise UsageError(f"output {output} does not end in .sif", "name the image <something>.sif")
    if output.is_dir():
        raise UsageError(f"output {output} is a directory", "give a file path ending in .sif")
    plan = _plan(loaded, output, keep_work=keep_work, need_runtime=not dry_run)
    if dry_run:
        click.echo(render_build_plan(plan), nl=False)
        return
    ensure_can_write(output)
    log_path = (log_path or output.with_name(output.name + ".build.log")).absolute()
    if log_path.exists():
        log_path.unlink()  # one log per build; the previous build's log is not appended to
    click.echo(f"building {loaded.spec.name} -> {output}", err=True)
    BuildExecutor(log_path, verbose=verbose, keep_work=keep_work).execute(plan)


def _plan(loaded: LoadedSpec, output: Path, *, keep_work: bool, need_runtime: bool) -> BuildPlan:
    from envbuild.buildplan import BuildRequest, plan_build
    from envbuild.hostfacts import gather_host_facts
    from envbuild.recipes import load_recipe

    spec = loaded.spec
    recipe = load_recipe(spec.system)
    facts = gather_host_facts(need_runtime=need_runtime)
    base_path = fingerprint = None
    if spec.base.kind == "localimage":
        base = loaded.resolve_host_path(spec.base.ref)
        base_path = str(base)
        if base.is_file():
            stat = base.stat()
            fingerprint = f"{stat.st_size}-{stat.st_mtime_ns}"
    request = BuildRequest(
        spec=spec, spec_text=loaded.text, spec_sha256=loaded.sha256, spec_dir=str(loaded.directory.absolute()),
        recipe=recipe, facts=facts, output=str(output), build_id=f"{os.getpid()}-{uuid.uuid4().hex[:6]}",
        base_path=base_path, base_fingerprint=fingerprint or "", as_root=facts.as_root, keep_work=keep_work,
    )
    return plan_build(request)


@main.command()
@click.argument("specs", nargs=-1, required=True, type=click.Path(path_type=Path))
@reports_errors
def validate(specs: tuple[Path, ...]) -> None:
    """Check spec files; print each problem with file:line and how to fix it."""
    from envbuild.errors import SpecError
    from envbuild.specload import load_spec

    failed = 0
    for path in specs:
        try:
            loaded = load_spec(path)
            click.echo(f"{path}: ok ({loaded.spec.name}, system {loaded.spec.system})")
        except SpecError as exc:
            failed += 1
            click.echo(exc.render(), err=True)
    if failed:
        sys.exit(2)


@main.command()
def schema() -> None:
    """Print the JSON Schema of the spec format (for editors)."""
    from envbuild.schema import spec_json_schema

    click.echo(json.dumps(spec_json_schema(), indent=2))


for _command in (packages_command, diff_command, inspect_command):
    main.add_command(_command)

if __name__ == "__main__":
    main()
