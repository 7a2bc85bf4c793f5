"""The launch plan: what envrun runs for each command form and system (pure; no Slurm needed).

Golden scripts in tests/golden/launch-*.sh come from recorded SLURM_* environments of real jobs.
Regenerate after an intended change with ENVBUILD_UPDATE_GOLDEN=1 and review the diff."""

from __future__ import annotations

import os
import subprocess

import pytest

from envbuild.errors import UsageError
from envbuild.hostfacts import Runtime
from envbuild.launchplan import LaunchRequest, plan_launch, split_srun
from envbuild.recipes import load_recipe
from tests.test_buildplan_golden import check_golden

RUNTIME = Runtime("/usr/bin/apptainer", "apptainer")

# SLURM_* as seen inside real sbatch jobs on each system (job ids and node names made up).
LUMI_FULL_NODE = {
    "SLURM_CLUSTER_NAME": "lumi", "SLURM_JOB_ID": "7654321", "SLURM_JOB_NUM_NODES": "1", "SLURM_NNODES": "1",
    "SLURM_JOB_NODELIST": "nid005123", "SLURM_JOB_PARTITION": "standard-g", "SLURM_NTASKS": "8",
    "SLURM_TASKS_PER_NODE": "8", "SLURM_NTASKS_PER_NODE": "8", "SLURM_GPUS_PER_NODE": "8", "SLURM_MEM_PER_NODE": "491520",
    "USER": "alice",
}
LUMI_4_NODES = {
    "SLURM_CLUSTER_NAME": "lumi", "SLURM_JOB_ID": "7654400", "SLURM_JOB_NUM_NODES": "4", "SLURM_NNODES": "4",
    "SLURM_JOB_NODELIST": "nid[005123-005126]", "SLURM_JOB_PARTITION": "standard-g", "SLURM_NTASKS": "4",
    "SLURM_TASKS_PER_NODE": "1(x4)", "SLURM_GPUS_PER_NODE": "8", "USER": "alice",
}
PUHTI_4_GPUS = {
    "SLURM_CLUSTER_NAME": "puhti", "SLURM_JOB_ID": "22334455", "SLURM_JOB_NUM_NODES": "1", "SLURM_NNODES": "1",
    "SLURM_JOB_NODELIST": "r01g02", "SLURM_JOB_PARTITION": "gpu", "SLURM_NTASKS": "1", "SLURM_CPUS_PER_TASK": "40",
    "SLURM_JOB_GPUS": "0,1,2,3",
}
MAHTI_2_NODES = {
    "SLURM_CLUSTER_NAME": "mahti", "SLURM_JOB_ID": "3456789", "SLURM_JOB_NUM_NODES": "2", "SLURM_NNODES": "2",
    "SLURM_JOB_NODELIST": "g[1101-1102]", "SLURM_JOB_PARTITION": "gpumedium", "SLURM_NTASKS": "2",
    "SLURM_TASKS_PER_NODE": "1(x2)", "SLURM_CPUS_PER_TASK": "128",
}
JUWELS_2_NODES = {
    "SLURM_CLUSTER_NAME": "juwels", "SLURM_JOB_ID": "11112222", "SLURM_JOB_NUM_NODES": "2", "SLURM_NNODES": "2",
    "SLURM_JOB_NODELIST": "jwb[0097-0098]", "SLURM_JOB_PARTITION": "booster", "SLURM_NTASKS": "8",
    "SLURM_TASKS_PER_NODE": "4(x2)", "SLURM_NTASKS_PER_NODE": "4", "SLURM_CPUS_PER_TASK": "24",
}


def plan(*command: str, system: str = "local", environ: dict[str, str] | None = None, binds: tuple[str, ...] = (),
         cwd: str = "/work/proj"):
    return plan_launch(LaunchRequest(
        command=command, image="/img/env.sif", recipe=load_recipe(system), runtime=RUNTIME, cwd=cwd,
        binds=binds, environ=environ or {},
    ))


GOLDEN_CASES = {
    "lumi-full-node-8-tasks": ("lumi-g", LUMI_FULL_NODE, ("srun", "python", "train.py", "--epochs", "3")),
    "lumi-4-nodes-torchrun": ("lumi-g", LUMI_4_NODES, ("srun", "torchrun", "train.py")),
    "puhti-4-gpus-torchrun": ("puhti", PUHTI_4_GPUS, ("srun", "torchrun", "train.py")),
    "mahti-2-nodes-torchrun": ("mahti", MAHTI_2_NODES, ("srun", "torchrun", "-m", "mypkg.train", "--cfg", "a b.yaml")),
    "juwels-2-nodes-python": ("juwels-booster", JUWELS_2_NODES, ("srun", "python", "-u", "train.py")),
    "local-srun-torchrun": ("local", {}, ("srun", "torchrun", "examples/ddp_minimal.py")),
}


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_launch_script_matches_golden(case: str) -> None:
    system, environ, command = GOLDEN_CASES[case]
    check_golden(f"launch-{case}.sh", plan(*command, system=system, environ=environ).script())


def words_after(argv: tuple[str, ...], marker: str) -> tuple[str, ...]:
    return argv[len(argv) - 1 - argv[::-1].index(marker) + 1 :]


def test_lumi_full_node_uses_documented_masks_and_rocr() -> None:
    p = plan("srun", "python", "train.py", system="lumi-g", environ=LUMI_FULL_NODE)
    assert ("--cpu-bind=mask_cpu:0x00fe000000000000,0xfe00000000000000,0x0000000000fe0000,0x00000000fe000000,"
            "0x00000000000000fe,0x000000000000fe00,0x000000fe00000000,0x0000fe0000000000") in p.argv
    assert "--ntasks-per-node=8" in p.argv and "--cpus-per-task=7" in p.argv
    host_shim = p.argv[p.argv.index("/bin/sh") + 2]
    assert 'export ROCR_VISIBLE_DEVICES="$SLURM_LOCALID"' in host_shim
    assert dict(p.env)["OMP_NUM_THREADS"] == "7"
    assert words_after(p.argv, "envrun-task") == ("python", "train.py")


def test_lumi_small_g_without_exclusive_does_not_use_masks() -> None:
    env = dict(LUMI_FULL_NODE, SLURM_JOB_PARTITION="small-g")
    p = plan("srun", "python", "train.py", system="lumi-g", environ=env)
    assert "--cpu-bind=cores" in p.argv
    p = plan("srun", "--exclusive", "python", "train.py", system="lumi-g", environ=env)
    assert any(a.startswith("--cpu-bind=mask_cpu:") for a in p.argv)


def test_lumi_multinode_binds_and_rendezvous() -> None:
    p = plan("srun", "torchrun", "train.py", system="lumi-g", environ=LUMI_4_NODES)
    assert "/opt/cray" in p.argv and "/var/spool/slurmd" in p.argv
    host_shim = p.argv[p.argv.index("/bin/sh") + 2]
    assert 'PET_RDZV_ENDPOINT="${first}:$port"' in host_shim and "--standalone" not in p.argv
    assert "--nproc-per-node=8" in p.argv


def test_juwels_master_addr_suffix_and_srun_cpus() -> None:
    p = plan("srun", "python", "train.py", system="juwels-booster", environ=JUWELS_2_NODES)
    host_shim = p.argv[p.argv.index("/bin/sh") + 2]
    assert 'export MASTER_ADDR="${first}i"' in host_shim  # braces: "$firsti" would read a variable named firsti
    env = dict(p.env)
    assert env["SRUN_CPUS_PER_TASK"] == "24" and env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
    assert env["NCCL_SOCKET_IFNAME"] == "ib0"
    assert "--nv" in p.argv


@pytest.mark.parametrize("flag", ["--gpus-per-task=1", "--ntasks-per-gpu=1", "--cpus-per-gpu=7"])
def test_lumi_refuses_per_task_gpu_flags(flag: str) -> None:
    with pytest.raises(UsageError, match="per-task GPU cgroups") as info:
        plan("srun", flag, "python", "train.py", system="lumi-g", environ=LUMI_FULL_NODE)
    assert info.value.hint == "request GPUs per node (--gpus-per-node=8) instead, or add --gres-flags=allow-task-sharing"
    plan("srun", flag, "--gres-flags=allow-task-sharing", "python", "train.py", system="lumi-g", environ=LUMI_FULL_NODE)


def test_refuses_more_tasks_than_gpus_and_more_cores_than_node() -> None:
    with pytest.raises(UsageError, match="9 tasks per node but a lumi-g node has 8 GPUs"):
        plan("srun", "--ntasks-per-node=9", "python", "x.py", system="lumi-g")
    with pytest.raises(UsageError, match="more than the 40 usable cores"):
        plan("srun", "--ntasks-per-node=4", "-c", "11", "python", "x.py", system="puhti")
    with pytest.raises(UsageError, match="--nproc-per-node=5 but a puhti node has 4 GPUs"):
        plan("srun", "torchrun", "--nproc-per-node=5", "x.py", system="puhti")
    with pytest.raises(UsageError, match="more than the 56 usable cores"):
        plan("srun", "-c", "64", "torchrun", "x.py", system="lumi-g")


def test_user_choices_are_kept() -> None:
    p = plan("srun", "-n", "1", "-c", "2", "torchrun", "--nproc_per_node", "1", "--standalone", "x.py",
             environ={"OMP_NUM_THREADS": "7", "TOKENIZERS_PARALLELISM": "true"})
    assert p.argv[:6] == ("srun", "-n", "1", "-c", "2", "--kill-on-bad-exit=1")
    torchrun = p.argv[p.argv.index("torchrun"):]
    assert torchrun[:4] == ("torchrun", "--nproc_per_node", "1", "--standalone")
    assert torchrun[-1] == "x.py"
    assert dict(p.env).keys() == {"ENVRUN_RANK_CORES"}


def test_script_arguments_that_look_like_torchrun_options_are_not_touched() -> None:
    p = plan("torchrun", "train.py", "--nproc-per-node=99", "--standalone")
    assert words_after(p.argv, "envrun-rank") == ("train.py", "--nproc-per-node=99", "--standalone")
    assert p.argv[p.argv.index("torchrun") + 1 : p.argv.index("torchrun") + 4] == ("--nproc-per-node=2", "--standalone", "--no-python")


def test_module_form_moves_into_the_rank_step() -> None:
    p = plan("torchrun", "-m", "pkg.train", "--x", "1")
    torchrun = p.argv[p.argv.index("torchrun"):]
    assert "-m" not in torchrun[: torchrun.index("--no-python")]
    assert words_after(p.argv, "envrun-rank") == ("-m", "pkg.train", "--x", "1")


def test_plain_python_without_srun() -> None:
    p = plan("python", "x.py")
    assert p.argv[0] == "/usr/bin/apptainer" and "srun" not in p.argv
    assert words_after(p.argv, "envrun-task") == ("python", "x.py")


def test_extra_binds_in_order_without_duplicates() -> None:
    p = plan("python", "x.py", binds=("/data", "/work/proj"))
    binds = [p.argv[i + 1] for i, a in enumerate(p.argv) if a == "--bind"]
    assert binds == ["/work/proj", "/data"]


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


def test_empty_command() -> None:
    with pytest.raises(UsageError, match="no command given"):
        plan()


def run_host_shim(argv: tuple[str, ...], env: dict[str, str]) -> dict[str, str]:
    """Execute the plan's host shim with /bin/sh and a task's SLURM_* variables; return what it exports."""
    start = argv.index("/bin/sh")
    shim = argv[start + 2]
    out = subprocess.run(["/bin/sh", "-c", shim, "envrun-task", "env"], capture_output=True, text=True, check=True,
                         env={"PATH": os.environ["PATH"], **env}).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


@pytest.mark.slurm
@pytest.mark.parametrize(
    ("tasks_per_node", "node_id", "expected"),
    [("4(x2)", "1", "4"), ("2(x3),1", "3", "1"), ("3,2", "1", "2"), ("8", "0", "8")],
)
def test_host_shim_derives_ranks_from_slurm(tasks_per_node: str, node_id: str, expected: str) -> None:
    p = plan("srun", "python", "train.py", system="juwels-booster", environ=JUWELS_2_NODES)
    got = run_host_shim(p.argv, {
        "SLURM_PROCID": "5", "SLURM_LOCALID": "1", "SLURM_NTASKS": "8", "SLURM_NODEID": node_id,
        "SLURM_STEP_TASKS_PER_NODE": tasks_per_node, "SLURM_STEP_NODELIST": "jwb[0097-0098]",
        "SLURM_JOB_ID": "11112222", "SLURM_STEP_ID": "0",
    })
    assert (got["RANK"], got["LOCAL_RANK"], got["WORLD_SIZE"], got["LOCAL_WORLD_SIZE"]) == ("5", "1", "8", expected)
    assert got["MASTER_ADDR"] == "jwb0097i"
    assert got["MASTER_PORT"] == str(20000 + (11112222 * 16) % 40000)


def test_wrapper_passes_arguments_and_uses_caller_cwd() -> None:
    from envbuild.wrappers import render_wrapper, wrapped_commands

    script = render_wrapper("torchrun", "/img/env.sif", load_recipe("lumi-g"))
    assert script.startswith("#!/bin/sh\n")
    assert 'exec "$runtime" exec --bind "$PWD" --pwd "$PWD" $binds "$image"' in script
    assert script.rstrip().endswith('envrun-task torchrun "$@"')
    assert ': "${OMP_NUM_THREADS:=7}"; export OMP_NUM_THREADS' in script
    assert "--no-python" not in script  # the caller's torchrun options come first, untouched
    assert wrapped_commands(["pip", "activate", "Activate.ps1", "transformers", "python", "torchrun"]) == [
        "pip", "python", "torchrun", "transformers"]


def test_wrappers_never_replace_files_envbuild_did_not_write(tmp_path) -> None:
    from envbuild.buildexec import is_replaceable_wrapper
    from envbuild.wrappers import render_wrapper

    ours = tmp_path / "python"
    ours.write_text(render_wrapper("python", "/img/env.sif", load_recipe("local")))
    theirs = tmp_path / "envrun"
    theirs.write_text("#!/usr/bin/env bash\nexec something\n")
    link = tmp_path / "pip"
    link.symlink_to(theirs)
    assert is_replaceable_wrapper(tmp_path / "absent")
    assert is_replaceable_wrapper(ours)
    assert not is_replaceable_wrapper(theirs)
    assert not is_replaceable_wrapper(link)
