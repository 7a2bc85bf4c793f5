"""The training step under each launcher (pure)."""

from __future__ import annotations

import pytest

from envbuild.shared.errors import UsageError
from envbuild.slurm.batch.jobplan import job_name
from envbuild.slurm.batch.stepcommand import infer_launcher, step_command


@pytest.mark.parametrize(("command", "launcher", "step"), [
    (("python", "train.py", "--lr", "3e-4"), "torchrun", ("torchrun", "train.py", "--lr", "3e-4")),
    (("python", "-u", "train.py"), "torchrun", ("torchrun", "train.py")),
    (("train.py", "a b"), "torchrun", ("torchrun", "train.py", "a b")),
    (("python", "-m", "pkg.train", "--x"), "torchrun", ("torchrun", "-m", "pkg.train", "--x")),
    (("python", "train.py"), "srun", ("python", "train.py")),
    (("train.py",), "srun", ("python", "train.py")),
    (("./run.sh", "x"), "srun", ("./run.sh", "x")),
    (("python", "train.py"), "accelerate", ("accelerate", "launch", "train.py")),
    (("python", "-m", "pkg.train"), "accelerate", ("accelerate", "launch", "-m", "pkg.train")),
    (("python", "train.py"), "deepspeed", ("deepspeed", "train.py")),
    (("python", "-m", "pkg.train"), "deepspeed", ("deepspeed", "--module", "pkg.train")),
    (("torchrun", "--nproc-per-node=2", "train.py"), "torchrun", ("torchrun", "--nproc-per-node=2", "train.py")),
    (("accelerate", "launch", "--mixed_precision=bf16", "t.py"), "accelerate",
     ("accelerate", "launch", "--mixed_precision=bf16", "t.py")),
    # torchrun by its module name is torchrun, not a module for torchrun to run
    (("python3", "-m", "torch.distributed.run", "--nproc-per-node=2", "train.py"), "torchrun",
     ("python3", "-m", "torch.distributed.run", "--nproc-per-node=2", "train.py")),
])
def test_step_command(command: tuple[str, ...], launcher: str, step: tuple[str, ...]) -> None:
    assert step_command(command, launcher) == step


@pytest.mark.parametrize(("command", "launcher", "message"), [
    ((), "torchrun", "no training command"),
    (("srun", "python", "t.py"), "torchrun", "the command starts with srun"),
    (("envrun", "srun", "python", "t.py"), "srun", "the command starts with envrun"),
    (("torchrun", "t.py"), "srun", "the command runs torchrun but the launcher is srun"),
    (("python", "-m", "torch.distributed.run", "t.py"), "srun", "the command runs torchrun but the launcher is srun"),
    (("bash", "run.sh"), "torchrun", "torchrun starts Python scripts"),
    (("python", "-O", "t.py"), "torchrun", "python option -O"),
    (("accelerate", "config"), "accelerate", "only `accelerate launch"),
])
def test_refused_commands(command: tuple[str, ...], launcher: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        step_command(command, launcher)


def test_launcher_named_by_the_command_and_the_job_name() -> None:
    assert infer_launcher(("torchrun", "x.py")) == "torchrun" and infer_launcher(("python", "x.py")) is None
    assert job_name(("torchrun", "src/train.py")) == "train"
    assert job_name(("torchrun", "-m", "pkg.finetune")) == "finetune"
    assert job_name(("./run.sh",)) == "run.sh"
