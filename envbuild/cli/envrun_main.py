"""`envrun`: run a command (torchrun, python, ...) inside an envbuild image, optionally under srun."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import click

from envbuild import __version__
from envbuild.cli.common import reports_errors
from envbuild.errors import UsageError
from envbuild.hostfacts import require_runtime
from envbuild.launchplan import LaunchRequest, plan_launch
from envbuild.systems import resolve_recipe


@click.command(context_settings={
    "help_option_names": ["-h", "--help"], "ignore_unknown_options": True, "allow_interspersed_args": False,
})
@click.version_option(__version__, prog_name="envrun")
@click.option("--image", envvar="ENVRUN_IMAGE", metavar="IMG", help="the .sif image (or $ENVRUN_IMAGE)")
@click.option("--bind", "-B", "binds", multiple=True, metavar="SRC[:DEST[:OPTS]]", help="extra bind mount (repeatable)")
@click.option("--system", metavar="NAME", help="system recipe (default: $ENVBUILD_SYSTEM or detected)")
@click.option("--dry-run", is_flag=True, help="print the launch as a runnable shell script and run nothing")
@click.option("--explain", is_flag=True, help="say why each setting was chosen (on stderr), then run")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@reports_errors
def main(image: str | None, binds: tuple[str, ...], system: str | None, dry_run: bool, explain: bool,
         command: tuple[str, ...]) -> None:
    """Run COMMAND inside IMG with the system's binds, environment and CPU binding. Examples:

    \b
      envrun --image env.sif srun torchrun train.py --lr 3e-4     # one launcher per node
      envrun --image env.sif srun python train.py                 # one task per GPU
      envrun --image env.sif torchrun train.py                    # this node only
      envrun --image env.sif python -c 'import torch; print(torch.__version__)'

    Data directories and HF_HOME/TORCH_HOME can be set in ~/.config/envbuild/envrun.yaml
    (binds: [...], env: {...}, systems: {NAME: {binds, env}}).
    """
    if not image:
        raise UsageError("no image given", "pass --image IMG.sif or set ENVRUN_IMAGE")
    image_path = Path(image).absolute()
    if not image_path.exists():
        raise UsageError(f"image {image} does not exist", "build it with `envbuild build SPEC -o IMG.sif` or fix the path")
    recipe, why = resolve_recipe(system, os.environ)
    settings = _config_for(recipe.name)
    all_binds = (*settings.binds, *binds)
    for bind in all_binds:
        source = bind.split(":", 1)[0]
        if not Path(source).exists():
            raise UsageError(f"bind source {source} does not exist", "check the path given to --bind (or in the envrun config)")
    missing = tuple(b for b in (*recipe.binds, *recipe.multinode_binds) if not Path(b.split(":", 1)[0]).exists())
    plan = plan_launch(LaunchRequest(
        command=command, image=str(image_path), recipe=recipe, runtime=require_runtime(probe=False), cwd=os.getcwd(),
        binds=all_binds, env=tuple(settings.env.items()), environ=dict(os.environ), missing_recipe_binds=missing,
        system_reason=why,
    ))
    if dry_run:
        click.echo(plan.script(), nl=False)
        return
    if explain:
        click.echo("\n".join(f"envrun: {reason}" for reason in plan.reasons), err=True)
    env = dict(os.environ)
    for name in plan.unset:
        env.pop(name, None)
    env.update(dict(plan.env))
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(plan.argv[0], list(plan.argv), env)  # noqa: S606 - argv passed as words, deliberately no shell
    except FileNotFoundError:
        raise UsageError(f"{plan.argv[0]} is not on PATH", "load Slurm / apptainer or fix PATH") from None


def _config_for(system: str) -> Any:
    """The envrun config's binds and env for `system`; validated (pydantic) only when a file exists."""
    from envbuild.envrunconfig import EMPTY, config_path

    if not config_path(os.environ).exists() and not os.environ.get("ENVRUN_CONFIG"):
        return EMPTY
    from envbuild.envrunconfig import load_envrun_config

    return load_envrun_config().for_system(system)


if __name__ == "__main__":
    main()
