"""Reading the job's allocation and the host's node facts (envbuild.launch.allocation)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from envbuild.host.node import count_devices, read_host_node
from envbuild.launch.allocation import count_gpus, read_allocation, smallest_count
from tests.conftest import REPO
from tests.support.launch_allocations import LUMI_4_NODES, PUHTI_2_GPUS


def test_outside_a_job_there_is_no_allocation() -> None:
    assert read_allocation({"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "0"}) is None


@pytest.mark.parametrize(("text", "count"), [("2", 2), ("40(x2),20", 20), ("112(x4)", 112), ("", None), ("x", None)])
def test_smallest_count(text: str, count: int | None) -> None:
    assert smallest_count(text) == count


@pytest.mark.parametrize(("text", "count"), [("4", 4), ("v100:2", 2), ("gpu:a100:2", 2), ("a100:2,v100:1", 3), ("v100", None)])
def test_count_gpus(text: str, count: int | None) -> None:
    assert count_gpus(text) == count


def test_count_devices() -> None:
    assert count_devices("0,1") == 2 and count_devices("") == 0 and count_devices("NoDevFiles") == 0
    assert count_devices("GPU-3f1a,GPU-9b2c") == 2


def test_recorded_jobs_read_back() -> None:
    puhti = read_allocation(PUHTI_2_GPUS)
    assert puhti is not None
    assert (puhti.nodes, puhti.tasks_per_node, puhti.cpus_per_task, puhti.cpus_on_node, puhti.gpus_on_node) == (1, 1, 20, 20, 2)
    assert puhti.why["gpus_on_node"] == "SLURM_GPUS_ON_NODE=2"
    assert puhti.why["tasks_per_node"] == "SLURM_NTASKS=1 over 1 node"
    lumi = read_allocation(LUMI_4_NODES)
    assert lumi is not None
    assert (lumi.nodes, lumi.tasks_per_node, lumi.cpus_per_task, lumi.cpus_on_node, lumi.gpus_on_node) == (4, 1, None, 112, 8)
    assert lumi.partition == "standard-g"


def test_gpu_count_falls_back_to_the_visible_devices() -> None:
    got = read_allocation({"SLURM_JOB_ID": "1", "SLURM_GPUS_PER_NODE": "a100:2"})
    assert got is not None and got.gpus_on_node == 2
    got = read_allocation({"SLURM_JOB_ID": "1", "ROCR_VISIBLE_DEVICES": "0,1,2"})
    assert got is not None and got.gpus_on_node == 3 and got.why["gpus_on_node"] == "ROCR_VISIBLE_DEVICES=0,1,2"
    got = read_allocation({"SLURM_JOB_ID": "1"})
    assert got is not None and got.gpus_on_node is None and got.tasks_per_node is None


def test_uneven_ntasks_are_not_a_per_node_count() -> None:
    got = read_allocation({"SLURM_JOB_ID": "1", "SLURM_JOB_NUM_NODES": "2", "SLURM_NTASKS": "3"})
    assert got is not None and got.tasks_per_node is None and got.ntasks == 3


def test_host_node_counts_driver_gpus_narrowed_by_visible_devices() -> None:
    listing = {"/proc/driver/nvidia/gpus": ["0000:07:00.0", "0000:0b:00.0", "0000:48:00.0", "0000:4c:00.0"]}
    host = read_host_node({}, cpus=32, listdir=lambda path: listing.get(path, []))
    assert (host.cpus, host.gpus, host.gpu_vendor) == (32, 4, "nvidia")
    host = read_host_node({"CUDA_VISIBLE_DEVICES": "1"}, cpus=32, listdir=lambda path: listing.get(path, []))
    assert host.gpus == 1 and host.why["gpus"] == "1 nvidia GPUs (CUDA_VISIBLE_DEVICES=1)"
    host = read_host_node({"CUDA_VISIBLE_DEVICES": "0"}, cpus=2, listdir=lambda path: [])
    assert (host.gpus, host.gpu_vendor) == (0, "none")


def test_host_node_defaults_to_this_process_affinity() -> None:
    import os

    assert read_host_node({}).cpus == len(os.sched_getaffinity(0))


SHOW_ALLOCATION = ("import json, os; from envbuild.launch.allocation import gpus_from_scontrol, read_allocation; "
                   "a = read_allocation(os.environ); unknown = a.gpus_on_node is None; gpus_from_scontrol(a); "
                   "print(json.dumps({k: getattr(a, k) for k in ('tasks_per_node', 'cpus_per_task', 'cpus_on_node', "
                   "'gpus_on_node', 'in_step')} | {'gpus_from_scontrol': unknown}))")


@pytest.mark.slurm
def test_a_real_job_reads_as_asked() -> None:
    """What the real Slurm sets for a job of `-n1 -c2 --gres=gpu:2`, read back in the job (salloc) and in a step."""
    python = [sys.executable, "-c", SHOW_ALLOCATION]
    result = subprocess.run(["salloc", "-n1", "-c2", "--gres=gpu:2", "sh", "-c", '"$@" && srun "$@"', "sh", *python],
                            capture_output=True, text=True, timeout=120, cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    job, step = (json.loads(line) for line in result.stdout.splitlines() if line.startswith("{"))
    # salloc's shell runs off the node and has no GPU variable: scontrol tells
    assert job == {"tasks_per_node": 1, "cpus_per_task": 2, "cpus_on_node": 2, "gpus_on_node": 2, "in_step": False,
                   "gpus_from_scontrol": True}
    assert step == {**job, "in_step": True, "gpus_from_scontrol": False}


def test_scontrol_tres_forms() -> None:
    from envbuild.launch.allocation import Allocation, gpus_from_scontrol

    for tres, count in [("gres:gpu:2", 2), ("gres/gpu:a100:4", 4), ("gres:nvme:200,gres:gpu:v100:3", 3), ("gres:gpu", 1)]:
        allocation = Allocation(job_id="7")
        gpus_from_scontrol(allocation, run=lambda argv, tres=tres: f"JobId=7 NumNodes=1 TresPerNode={tres} Foo=bar\n")
        assert allocation.gpus_on_node == count, tres
    allocation = Allocation(job_id="7")
    gpus_from_scontrol(allocation, run=lambda argv: (_ for _ in ()).throw(OSError("no scontrol")))
    assert allocation.gpus_on_node is None


@pytest.mark.parametrize(("text", "count"), [("gpu:v100:2,nvme:200", 2), ("nvme:200,gpu:4", 4), ("gres:gpu:2", 2),
                                             ("gres/gpu:a100:4", 4), ("gpu", 1), ("gpu:v100", 1), ("nvme:200", None)])
def test_gres_gpus(text: str, count: int | None) -> None:
    """One reader for srun's --gres and scontrol's TresPerNode."""
    from envbuild.launch.allocation import gres_gpus

    assert gres_gpus(text) == count
