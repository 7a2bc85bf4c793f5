"""The training step of a batch job: the user's command under the chosen launcher, as the words that follow
`envrun ... srun`. Pure.

    python train.py --lr 3e-4     torchrun:   torchrun train.py --lr 3e-4
                                  srun:       python train.py --lr 3e-4   (one task per GPU)
                                  accelerate: accelerate launch train.py --lr 3e-4
                                  deepspeed:  deepspeed train.py --lr 3e-4
    python -m pkg.train           torchrun -m pkg.train / accelerate launch -m pkg.train / deepspeed --module pkg.train

envrun adds the per-node values (node rank, main address and port, processes per node) inside the job step.
The user's script arguments are kept word for word.
"""

from __future__ import annotations

from envbuild.launch.args import is_python, launcher_kind
from envbuild.shared.errors import UsageError


def infer_launcher(command: tuple[str, ...]) -> str | None:
    """The launcher a command already names (`torchrun train.py`, `python -m torch.distributed.run train.py`), or
    None."""
    return launcher_kind(command) or None


def step_command(command: tuple[str, ...], launcher: str) -> tuple[str, ...]:
    if not command:
        raise UsageError("no training command given", "e.g. `envrun sbatch --nodes 2 -- python train.py --lr 3e-4`")
    first = command[0].rsplit("/", 1)[-1]
    if first in ("srun", "envrun", "sbatch", "apptainer", "singularity"):
        raise UsageError(f"the command starts with {first}: give only the training command",
                         "envrun sbatch writes the srun and envrun around it, e.g. `envrun sbatch -- python train.py`")
    if first == "accelerate" and command[1:2] != ("launch",):
        raise UsageError("accelerate: only `accelerate launch ...` starts training",
                         "e.g. `envrun sbatch --launcher accelerate -- accelerate launch train.py`")
    named = infer_launcher(command)
    if named is not None:
        if named != launcher:
            raise UsageError(f"the command runs {named} but the launcher is {launcher}",
                             f"use --launcher {named}, or give the command as `python SCRIPT ...`")
        return command
    script = _python_program(command)
    if launcher == "srun":
        return command if is_python(first) or script is None else ("python", *command)
    if script is None:
        raise UsageError(f"{launcher} starts Python scripts, and {command[0]} is not one",
                         "give `python SCRIPT ARGS` or `SCRIPT.py ARGS`, or use --launcher srun for other programs")
    module, rest = script
    if launcher == "torchrun":
        return ("torchrun", *(("-m",) if module else ()), *rest)
    if launcher == "accelerate":
        return ("accelerate", "launch", *(("-m",) if module else ()), *rest)
    return ("deepspeed", *(("--module",) if module else ()), *rest)


def _python_program(command: tuple[str, ...]) -> tuple[bool, tuple[str, ...]] | None:
    """(is a module, the script or module and its arguments) of a Python command line, or None."""
    first = command[0].rsplit("/", 1)[-1]
    if first.endswith(".py"):
        return False, command
    if not is_python(first):
        return None
    words = list(command[1:])
    while words and words[0] == "-u":  # the launchers run Python unbuffered themselves
        words.pop(0)
    if not words:
        raise UsageError("python without a script", "e.g. `python train.py`")
    if words[0] == "-m" and len(words) > 1:
        return True, tuple(words[1:])
    if words[0].startswith("-"):
        raise UsageError(f"python option {words[0]} cannot be passed through a launcher",
                         "put it in PYTHONOPTIMIZE/PYTHONWARNINGS-style variables, or use --launcher srun")
    return False, tuple(words)
