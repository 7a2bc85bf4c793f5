"""Which resources `envrun sbatch` asks for, per system (pure): partitions, GPUs, CPUs, memory, time, account."""

from __future__ import annotations

import pytest

from envbuild.host.node import HostNode
from envbuild.recipes.loadrecipe import load_recipe
from envbuild.shared.errors import UsageError
from envbuild.slurm.batch.resources import JobRequest, plan_resources


def plan(system: str, **request):
    request.setdefault("account", "project_1")
    return plan_resources(load_recipe(system), JobRequest(**request), HostNode(cpus=2))


def options(resources) -> list[str]:
    return [d.option for d in resources.directives]


@pytest.mark.parametrize(("system", "request_", "partition"), [
    ("lumi-g", {}, "standard-g"),
    ("lumi-g", {"gpus_per_node": 4}, "small-g"),
    ("lumi-g", {"nodes": 4}, "standard-g"),
    ("lumi-g", {"gpus_per_node": 1, "test": True}, "dev-g"),
    ("mahti", {"gpus_per_node": 1}, "gpusmall"),
    ("mahti", {"gpus_per_node": 2}, "gpusmall"),
    ("mahti", {}, "gpumedium"),
    ("mahti", {"nodes": 2}, "gpumedium"),
    ("mahti", {"gpus_per_node": 1, "test": True}, "gputest"),
    ("puhti", {"gpus_per_node": 1}, "gpu"),
    ("puhti", {"nodes": 2}, "gpu"),
    ("puhti", {"test": True}, "gputest"),
    ("juwels-booster", {"nodes": 2}, "booster"),
    ("juwels-booster", {"test": True}, "develbooster"),
    ("lumi-c", {}, "standard"),
])
def test_the_smallest_partition_that_fits(system: str, request_: dict, partition: str) -> None:
    assert plan(system, **request_).partition == partition


def test_a_partial_node_spanning_nodes_goes_to_a_whole_node_partition_with_a_warning() -> None:
    resources = plan("mahti", nodes=2, gpus_per_node=2)
    assert resources.partition == "gpumedium"
    assert "billed for 4 GPUs per node but uses 2" in resources.warnings[0]


@pytest.mark.parametrize(("launcher", "tasks", "cpus"), [("torchrun", 1, 56), ("accelerate", 1, 56),
                                                          ("deepspeed", 1, 56), ("srun", 8, 7)])
def test_tasks_and_cpus_follow_the_launcher(launcher: str, tasks: int, cpus: int) -> None:
    resources = plan("lumi-g", launcher=launcher)
    assert (resources.tasks_per_node, resources.cpus_per_task) == (tasks, cpus)


def test_part_of_a_node_gets_the_cores_and_memory_of_its_gpus() -> None:
    resources = plan("lumi-g", gpus_per_node=2)
    assert "--cpus-per-task=14" in options(resources) and "--mem=120G" in options(resources)
    assert "--gpus-per-node=2" in options(resources)


def test_juwels_counts_hardware_threads() -> None:
    assert plan("juwels-booster", launcher="srun").cpus_per_task == 24
    assert plan("juwels-booster").cpus_per_task == 96


def test_mahti_memory_comes_with_the_gpus() -> None:
    resources = plan("mahti", gpus_per_node=2)
    assert resources.memory_gb is None and not any(o.startswith("--mem") for o in options(resources))


def test_local_cpu_job_uses_the_host() -> None:
    resources = plan_resources(load_recipe("local"), JobRequest(launcher="srun"), HostNode(cpus=2))
    assert (resources.partition, resources.tasks_per_node, resources.cpus_per_task) == ("debug", 2, 1)
    assert resources.account is None


def test_time_defaults_to_an_hour_or_the_test_partition_limit() -> None:
    assert plan("lumi-g").time == "01:00:00"
    assert plan("puhti", test=True).time == "00:15:00"
    assert plan("lumi-g", time="90").time == "01:30:00"
    assert plan("lumi-g", time="2-00:00:00").time == "2-00:00:00"


@pytest.mark.parametrize(("given", "written"), [("2h", "02:00:00"), ("90s", "00:01:30"), ("1.5h", "01:30:00"),
                                                ("1d", "1-00:00:00"), ("30M", "00:30:00")])
def test_time_takes_the_one_duration_grammar_and_writes_slurms_form(given: str, written: str) -> None:
    """envrun sbatch --time 2h (issue 31): the grammar of --step-timeout, written back as Slurm reads it."""
    assert plan("lumi-g", time=given).time == written


@pytest.mark.parametrize(("system", "request_", "message", "fix"), [
    ("lumi-g", {"account": None}, "lumi-g needs an account for every job", "--account project_465000000"),
    ("puhti", {"gpus_per_node": 8}, "--gpus-per-node 8, but a puhti node: 4 GPUs",
     "--nodes 2 --gpus-per-node 4"),
    ("puhti", {"test": True, "nodes": 3}, "no puhti test partition fits 3 node(s)", "fewer nodes"),
    ("lumi-g", {"time": "4-00:00:00"}, "standard-g: at most 2-00:00:00", "less time"),
    ("mahti", {"partition": "gpusmall", "gpus_per_node": 4}, "partition gpusmall (--partition): at most 2 GPUs",
     "leave out --partition"),
    ("lumi-g", {"partition": "eap"}, "partition eap (--partition) no longer exists on lumi-g", "small-g"),
    ("lumi-g", {"partition": "gpu"}, "lumi-g has no partition gpu", "standard-g"),
    ("lumi-g", {"time": "soon"}, "--time: 'soon' is not a duration", "90s, 30m, 2h"),
    ("juwels-booster", {"stage_gb": 1.0}, "juwels-booster nodes have no node-local storage", "leave out --stage"),
    ("lumi-g", {"gpus_per_node": 1, "stage_gb": 20.0}, "20.0 GB is too much for /tmp/envrun-stage-${SLURM_JOB_ID}",
     "/flash or /scratch"),
    ("puhti", {"stage_gb": 5000.0}, "does not fit the 3600 GB of node-local disk", "subset"),
])
def test_refusals_say_what_and_how_to_fix(system: str, request_: dict, message: str, fix: str) -> None:
    with pytest.raises(UsageError) as caught:
        plan(system, **request_)
    assert message in caught.value.message
    assert fix in (caught.value.hint or "")


def test_lumi_staging_in_ram_fits_a_quarter_of_the_jobs_memory() -> None:
    assert plan("lumi-g", stage_gb=100.0).stage_gres_gb is None  # full node: 480G, up to 120 GB staged
    with pytest.raises(UsageError, match="more than a quarter of it \\(120 GB\\)"):
        plan("lumi-g", stage_gb=130.0)


def test_csc_staging_asks_for_nvme_with_the_gpus() -> None:
    resources = plan("mahti", gpus_per_node=2, stage_gb=100.0)
    assert "--gres=gpu:a100:2,nvme:121" in options(resources)


# -- processes per node on nodes without GPUs (envrun sweep --gpus there) --------------------------------

def test_cpu_processes_per_node_size_the_share_of_the_node() -> None:
    torchrun = plan("local", processes_per_node=1)
    assert (torchrun.tasks_per_node, torchrun.cpus_per_task) == (1, 1)
    srun = plan("local", processes_per_node=2, launcher="srun")
    assert (srun.tasks_per_node, srun.cpus_per_task) == (2, 1)


def test_cpu_processes_per_node_beyond_the_node_are_refused() -> None:
    with pytest.raises(UsageError, match="fits 1 to 2"):
        plan("local", processes_per_node=3)


def test_processes_per_node_are_not_for_gpu_nodes() -> None:
    with pytest.raises(UsageError, match="processes per node were asked for on nodes with 4 GPUs"):
        plan("mahti", processes_per_node=2)
