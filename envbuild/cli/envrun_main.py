"""`envrun`: run a command (torchrun, python, ...) inside an envbuild image, optionally under srun.

envrun starts before every job step, so its own start-up is part of every launch (issue goal: under
50 ms over a bare `apptainer exec`). That is why this CLI uses argparse (about 7 ms to import) rather
than click (about 35 ms) like `envbuild` does, and why only light modules are imported on the way to
exec: recipes come from their JSON cache, pydantic is loaded only to validate a changed file.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from envbuild import __version__
from envbuild.errors import EnvbuildError, UsageError

EPILOG = """examples:
  envrun --image env.sif srun torchrun train.py --lr 3e-4     # one launcher per node
  envrun --image env.sif srun python train.py                 # one task per GPU
  envrun --image env.sif torchrun train.py                    # this node only
  envrun --image env.sif python -c 'import torch; print(torch.__version__)'

Data directories and HF_HOME/TORCH_HOME can be set in ~/.config/envbuild/envrun.yaml
(binds: [...], env: {...}, systems: {NAME: {binds, env}}); $ENVRUN_CONFIG names another file.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="envrun", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG,
        description="Run COMMAND inside IMG with the system's binds, environment and CPU binding.",
    )
    parser.add_argument("--version", action="version", version=f"envrun, version {__version__}")
    parser.add_argument("--image", default=os.environ.get("ENVRUN_IMAGE"), metavar="IMG",
                        help="the .sif image (default: $ENVRUN_IMAGE)")
    parser.add_argument("--bind", "-B", dest="binds", action="append", default=[], metavar="SRC[:DEST[:OPTS]]",
                        help="extra bind mount (repeatable)")
    parser.add_argument("--system", metavar="NAME", help="system recipe (default: $ENVBUILD_SYSTEM or detected)")
    parser.add_argument("--dry-run", action="store_true", help="print the launch as a runnable shell script and run nothing")
    parser.add_argument("--explain", action="store_true", help="say why each setting was chosen (on stderr), then run")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="srun ..., torchrun ..., python ... or any program")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        launch(args)
    except EnvbuildError as exc:
        print(exc.render(), file=sys.stderr)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)


def launch(args: argparse.Namespace) -> None:
    from envbuild.launchplan import LaunchRequest, plan_launch
    from envbuild.runtime import require_runtime
    from envbuild.systems import resolve_recipe

    if not args.image:
        raise UsageError("no image given", "pass --image IMG.sif or set ENVRUN_IMAGE")
    image_path = Path(args.image).absolute()
    if not image_path.exists():
        raise UsageError(f"image {args.image} does not exist", "build it with `envbuild build SPEC -o IMG.sif` or fix the path")
    recipe, why = resolve_recipe(args.system, os.environ)
    settings = _config_for(recipe.name)
    all_binds = (*settings.binds, *args.binds)
    for bind in all_binds:
        source = bind.split(":", 1)[0]
        if not Path(source).exists():
            raise UsageError(f"bind source {source} does not exist", "check the path given to --bind (or in the envrun config)")
    missing = tuple(b for b in (*recipe.binds, *recipe.multinode_binds) if not Path(b.split(":", 1)[0]).exists())
    plan = plan_launch(LaunchRequest(
        command=tuple(args.command), image=str(image_path), recipe=recipe, runtime=require_runtime(probe=False),
        cwd=os.getcwd(), binds=all_binds, env=tuple(settings.env.items()), environ=dict(os.environ),
        missing_recipe_binds=missing, system_reason=why,
    ))
    if args.dry_run:
        sys.stdout.write(plan.script())
        return
    if args.explain:
        sys.stderr.write("".join(f"envrun: {reason}\n" for reason in plan.reasons))
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
    from envbuild.envrunconfig import EMPTY, config_path, load_envrun_config

    if not config_path(os.environ).exists() and not os.environ.get("ENVRUN_CONFIG"):
        return EMPTY
    return load_envrun_config().for_system(system)


if __name__ == "__main__":
    main()
