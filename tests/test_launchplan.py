"""The launch plan: what envrun runs for each command form (pure; no Slurm or apptainer needed)."""

from __future__ import annotations

import pytest

from envbuild.errors import UsageError
from envbuild.hostfacts import Runtime
from envbuild.launchplan import LaunchRequest, plan_launch, split_srun
from envbuild.recipes import load_recipe

RUNTIME = Runtime("/usr/bin/apptainer", "apptainer")


def plan(*command: str, system: str = "local", environ: dict[str, str] | None = None, binds: tuple[str, ...] = ()):
    return plan_launch(LaunchRequest(
        command=command, image="/img/env.sif", recipe=load_recipe(system), runtime=RUNTIME, cwd="/work/proj",
        binds=binds, environ=environ or {},
    ))


def test_srun_torchrun_local() -> None:
    p = plan("srun", "torchrun", "train.py", "--lr", "3e-4")
    assert p.argv == (
        "srun", "--ntasks-per-node=1", "--cpus-per-task=2", "--kill-on-bad-exit=1",
        "/usr/bin/apptainer", "exec", "--bind", "/work/proj", "--pwd", "/work/proj", "/img/env.sif",
        "torchrun", "--nproc-per-node=2", "--standalone", "train.py", "--lr", "3e-4",
    )
    assert dict(p.env) == {"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def test_user_choices_are_kept() -> None:
    p = plan("srun", "-n", "1", "-c", "2", "torchrun", "--nproc_per_node", "1", "--standalone", "x.py",
             environ={"OMP_NUM_THREADS": "7", "TOKENIZERS_PARALLELISM": "true"})
    assert p.argv[:6] == ("srun", "-n", "1", "-c", "2", "--kill-on-bad-exit=1")
    assert p.argv[-5:] == ("torchrun", "--nproc_per_node", "1", "--standalone", "x.py")
    assert p.env == ()


def test_script_arguments_that_look_like_torchrun_options_are_not_touched() -> None:
    p = plan("torchrun", "train.py", "--nproc-per-node=99", "--standalone")
    assert p.argv[-6:] == ("torchrun", "--nproc-per-node=2", "--standalone", "train.py", "--nproc-per-node=99", "--standalone")


def test_plain_torchrun_without_srun() -> None:
    p = plan("torchrun", "train.py")
    assert p.argv[0] == "/usr/bin/apptainer"
    assert "srun" not in p.argv


def test_lumi_recipe_binds_and_env() -> None:
    p = plan("torchrun", "train.py", system="lumi-g")
    assert "/pfs" in p.argv and "/flash" in p.argv
    env = dict(p.env)
    assert env["NCCL_SOCKET_IFNAME"] == "hsn0,hsn1,hsn2,hsn3"
    assert env["OMP_NUM_THREADS"] == "7"
    assert "--nproc-per-node=8" in p.argv


def test_extra_binds_in_order_without_duplicates() -> None:
    p = plan("python", "x.py", binds=("/data", "/work/proj"))
    binds = [p.argv[i + 1] for i, a in enumerate(p.argv) if a == "--bind"]
    assert binds == ["/work/proj", "/data"]


def test_multi_node_torchrun_is_refused_clearly() -> None:
    with pytest.raises(UsageError, match="multi-node torchrun rendezvous"):
        plan("srun", "-N", "2", "torchrun", "train.py")


@pytest.mark.parametrize(
    ("words", "opts", "rest"),
    [
        (("srun", "torchrun", "a"), (), ("torchrun", "a")),
        (("srun", "-N", "2", "-n2", "--gres=gpu:4", "--exclusive", "python", "-u", "x"),
         ("-N", "2", "-n2", "--gres=gpu:4", "--exclusive"), ("python", "-u", "x")),
        (("srun", "--nodes", "2", "--label", "env"), ("--nodes", "2", "--label"), ("env",)),
        (("srun", "-l", "--", "-weird-prog"), ("-l",), ("-weird-prog",)),
    ],
)
def test_split_srun(words, opts, rest) -> None:
    assert split_srun(words) == (opts, rest)


def test_dry_run_script_quotes_everything() -> None:
    p = plan("python", "-c", "print('a b; $HOME')")
    script = p.script()
    assert script.startswith("#!/bin/sh\n")
    expected = "exec /usr/bin/apptainer exec --bind /work/proj --pwd /work/proj /img/env.sif python -c "
    assert expected + "'print('\"'\"'a b; $HOME'\"'\"')'" in script


def test_empty_command() -> None:
    with pytest.raises(UsageError, match="no command given"):
        plan()
