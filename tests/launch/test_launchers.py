"""Which launcher a command line starts has one home (envbuild.launch.args: LAUNCHER_PROGRAMS, LAUNCHER_MODULES,
launcher_of), and every reader of command lines agrees with it: envrun's launch plan, the program-file check,
envrun sbatch's training step and the batch-script check. Pure."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from envbuild.launch.args import LAUNCHER_MODULES, LAUNCHER_PROGRAMS, launcher_kind, launcher_of
from envbuild.launch.visibility import program_file_index
from envbuild.slurm.batch.jobplan import job_name
from envbuild.slurm.batch.stepcommand import infer_launcher
from envbuild.slurm.check.programs import classify_program
from tests.launch.test_plan import plan
from tests.support.launch_allocations import LOCAL_PARTIAL, PUHTI_2_GPUS

REPO = Path(__file__).resolve().parents[2]
HOME = REPO / "envbuild" / "launch" / "args.py"

# Each launcher in every spelling the home knows (kind, the words that start it), and a few more that Python reads
# the same way (options before -m, -m attached or bundled, a path, a versioned python).
SPELLINGS = [
    ("torchrun", "torchrun"),
    ("torchrun", "/opt/conda/bin/torchrun"),
    ("torchrun", "torchrun_jsc"),
    ("torchrun", "torchrun-jsc"),
    ("torchrun", "python -m torch.distributed.run"),
    ("torchrun", "python3 -m torch.distributed.run"),
    ("torchrun", "python3.11 -u -X dev -m torch.distributed.run"),
    ("torchrun", "python -mtorch.distributed.run"),
    ("torchrun", "python -um torch.distributed.run"),
    ("torchrun", "/usr/bin/python3 -m torch.distributed.run"),
    ("torchrun", "python -m torch.distributed.launch"),
    ("accelerate", "accelerate launch"),
    ("accelerate", "python -m accelerate.commands.launch"),
    ("deepspeed", "deepspeed"),
    ("deepspeed", "python3 -m deepspeed.launcher.runner"),
]
# the launcher's own option that sets two processes per node
TWO_PER_NODE = {"torchrun": "--nproc-per-node 2", "accelerate": "--num_processes 2", "deepspeed": "--num_gpus 2"}


def spelled(launcher: str, kind: str) -> tuple[str, ...]:
    return (*launcher.split(), *TWO_PER_NODE[kind].split(), "train.py", "--lr", "3e-4")


def test_the_spellings_cover_the_home() -> None:
    """Every launcher name and module of the home is among the spellings below, so each is held to the readers."""
    named = {word.rsplit("/", 1)[-1] for _, launcher in SPELLINGS for word in launcher.split()}
    modules = {word.removeprefix("-m") for _, launcher in SPELLINGS for word in launcher.split()}
    assert set(LAUNCHER_PROGRAMS) - named == set()
    assert set(LAUNCHER_MODULES) - modules == set()


@pytest.mark.parametrize(("kind", "launcher"), SPELLINGS)
def test_every_reader_of_command_lines_sees_the_same_launcher(kind: str, launcher: str) -> None:
    words = spelled(launcher, kind)
    script = words.index("train.py")
    seen = {
        "launch.args.launcher_kind": launcher_kind(words),
        "slurm.check.programs.classify_program": classify_program(words).kind,
        "slurm.batch.stepcommand.infer_launcher": infer_launcher(words),
        "launch plan's step under srun": plan("srun", *words, system="puhti", environ=PUHTI_2_GPUS).step,
    }
    assert seen == dict.fromkeys(seen, kind)
    assert launcher_of(words)[1] == len(launcher.split())
    assert program_file_index(words) == script, "the program-file check finds the script after the launcher's options"
    assert program_file_index(("srun", "-N", "2", *words)) == script + 3
    assert job_name(words) == "train"


@pytest.mark.parametrize("launcher", [launcher for kind, launcher in SPELLINGS
                                      if kind == "torchrun" and "torch.distributed.launch" not in launcher])
def test_every_torchrun_spelling_is_planned_as_srun_torchrun(launcher: str) -> None:
    """`envrun srun python -m torch.distributed.run --nproc-per-node 2 train.py` is one torchrun per node with its
    two processes, exactly as `envrun srun torchrun ...`: only the words that start torchrun differ."""
    head = tuple(launcher.split())
    user = ("--nproc-per-node", "2", "train.py", "--lr", "3e-4")
    reference = plan("srun", "torchrun", *user, environ=LOCAL_PARTIAL)
    planned = plan("srun", *head, *user, environ=LOCAL_PARTIAL)
    at = reference.argv.index("torchrun")
    assert planned.argv[:at] == reference.argv[:at]
    assert planned.argv[at : at + len(head)] == head
    assert planned.argv[at + len(head) :] == reference.argv[at + 1 :]
    assert (planned.env, planned.reasons, planned.warnings, planned.step) == \
        (reference.env, reference.reasons, reference.warnings, reference.step)
    assert "--ntasks-per-node=1" in planned.argv


def test_torch_distributed_launch_is_torchrun_and_keeps_its_local_rank_argument() -> None:
    """torch.distributed.launch (torchrun's deprecated predecessor) is one launcher per node too. It puts
    --local-rank=N before the program's arguments unless --use-env: envrun's rank step (a shell) cannot stand in
    front of the script then, so the ranks start as the launcher starts them."""
    head = ("python", "-m", "torch.distributed.launch")
    planned = plan("srun", *head, "--nproc-per-node", "2", "train.py", environ=LOCAL_PARTIAL)
    assert planned.step == "torchrun" and "--ntasks-per-node=1" in planned.argv
    assert planned.argv[-7:] == (*head, "--standalone", "--nproc-per-node", "2", "train.py")
    with_env = plan("srun", *head, "--use_env", "--nproc-per-node", "2", "train.py", environ=LOCAL_PARTIAL)
    assert "--no-python" in with_env.argv and with_env.argv[-1] == "train.py"


def test_the_launcher_words_live_only_in_their_home() -> None:
    """A launcher's module or site name as a string anywhere else in envbuild/ is a second copy of the table
    (docstrings may name them)."""
    names = [*LAUNCHER_MODULES, *(name for name, (kind, _) in LAUNCHER_PROGRAMS.items() if name != kind)]
    copies = []
    for path in sorted((REPO / "envbuild").rglob("*.py")):
        if path == HOME:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                copies += [f"{path.relative_to(REPO)}:{node.lineno}: {name}" for name in names if name in node.value]
    assert copies == [], "read them from envbuild.launch.args (launcher_of, LAUNCHER_MODULES, TORCHRUN_MODULE):\n" \
        + "\n".join(copies)
