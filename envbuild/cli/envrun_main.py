"""`envrun`: run a command (torchrun, python, ...) inside an envbuild image, optionally under srun.

envrun starts before every job step, so its own start-up is part of every launch (issue goal: under
50 ms over a bare `apptainer exec`). Its handful of options is read by a small loop; argparse (16 ms
to import with re and enum) is only loaded for --help and for input the loop does not accept, and click
(35 ms), which `envbuild` uses, not at all. Only light modules are imported on the way to exec: recipes
come from their JSON cache, pydantic is loaded only to validate a changed file.
"""

from __future__ import annotations

import os
import sys

from envbuild import __version__
from envbuild.errors import EnvbuildError, UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from typing import Any

EPILOG = """examples:
  envrun --image env.sif srun torchrun train.py --lr 3e-4     # one launcher per node
  envrun --image env.sif srun python train.py                 # one task per GPU
  envrun --image env.sif torchrun train.py                    # this node only
  envrun --image env.sif python -c 'import torch; print(torch.__version__)'

Data directories and HF_HOME/TORCH_HOME can be set in ~/.config/envbuild/envrun.yaml
(binds: [...], env: {...}, systems: {NAME: {binds, env}}); $ENVRUN_CONFIG names another file.
"""


def build_parser() -> argparse.ArgumentParser:
    import argparse

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


class _Options:
    __slots__ = ("binds", "command", "dry_run", "explain", "image", "system")

    def __init__(self) -> None:
        self.image: str | None = os.environ.get("ENVRUN_IMAGE")
        self.binds: list[str] = []
        self.system: str | None = None
        self.dry_run = False
        self.explain = False
        self.command: list[str] = []


_WITH_VALUE = {"--image": "image", "--bind": "binds", "-B": "binds", "--system": "system"}
_FLAGS = {"--dry-run": "dry_run", "--explain": "explain"}


def parse_options(argv: list[str]) -> _Options | None:
    """envrun's options, then the command. None when the loop cannot decide (help, abbreviations, a
    missing value): argparse then parses, explains or refuses exactly as the help text describes."""
    options = _Options()
    index = 0
    while index < len(argv):
        word = argv[index]
        if word == "--":
            options.command = argv[index + 1 :]
            return options
        if not word.startswith("-") or word == "-":
            options.command = argv[index:]
            return options
        name, eq, value = word.partition("=")
        if name in _FLAGS and not eq:
            setattr(options, _FLAGS[name], True)
            index += 1
            continue
        if name == "--version" and not eq:
            print(f"envrun, version {__version__}")
            sys.exit(0)
        attribute = _WITH_VALUE.get(name)
        if attribute is None and word.startswith("-B") and len(word) > 2 and not word.startswith("--"):
            attribute, value, eq = "binds", word[2:], "="
        if attribute is None:
            return None
        if not eq:
            if index + 1 >= len(argv):
                return None
            value = argv[index + 1]
            index += 1
        if attribute == "binds":
            options.binds.append(value)
        else:
            setattr(options, attribute, value)
        index += 1
    return options


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args: Any = parse_options(argv) or build_parser().parse_args(argv)
    try:
        launch(args)
    except EnvbuildError as exc:
        print(exc.render(), file=sys.stderr)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)


def launch(args: Any) -> None:
    from envbuild.host.node import read_host_node
    from envbuild.host.runtime import require_runtime
    from envbuild.launch.allocation import gpus_from_scontrol, read_allocation
    from envbuild.launch.plan import LaunchRequest, plan_launch
    from envbuild.recipes.detect import resolve_recipe

    if not args.image:
        raise UsageError("no image given", "pass --image IMG.sif or set ENVRUN_IMAGE")
    image_path = os.path.abspath(args.image)
    if not os.path.exists(image_path):
        raise UsageError(f"image {args.image} does not exist", "build it with `envbuild build SPEC -o IMG.sif` or fix the path")
    recipe, why = resolve_recipe(args.system, os.environ)
    settings = _config_for(recipe.name)
    all_binds = (*settings.binds, *args.binds)
    for bind in all_binds:
        source = bind.split(":", 1)[0]
        if not os.path.exists(source):
            given = f"--bind {bind}" if bind in args.binds else f"binds in the envrun config {_config_file()}"
            raise UsageError(f"bind source {source} does not exist ({given})",
                             "create the directory, or fix the path given to --bind (or in the envrun config)")
    missing = tuple(b for b in (*recipe.binds, *recipe.multinode_binds) if not os.path.exists(b.split(":", 1)[0]))
    allocation = read_allocation(os.environ)
    if allocation is not None:
        gpus_from_scontrol(allocation)  # an salloc shell: its variables do not say
    plan = plan_launch(LaunchRequest(
        command=tuple(args.command), image=image_path, recipe=recipe, runtime=require_runtime(probe=False),
        cwd=os.getcwd(), binds=all_binds, env=tuple(settings.env.items()), environ=dict(os.environ),
        missing_recipe_binds=missing, system_reason=why, allocation=allocation,
        host=read_host_node(os.environ),
    ))
    if args.dry_run:
        sys.stdout.write(plan.script())
        return
    sys.stderr.write("".join(f"envrun: warning: {warning}\n" for warning in plan.warnings))
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


def _config_file() -> str:
    from envbuild.launch.config import config_path

    return config_path(os.environ)


def _config_for(system: str) -> Any:
    """The envrun config's binds and env for `system`; validated (pydantic) only when a file exists."""
    from envbuild.launch.config import EMPTY, config_path, load_envrun_config

    if not os.path.exists(config_path(os.environ)) and not os.environ.get("ENVRUN_CONFIG"):
        return EMPTY
    return load_envrun_config().for_system(system)


if __name__ == "__main__":
    main()
