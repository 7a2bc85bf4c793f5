"""Programs the check reads through (pyxis's srun options, `uv run`, shifter, JSC's torchrun_jsc) and programs it
cannot read (a wrapper that runs python its own way), which it names with the rules that did not run (issue 38)."""

from __future__ import annotations

import pytest

from envbuild.recipes.loadrecipe import load_recipe
from envbuild.slurm.check.parse import parse_script
from envbuild.slurm.check.pitfalls import check_script
from envbuild.slurm.check.programs import classify_program

HEAD = "#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --gpus-per-node=4\n#SBATCH --time=01:00:00\n"


@pytest.mark.parametrize(("line", "kind", "name"), [
    # pyxis: the image is an option's value, the program comes after it
    ("srun --container-image nvcr.io/nvidia/pytorch:24.05-py3 --container-mounts /data:/data python train.py",
     "python", "python"),
    ("srun --container-image=nvcr.io/nvidia/pytorch:24.05-py3 torchrun --nproc-per-node=4 train.py",
     "torchrun", "torchrun"),
    ("srun uv run --with numpy python train.py", "python", "python"),
    ("srun uv run torchrun --nproc-per-node=4 train.py", "torchrun", "torchrun"),
    ("srun shifter --image=docker:pytorch/pytorch:latest python train.py", "python", "python"),
    ("srun shifter --image docker:pytorch/pytorch:latest torchrun --nproc-per-node=4 train.py", "torchrun",
     "torchrun"),
    ("srun torchrun_jsc --nproc-per-node=4 train.py", "torchrun", "torchrun"),
    # the runtime's own options before exec (as `envrun --dry-run` prints the launch)
    ("srun apptainer --quiet exec --nv img.sif torchrun --nproc-per-node=4 train.py", "torchrun", "torchrun"),
    ("srun singularity -s -c /etc/my.conf exec img.sif python train.py", "python", "python"),
    ("srun my_launch python train.py", "unknown", "my_launch"),
    ("srun hostname", "other", "hostname"),
    # a runtime whose options the check does not know (NERSC's podman-hpc), named by what it runs
    ("srun podman-hpc run --rm --gpu -v /a:/b registry/img:1 python train.py", "unknown", "podman-hpc"),
    # a site's wrapper named after the launcher it wraps (IDRIS)
    ("srun idr_accelerate --config_file fsdp.yaml train.py", "unknown", "idr_accelerate"),
    # a word that touches a backquoted one is one word (pyxis's mounts with `pwd`): the program comes after it
    ("srun --container-image=img.sqsh --container-mounts=/n:/n,`pwd`:`pwd` python train.py", "python", "python"),
])
def test_what_an_srun_line_runs(line: str, kind: str, name: str) -> None:
    script = parse_script(HEAD + line + "\n")
    (srun,) = script.sruns
    assert (srun.program.kind, srun.program.name) == (kind, name)


def test_a_wrapper_the_check_cannot_read_is_named_with_the_rules_it_skipped() -> None:
    report = check_script(HEAD + "srun my_launch python train.py\n", load_recipe("local"), {}, syntax_error=None)
    (info,) = [f for f in report.findings if f.rule == "program_unknown"]
    assert info.level == "info" and info.line == 5
    assert "my_launch runs python in a way the check does not know" in info.why
    assert "launcher_tasks, per_task_launch" in info.why


def test_echo_and_copies_are_not_wrappers() -> None:
    assert classify_program(("echo", "python", "is", "here")).kind == "other"
    assert classify_program(("cp", "train.py", "/tmp")).kind == "other"


def test_launchers_that_start_their_own_processes_are_not_guessed_at() -> None:
    # TACC's ibrun starts the MPI ranks itself, whatever it runs
    assert classify_program(("ibrun", "apptainer", "exec", "--nv", "img.sif", "python", "train.py")).kind == "unknown"
    # deepspeed with a hostfile starts the other nodes' ranks itself; the script's own --hostfile is not deepspeed's
    assert classify_program(("deepspeed", "--hostfile", "hosts", "train.py", "--deepspeed", "ds.json")).kind == \
        "unknown"
    assert classify_program(("deepspeed", "--launcher=pdsh", "train.py")).kind == "unknown"
    assert classify_program(("deepspeed", "--num_gpus", "4", "train.py", "--hostfile", "x")).kind == "deepspeed"


def test_deepspeed_with_a_hostfile_without_srun_is_not_called_first_node_only() -> None:
    text = ("#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n#SBATCH --gres=gpu:4\n"
            "deepspeed --hostfile hostfile --launcher pdsh train.py --deepspeed ds_config.json\n")
    report = check_script(text, None, {}, syntax_error=None)
    assert [(f.rule, f.level, f.line) for f in report.findings] == [("program_unknown", "info", 5)]
