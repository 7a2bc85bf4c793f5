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
