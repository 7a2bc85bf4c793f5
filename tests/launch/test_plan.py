"""The launch plan: what envrun runs for each command form and system (pure; no Slurm needed).

Golden scripts in tests/golden/launch-*.sh come from recorded SLURM_* environments of real jobs.
Regenerate after an intended change with ENVBUILD_UPDATE_GOLDEN=1 pytest tests/launch/test_plan.py and review
the diff. A golden file no case of GOLDEN_CASES produces fails tests/test_golden_files.py."""

from __future__ import annotations

import os
import subprocess

import pytest

from envbuild.host.buildhost import Runtime
from envbuild.host.node import HostNode
from envbuild.host.pythonstart import isolated_module
from envbuild.launch.allocation import read_allocation
from envbuild.launch.args import split_srun
from envbuild.launch.bindstyle import SLURM_NOT_READ, TORCH_NOT_READ
from envbuild.launch.launchplan import LaunchRequest, plan_launch
from envbuild.recipes.loadrecipe import load_recipe
from envbuild.shared.errors import UsageError
from tests.support.golden import check_golden
from tests.support.launch_allocations import (
    HOST,
    JUPITER_1_NODE,
    JUPITER_2_NODES,
    JUWELS_1_GPU,
    JUWELS_2_NODES,
    JUWELS_4_GPUS,
    LOCAL_FULL,
    LOCAL_PARTIAL,
    LUMI_2_NODES,
    LUMI_4_NODES,
    LUMI_FULL_NODE,
    LUMI_FULL_NODE_4_TASKS,
    LUMI_SMALL_G_1_GCD,
    LUMI_SMALL_G_2_GCDS,
    LUMI_SMALL_G_NO_TASKS,
    MAHTI_2_NODES,
    MAHTI_GPUSMALL_2_GPUS,
    PUHTI_1_GPU,
    PUHTI_2_FULL_NODES,
    PUHTI_2_GPUS,
    PUHTI_4_GPUS,
    PUHTI_4_GPUS_TASK_PER_GPU,
    ROIHU_1_NODE,
    ROIHU_2_NODES,
)

RUNTIME = Runtime("/usr/bin/apptainer", "apptainer")


# The host envrun runs on, fixed so that plans for `node: host` recipes are the same on every machine.


def plan(*command: str, system: str = "local", environ: dict[str, str] | None = None, binds: tuple[str, ...] = (),
         cwd: str = "/work/proj", host: HostNode = HOST, overlays: tuple[tuple[str, str], ...] = (), runscript: str = "",
         report: bool = False, slurm: tuple[str, str] = SLURM_NOT_READ, torch: tuple[str, str, bool] = TORCH_NOT_READ):
    environ = environ or {}
    return plan_launch(LaunchRequest(
        command=command, image="/img/env.sif", recipe=load_recipe(system), runtime=RUNTIME, cwd=cwd,
        binds=binds, environ=environ, allocation=read_allocation(environ), host=host, overlays=overlays,
        runscript=runscript, report_sampler=REPORT_SAMPLER if report else (), slurm=slurm, torch=torch,
    ))


# What envbuild.launch.bindingfacts reads on LUMI-G (issue 38): srun's Slurm, before and after the one whose srun has
# --gres-flags=allow-task-sharing (23.11.4), and a LAIF image's torch, before and after the 2.11 of the AI guide
SLURM_24_05 = {"slurm": ("24.05.8", "`srun --version`, /usr/bin/srun")}
SLURM_23_02 = {"slurm": ("23.02.7", "`srun --version`, /usr/bin/srun")}
TORCH_2_11 = {"torch": ("2.11.0+rocm7.1", "/opt/venv in env.sif", True)}
TORCH_2_10 = {"torch": ("2.10.0+rocm7.0", "/opt/venv in env.sif", True)}


# What envbuild.commands.launch.report_sampler gives for an envbuild installed in /opt/envbuild (issue 32): isolated
# from the step's working directory (issue 40)
REPORT_SAMPLER = isolated_module("envbuild.report.sampler", "--interval", "5", python="/opt/envbuild/.venv/bin/python",
                                 root="/opt/envbuild")


# What envbuild.launch.runscript says of a LUMI AI Factory image (its OCI entrypoint, laifs-container-recipes)
LAIF_RUNSCRIPT = ("its OCI entrypoint /opt/oci-entrypoint.sh sets FI_HMEM_DISABLE_P2P, ROCR_VISIBLE_DEVICES, "
                  "HIP_VISIBLE_DEVICES, then runs the command it is given")


# venv overlays (issue 11): one at LUMI's documented mount point, and two stacked
ONE_OVERLAY = (("/work/proj/env.sqsh", "/user-software"),)
TWO_OVERLAYS = (("/work/proj/env.sqsh", "/user-software"), ("/work/proj/dev tools.sqsh", "/user-dev"))


# name -> (system, recorded job variables, command[, overlays]). The first group is the old set, the rest
# are the course and guide examples of tests/support/launch_allocations.py, then launches with venv overlays.
GOLDEN_CASES = {
    "lumi-full-node-8-tasks": ("lumi-g", LUMI_FULL_NODE, ("srun", "python", "train.py", "--epochs", "3")),
    "lumi-full-node-4-tasks-14-cores": ("lumi-g", LUMI_FULL_NODE_4_TASKS, ("srun", "python", "train.py")),
    "lumi-small-g-1-gcd": ("lumi-g", LUMI_SMALL_G_1_GCD, ("srun", "python", "train.py")),
    "lumi-small-g-2-gcds": ("lumi-g", LUMI_SMALL_G_2_GCDS, ("srun", "python", "train.py")),
    "lumi-4-nodes-torchrun": ("lumi-g", LUMI_4_NODES, ("srun", "torchrun", "train.py")),
    "puhti-1-gpu": ("puhti", PUHTI_1_GPU, ("srun", "python", "train.py")),
    "puhti-2-gpus-torchrun": ("puhti", PUHTI_2_GPUS, ("srun", "torchrun", "train.py")),
    "puhti-4-gpus-torchrun": ("puhti", PUHTI_4_GPUS, ("srun", "torchrun", "train.py")),
    "puhti-4-gpus-task-per-gpu": ("puhti", PUHTI_4_GPUS_TASK_PER_GPU, ("srun", "python", "train.py")),
    "puhti-2-full-nodes-torchrun": ("puhti", PUHTI_2_FULL_NODES, ("srun", "torchrun", "train.py")),
    "mahti-gpusmall-2-gpus-torchrun": ("mahti", MAHTI_GPUSMALL_2_GPUS, ("srun", "torchrun", "train.py")),
    "mahti-2-nodes-torchrun": ("mahti", MAHTI_2_NODES, ("srun", "torchrun", "-m", "mypkg.train", "--cfg", "a b.yaml")),
    "juwels-1-gpu": ("juwels-booster", JUWELS_1_GPU, ("srun", "python", "train.py")),
    "juwels-4-gpus": ("juwels-booster", JUWELS_4_GPUS, ("srun", "python", "train.py")),
    "juwels-2-nodes-python": ("juwels-booster", JUWELS_2_NODES, ("srun", "python", "-u", "train.py")),
    "local-srun-torchrun": ("local", {}, ("srun", "torchrun", "examples/ddp_minimal.py")),
    "local-partial-srun-torchrun": ("local", LOCAL_PARTIAL, ("srun", "torchrun", "examples/ddp_minimal.py")),
    "local-full-srun-python": ("local", LOCAL_FULL, ("srun", "python", "examples/ddp_minimal.py")),
    "lumi-login-node-dry-run": ("lumi-g", {}, ("srun", "python", "train.py")),
    "lumi-overlay-srun-torchrun": ("lumi-g", LUMI_4_NODES, ("srun", "torchrun", "train.py"), ONE_OVERLAY),
    "local-two-overlays-python": ("local", {}, ("python", "train.py", "--lr", "3e-4"), TWO_OVERLAYS),
    # one accelerate launch / DeepSpeed launcher per node (envbuild/launch/nodelaunchers.py)
    "lumi-2-nodes-accelerate": ("lumi-g", LUMI_2_NODES, ("srun", "accelerate", "launch", "--mixed_precision=bf16", "train.py",
                                                         "--lr", "3e-4")),
    "puhti-1-node-accelerate": ("puhti", PUHTI_4_GPUS, ("srun", "accelerate", "launch", "train.py")),
    "mahti-2-nodes-deepspeed": ("mahti", MAHTI_2_NODES, ("srun", "deepspeed", "train.py", "--deepspeed", "--deepspeed_config",
                                                         "ds_config.json")),
    "local-srun-accelerate": ("local", {}, ("srun", "accelerate", "launch", "examples/accelerate_ddp.py")),
    # 2026 (issue 19): the GH200 systems at 1 and 2 nodes, and a LUMI AI Factory image started through its runscript
    "roihu-1-node-torchrun": ("roihu", ROIHU_1_NODE, ("srun", "torchrun", "train.py")),
    "roihu-2-nodes-python": ("roihu", ROIHU_2_NODES, ("srun", "python", "train.py")),
    "jupiter-1-node-torchrun": ("jupiter", JUPITER_1_NODE, ("srun", "torchrun", "train.py")),
    "jupiter-2-nodes-torchrun": ("jupiter", JUPITER_2_NODES, ("srun", "torchrun", "train.py")),
    "lumi-laif-runscript-2-nodes-torchrun": ("lumi-g", {**LUMI_2_NODES, "ROCR_USE_SLURM_LOCALID": "1"},
                                             ("srun", "torchrun", "train.py"), (), LAIF_RUNSCRIPT),
    # the job report's sampler, one per node, started by the node's first task (issue 32)
    "lumi-4-nodes-torchrun-report": ("lumi-g", LUMI_4_NODES, ("srun", "torchrun", "train.py"), (), "", True),
    "local-full-srun-python-report": ("local", LOCAL_FULL, ("srun", "python", "examples/ddp_minimal.py"), (), "", True),
    # LUMI's 2026 binding (issue 38): srun's --gpu-bind=map with allow-task-sharing where srun has it, the CPU masks
    # where it does not (and where its version is unknown: lumi-full-node-8-tasks above); torchrun's NUMA binding
    # with a torch of 2.11 or newer, envrun's per-rank affinity with an older one (and an unknown one:
    # lumi-4-nodes-torchrun above)
    "lumi-full-node-8-tasks-gpu-bind": ("lumi-g", LUMI_FULL_NODE, ("srun", "python", "train.py"), SLURM_24_05),
    "lumi-full-node-8-tasks-slurm-23-02": ("lumi-g", LUMI_FULL_NODE, ("srun", "python", "train.py"), SLURM_23_02),
    "lumi-4-nodes-torchrun-numa-binding": ("lumi-g", LUMI_4_NODES, ("srun", "torchrun", "train.py"), TORCH_2_11),
    "lumi-4-nodes-torchrun-torch-2-10": ("lumi-g", LUMI_4_NODES, ("srun", "torchrun", "train.py"), TORCH_2_10),
}


def launch_golden_name(case: str) -> str:
    return f"launch-{case}.sh"


def golden_names() -> set[str]:
    return {launch_golden_name(case) for case in GOLDEN_CASES}


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_launch_script_matches_golden(case: str) -> None:
    """tests/golden/launch-CASE.sh; update after an intended change: ENVBUILD_UPDATE_GOLDEN=1 pytest THIS_FILE."""
    system, environ, command, *rest = GOLDEN_CASES[case]
    facts = rest.pop() if rest and isinstance(rest[-1], dict) else {}  # what this Slurm and the image's torch are
    script = plan(*command, system=system, environ=environ, overlays=rest[0] if rest else (),
                  runscript=rest[1] if len(rest) > 1 else "", report=len(rest) > 2 and rest[2], **facts).script()
    check_golden(launch_golden_name(case), script)


def test_report_sampler_only_where_envrun_reads_the_tasks_stderr() -> None:
    """The sampler's records travel in the tasks' stderr: a --pty step (envrun does not supervise it) or one
    whose stderr srun writes to a file gets no sampler, and the plan says why."""
    with_report = plan("srun", "python", "train.py", environ=LOCAL_FULL, report=True)
    assert with_report.report and "envbuild.report.sampler" in with_report.script()
    assert ('if [ -n "$envrun_report_key" ] && [ "${SLURM_LOCALID:-0}" = 0 ]; then /opt/envbuild/.venv/bin/python -I -c'
            in with_report.script())  # only with the step's report key (envbuild.launch.shims.sampler_start_lines)
    for opts in (("--pty",), ("--error=err-%t.txt",), ("-o", "out.txt")):
        p = plan("srun", *opts, "python", "train.py", environ=LOCAL_FULL, report=True)
        assert not p.report and "envbuild.report.sampler" not in p.script()
        assert any(reason.startswith("no job report:") for reason in p.reasons)
    assert not plan("python", "train.py", report=True).report  # no srun: envrun execs, nothing to report to
    # one task per GCD: the sampler starts before the shim gives the task its own GCD, so it sees all eight
    shim = plan("srun", "python", "train.py", system="lumi-g", environ=LUMI_FULL_NODE, report=True).script()
    assert shim.index("envbuild.report.sampler") < shim.index('export ROCR_VISIBLE_DEVICES="$SLURM_LOCALID"')


def words_after(argv: tuple[str, ...], marker: str) -> tuple[str, ...]:
    return argv[len(argv) - 1 - argv[::-1].index(marker) + 1 :]


def program_words(argv: tuple[str, ...]) -> tuple[str, ...]:
    """The program and its arguments: the words after the container shim (`... envrun-task BODY`)."""
    return words_after(argv, "envrun-task")[1:]


def test_lumi_full_node_uses_documented_masks_and_rocr() -> None:
    p = plan("srun", "python", "train.py", system="lumi-g", environ=LUMI_FULL_NODE)
    assert ("--cpu-bind=mask_cpu:0x00fe000000000000,0xfe00000000000000,0x0000000000fe0000,0x00000000fe000000,"
            "0x00000000000000fe,0x000000000000fe00,0x000000fe00000000,0x0000fe0000000000") in p.argv
    assert "--ntasks-per-node=8" in p.argv and "--cpus-per-task=7" in p.argv
    host_shim = p.argv[p.argv.index("/bin/sh") + 2]
    assert 'export ROCR_VISIBLE_DEVICES="$SLURM_LOCALID"' in host_shim
    assert dict(p.env)["OMP_NUM_THREADS"] == "7"
    assert program_words(p.argv) == ("python", "train.py")


def test_full_node_masks_only_when_the_job_holds_the_node() -> None:
    # small-g shares nodes: all 8 GCDs but half the CPUs is not the node, so no GPU-to-core masks
    half = dict(LUMI_FULL_NODE, SLURM_JOB_PARTITION="small-g", SLURM_JOB_CPUS_PER_NODE="56", SLURM_CPUS_ON_NODE="56")
    p = plan("srun", "python", "train.py", system="lumi-g", environ=half)
    assert "--cpu-bind=cores" in p.argv
    assert "this job holds 56 CPUs and 8 GPUs per node" in "\n".join(p.reasons)
    # inside a job, srun --exclusive means an exclusive step, not a whole node
    p = plan("srun", "--exclusive", "python", "train.py", system="lumi-g", environ=half)
    assert "--cpu-bind=cores" in p.argv
    # every CPU and GPU of the node on small-g (sbatch --exclusive): masks
    whole = dict(LUMI_FULL_NODE, SLURM_JOB_PARTITION="small-g")
    p = plan("srun", "python", "train.py", system="lumi-g", environ=whole)
    assert any(a.startswith("--cpu-bind=mask_cpu:0x00fe000000000000,") for a in p.argv)
    # no allocation: srun --exclusive asks for whole nodes
    p = plan("srun", "--exclusive", "python", "train.py", system="lumi-g")
    assert any(a.startswith("--cpu-bind=mask_cpu:") for a in p.argv)


@pytest.mark.slurm  # the host shim runs scontrol
def test_a_task_that_owns_two_gcds_gets_both_and_their_cores() -> None:
    p = plan("srun", "python", "train.py", system="lumi-g", environ=LUMI_FULL_NODE_4_TASKS)
    assert "--cpu-bind=mask_cpu:0xfefe000000000000,0x00000000fefe0000,0x000000000000fefe,0x0000fefe00000000" in p.argv
    assert dict(p.env)["OMP_NUM_THREADS"] == "14"
    got = run_host_shim(p.argv, {"SLURM_PROCID": "3", "SLURM_LOCALID": "3", "SLURM_NTASKS": "4", "SLURM_NODEID": "0",
                                 "SLURM_STEP_TASKS_PER_NODE": "4", "SLURM_STEP_NODELIST": "nid005123",
                                 "SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0"})
    assert got["ROCR_VISIBLE_DEVICES"] == "6,7"


def test_threads_never_exceed_the_cores_a_mask_gives() -> None:
    # --ntasks-per-node=4 -c 14 in the user's srun on a full node: each task's 2 GCDs have 14 cores, fine;
    # -c 14 with 8 tasks would be 112 CPUs of 56 cores: threads follow the 7-core mask, not the 14 CPUs
    p = plan("srun", "--ntasks-per-node=8", "-c", "14", "python", "train.py", system="lumi-g", environ=LUMI_FULL_NODE)
    assert any(a.startswith("--cpu-bind=mask_cpu:0x00fe000000000000,") for a in p.argv)
    assert dict(p.env)["OMP_NUM_THREADS"] == "7"


def test_partial_node_numbers_come_from_the_allocation() -> None:
    # CSC's "single node using 2 GPUs": one task with 20 CPUs and 2 V100s
    p = plan("srun", "torchrun", "train.py", system="puhti", environ=PUHTI_2_GPUS)
    assert "--cpus-per-task=20" in p.argv and "--nproc-per-node=2" in p.argv
    assert dict(p.env)["OMP_NUM_THREADS"] == "10"
    # LUMI small-g with 2 GCDs: 2 tasks x 7 cores, not 8 x 7
    p = plan("srun", "python", "train.py", system="lumi-g", environ=LUMI_SMALL_G_2_GCDS)
    assert "--ntasks-per-node=2" in p.argv and "--cpus-per-task=7" in p.argv and "--cpu-bind=cores" in p.argv
    # LUMI full node with 4 tasks x 14 cores: 4 tasks, 14 threads
    p = plan("srun", "python", "train.py", system="lumi-g", environ=LUMI_FULL_NODE_4_TASKS)
    assert "--ntasks-per-node=4" in p.argv and "--cpus-per-task=14" in p.argv


def test_the_users_options_beat_the_allocation() -> None:
    p = plan("srun", "-n1", "-c2", "python", "x.py", environ=LOCAL_FULL)
    assert p.argv[:4] == ("srun", "-n1", "-c2", "--cpu-bind=cores")
    assert dict(p.env)["OMP_NUM_THREADS"] == "2"
    p = plan("srun", "torchrun", "--nproc-per-node=1", "train.py", system="puhti", environ=PUHTI_2_GPUS)
    assert dict(p.env)["OMP_NUM_THREADS"] == "20"


def test_job_ntasks_is_overridden_when_the_step_differs() -> None:
    # srun reads the job's SLURM_NTASKS as -n: 8 tasks would beat --ntasks-per-node=1 and start 4 torchruns per node
    p = plan("srun", "torchrun", "train.py", system="juwels-booster", environ=JUWELS_2_NODES)
    assert "--ntasks-per-node=1" in p.argv and "--ntasks=2" in p.argv
    assert "SLURM_NTASKS=8" in "\n".join(p.reasons)
    p = plan("srun", "torchrun", "train.py", system="puhti", environ=PUHTI_2_FULL_NODES)
    assert not any(a.startswith("--ntasks=") for a in p.argv)


def test_explain_names_the_source_of_each_number() -> None:
    reasons = "\n".join(plan("srun", "torchrun", "train.py", system="puhti", environ=PUHTI_2_GPUS).reasons)
    assert "--cpus-per-task=20: the job's CPUs per node (SLURM_JOB_CPUS_PER_NODE=20)" in reasons
    assert "--nproc-per-node=2: one process per GPU (SLURM_GPUS_ON_NODE=2)" in reasons
    assert "OMP_NUM_THREADS=10: 20 CPUs / 2 processes" in reasons
    reasons = "\n".join(plan("srun", "python", "train.py", system="lumi-g").reasons)
    assert "--ntasks-per-node=8: one task per GPU: 8 GPUs on a lumi-g node (recipes/lumi-g.yaml:" in reasons
    reasons = "\n".join(plan("torchrun", "train.py", host=HostNode(cpus=16, why={"cpus": "16 CPUs in this process's affinity"})).reasons)
    assert "--nproc-per-node=16: 16 CPUs, 1 per process" in reasons


def test_local_recipe_takes_node_facts_from_the_host() -> None:
    workstation = HostNode(cpus=16, why={"cpus": "16 CPUs in this process's affinity"})
    p = plan("torchrun", "train.py", host=workstation)
    assert "--nproc-per-node=16" in p.argv and dict(p.env)["OMP_NUM_THREADS"] == "1"
    p = plan("python", "train.py", host=workstation)
    assert dict(p.env)["OMP_NUM_THREADS"] == "16"
    gpu_box = HostNode(cpus=32, gpus=4, gpu_vendor="nvidia", why={"cpus": "32 CPUs", "gpus": "4 nvidia GPUs"})
    p = plan("torchrun", "train.py", host=gpu_box)
    assert "--nproc-per-node=4" in p.argv and dict(p.env)["OMP_NUM_THREADS"] == "8"
    assert "--nv" in p.argv


def test_combinations_that_cannot_run_well_are_refused_or_warned() -> None:
    # --gpus-per-node=2 and no CPU request: one task per GPU needs 2 CPUs, the job has 1
    no_cpus = dict(LUMI_SMALL_G_NO_TASKS, SLURM_JOB_CPUS_PER_NODE="1", SLURM_CPUS_ON_NODE="1")
    with pytest.raises(UsageError, match=r"2 tasks per node need at least 2 CPUs, but the job holds 1 per node") as info:
        plan("srun", "python", "x.py", system="lumi-g", environ=no_cpus)
    assert "sbatch --cpus-per-task" in info.value.hint
    with pytest.raises(UsageError, match=r"3 tasks per node but this launch has 2 GPUs per node \(SLURM_GPUS_ON_NODE=2\)"):
        plan("srun", "--ntasks-per-node=3", "-c", "1", "python", "x.py", system="lumi-g", environ=LUMI_SMALL_G_2_GCDS)
    with pytest.raises(UsageError, match=r"--nproc-per-node=4 but this launch has 2 GPUs per node"):
        plan("srun", "torchrun", "--nproc-per-node=4", "x.py", system="puhti", environ=PUHTI_2_GPUS)
    with pytest.raises(UsageError, match=r"--cpus-per-task=40 is more than the 20 CPUs per node of the job"):
        plan("srun", "-c", "40", "torchrun", "x.py", system="puhti", environ=PUHTI_2_GPUS)
    p = plan("srun", "python", "train.py", system="puhti", environ=PUHTI_2_GPUS)
    assert any("one process per task, so a DDP script uses one of them" in w for w in p.warnings)
    assert "--ntasks-per-node=2 --cpus-per-task=10" in p.warnings[0]
    p = plan("srun", "python", "train.py", system="puhti", environ={k: v for k, v in PUHTI_2_GPUS.items()
                                                                    if "GPU" not in k and k != "CUDA_VISIBLE_DEVICES"})
    assert any("this job holds no GPUs" in w and "--gres=gpu:v100:4" in w for w in p.warnings)
    p = plan("srun", "torchrun", "--nproc-per-node=4", "x.py", environ=LOCAL_PARTIAL)
    assert any("4 processes share 1 CPU(s)" in w for w in p.warnings)


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
    assert env["SRUN_CPUS_PER_TASK"] == "24" and "--cpus-per-task=24" in p.argv
    assert "CUDA_VISIBLE_DEVICES" not in env  # the job's own (Slurm's) list stands
    assert env["NCCL_SOCKET_IFNAME"] == "ib0"
    assert "--nv" in p.argv
    assert dict(plan("srun", "python", "train.py", system="juwels-booster").env)["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"


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
    with pytest.raises(UsageError, match="--cpus-per-task=64 is more than the 56 usable cores of a lumi-g node"):
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
    assert program_words(p.argv) == ("python", "x.py")


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
    assert got["MASTER_PORT"] == str(20000 + (11112222 * 16) % 12000)
    assert int(got["MASTER_PORT"]) < 32768  # below the ephemeral ports srun and outgoing connections use


def test_wrapper_passes_arguments_and_uses_caller_cwd() -> None:
    from envbuild.launch.wrappers import render_wrapper, wrapped_commands

    script = render_wrapper("torchrun", "/img/env.sif", load_recipe("lumi-g"))
    assert script.startswith("#!/bin/sh\n")
    assert 'exec "$runtime" --quiet exec --bind "$PWD" --pwd "$PWD" $binds "$image"' in script
    assert script.rstrip().endswith('exec "$@"\' torchrun "$@"')
    assert "OMP_NUM_THREADS=$((cpus / procs))" in script  # computed where the wrapper runs, not from the recipe
    assert "envrun-task 'envrun_activate()" in script and "envrun-rank" not in script  # the caller's torchrun options, untouched
    assert wrapped_commands(["pip", "activate", "Activate.ps1", "transformers", "python", "torchrun"]) == [
        "pip", "python", "torchrun", "transformers"]


def test_wrappers_never_replace_files_envbuild_did_not_write(tmp_path) -> None:
    from envbuild.builder.execute.wrapperfiles import is_replaceable_wrapper
    from envbuild.launch.wrappers import render_wrapper

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


def test_overlays_are_bound_after_the_other_binds_and_go_first_on_path() -> None:
    p = plan("python", "x.py", binds=("/data",), overlays=TWO_OVERLAYS)
    binds = [p.argv[i + 1] for i, a in enumerate(p.argv) if a == "--bind"]
    assert binds == ["/work/proj", "/data", "/work/proj/env.sqsh:/user-software:image-src=/,ro",
                     "/work/proj/dev tools.sqsh:/user-dev:image-src=/,ro"]
    body = words_after(p.argv, "envrun-task")[0]
    assert "export PATH=/user-dev/bin:/user-software/bin:\"$PATH\" VIRTUAL_ENV=/user-dev\n" in body
    assert body.index("WITH_CONDA") < body.index("export PATH=")
    assert program_words(p.argv) == ("python", "x.py")


def test_torchrun_runs_with_the_overlays_python() -> None:
    p = plan("srun", "torchrun", "--nnodes=1", "train.py", overlays=ONE_OVERLAY)
    assert program_words(p.argv)[:5] == ("python", "-m", "torch.distributed.run", "--nproc-per-node=2", "--nnodes=1")
    assert "torchrun" not in p.argv
    assert words_after(p.argv, "envrun-rank") == ("train.py",)


def test_two_overlays_at_one_mount_point_are_refused() -> None:
    with pytest.raises(UsageError, match=r"overlays /a\.sqsh and /b\.sqsh both mount at /user-software") as info:
        plan("python", "x.py", overlays=(("/a.sqsh", "/user-software"), ("/b.sqsh", "/user-software")))
    assert "another mount point" in info.value.hint
    with pytest.raises(UsageError, match=r"overlay file /a:b.sqsh contains ':' or ','"):
        plan("python", "x.py", overlays=(("/a:b.sqsh", "/user-software"),))


def test_caller_warnings_and_notes_reach_the_script() -> None:
    p = plan_launch(LaunchRequest(command=("python", "x.py"), image="/img/env.sif", recipe=load_recipe("local"),
                                  runtime=RUNTIME, cwd="/w", host=HOST, warnings=("overlay built for another base",),
                                  notes=("image /img/env.sif: --image",)))
    assert p.warnings[0] == "overlay built for another base"
    assert "# warning: overlay built for another base\n" in p.script()
    assert "# image /img/env.sif: --image\n" in p.script()


def test_wrapper_with_an_overlay() -> None:
    from envbuild.launch.wrappers import render_wrapper

    script = render_wrapper("torchrun", "/img/base.sif", load_recipe("local"), overlays=(("/p/env.sqsh", "/user-software"),))
    assert "--bind /p/env.sqsh:/user-software:image-src=/,ro --pwd \"$PWD\"" in script
    assert script.rstrip().endswith('exec "$@"\' python -m torch.distributed.run "$@"')
    assert "VIRTUAL_ENV=/user-software" in script
