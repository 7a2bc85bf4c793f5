"""Two nodes: two slurmd in network and UTS namespaces on this machine (provision/cluster.sh start
--nodes 2; loopback and a private bridge only). envrun sets up the c10d rendezvous and MASTER_ADDR."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, reports, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.apptainer, pytest.mark.slurm]
ENVRUN = str(REPO / "bin/envrun")
CLUSTER = str(REPO / "provision/cluster.sh")


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[None]:
    subprocess.run(["bash", CLUSTER, "start", "--nodes", "2"], check=True, capture_output=True, text=True, timeout=180)
    try:
        yield
    finally:
        # back to the single-node cluster the other tests use
        subprocess.run(["bash", CLUSTER, "start", "--nodes", "1"], check=True, capture_output=True, text=True, timeout=180)


def check_world_of_four(output: str) -> list[dict]:
    found = reports(output)
    assert [r["rank"] for r in found] == [0, 1, 2, 3]
    assert all(r["world_size"] == 4 and r["params_agree"] for r in found)
    assert len({r["param_checksum"] for r in found}) == 1
    assert sorted({r["host"] for r in found}) == ["node1", "node2"]
    return found


def test_srun_torchrun_two_nodes_two_processes_each(two_nodes: None, reference_image: Path) -> None:
    result = run_cli([ENVRUN, "--image", str(reference_image), "--explain", "srun", "-N", "2", "torchrun",
                      "examples/ddp_minimal.py", "--steps", "10", "--json"], timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    found = check_world_of_four(result.stdout)
    assert sorted(r["local_rank"] for r in found) == [0, 0, 1, 1]
    assert "c10d rendezvous" in result.stderr


def test_srun_python_two_nodes_two_tasks_each(two_nodes: None, reference_image: Path) -> None:
    result = run_cli([ENVRUN, "--image", str(reference_image), "srun", "-N", "2", "python",
                      "examples/ddp_minimal.py", "--steps", "10", "--json"], timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    check_world_of_four(result.stdout)


def test_batch_job_with_one_cpu_per_task_runs_srun_torchrun(two_nodes: None, reference_image: Path, tmp_path: Path) -> None:
    """CSC's pytorch-ddp-examples shape: --nodes=2 --ntasks-per-node=1 --cpus-per-task=1, then `envrun srun torchrun`
    in the batch script. envrun sizes the step from the job (1 CPU, 1 process per node), not from the recipe."""
    output = tmp_path / "job.out"
    script = (f"{ENVRUN} --image {reference_image} --explain srun torchrun examples/ddp_minimal.py --steps 10 --json")
    result = subprocess.run(["sbatch", "-W", "--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=1", "-o", str(output),
                             "--wrap", script], capture_output=True, text=True, timeout=600, cwd=REPO)
    text = output.read_text() if output.exists() else ""
    assert result.returncode == 0, result.stdout + result.stderr + text
    found = reports(text)
    assert [r["rank"] for r in found] == [0, 1] and all(r["world_size"] == 2 and r["params_agree"] for r in found)
    assert sorted(r["host"] for r in found) == ["node1", "node2"]
    assert all(r["omp_num_threads"] == "1" for r in found)
    assert "--cpus-per-task=1: the job's CPUs per node (SLURM_JOB_CPUS_PER_NODE=1(x2))" in text


def test_srun_accelerate_launch_two_nodes(two_nodes: None, reference_image: Path) -> None:
    """One `accelerate launch` per node: --machine_rank from $SLURM_NODEID, the first node as main process,
    2 processes per node (one per CPU), ddp_minimal.py reading the torch variables accelerate's launcher sets."""
    result = run_cli([ENVRUN, "--image", str(reference_image), "--explain", "srun", "-N", "2", "accelerate", "launch",
                      "examples/ddp_minimal.py", "--steps", "10", "--json"], timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    found = check_world_of_four(result.stdout)
    assert sorted(r["local_rank"] for r in found) == [0, 0, 1, 1]
    assert "--machine_rank=$SLURM_NODEID" in result.stderr


def test_srun_accelerate_launch_two_nodes_accelerator(two_nodes: None, reference_image: Path) -> None:
    """The same with Accelerator(): the four processes form one gloo group (MULTI_CPU) across both nodes."""
    result = run_cli([ENVRUN, "--image", str(reference_image), "srun", "-N", "2", "accelerate", "launch",
                      "examples/accelerate_ddp.py", "--epochs", "1"], timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    found = reports(result.stdout, "EXAMPLE_REPORT")
    assert [r["rank"] for r in found] == [0, 1, 2, 3]
    assert all(r["world_size"] == 4 and r["params_agree"] and r["distributed_type"] == "MULTI_CPU" for r in found)
    assert sorted({r["host"] for r in found}) == ["node1", "node2"]
