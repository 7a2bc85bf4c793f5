"""Two nodes: two slurmd in network and UTS namespaces on this machine (provision/cluster.sh start
--nodes 2; loopback and a private bridge only). envrun sets up the c10d rendezvous and MASTER_ADDR."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO, reports, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.apptainer, pytest.mark.slurm]
ENVRUN = str(REPO / "bin/envrun")


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


def test_sbatch_stages_data_once_per_node(two_nodes: None, reference_image: Path, tmp_path: Path) -> None:
    """envrun sbatch --stage on two nodes: the archive is extracted once on each node (the two test nodes
    share this machine's /tmp, so the second finds the first's copy), every task reads the staged file through
    {staged}, and the staged data is removed when the job ends (the local recipe's staging.cleanup)."""
    import json
    import tarfile

    data = tmp_path / "data"
    data.mkdir()
    (data / "shard-0.txt").write_text("tokens 0 1 2\n")
    with tarfile.open(tmp_path / "data.tar.gz", "w:gz") as archive:
        archive.add(data, arcname="data")
    (tmp_path / "show_staged.py").write_text(
        "import json, os, socket, sys\n"
        "root = sys.argv[1]\n"
        "print('STAGED ' + json.dumps({'host': socket.gethostname(), 'rank': int(os.environ['RANK']),\n"
        "      'root': root, 'same': root == os.environ['ENVRUN_STAGED'],\n"
        "      'text': open(os.path.join(root, 'shard-0.txt')).read()}), flush=True)\n")
    result = run_cli([ENVRUN, "sbatch", "--system", "local", "--image", str(reference_image), "--nodes", "2",
                      "--launcher", "srun", "--stage", "data.tar.gz", "--submit", "--wait", "--",
                      "python", "show_staged.py", "{staged}"], cwd=tmp_path, timeout=600)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    job_id = result.stdout.splitlines()[0]
    found = [json.loads(line.split(" ", 1)[1]) for line in result.stdout.splitlines() if line.startswith("STAGED ")]
    assert sorted(r["rank"] for r in found) == [0, 1, 2, 3]
    assert sorted({r["host"] for r in found}) == ["node1", "node2"]
    assert all(r["same"] and r["text"] == "tokens 0 1 2\n" for r in found)
    assert {r["root"] for r in found} == {f"/tmp/envrun-stage-{job_id}/data/data"}
    for node in ("node1", "node2"):  # the stage step ran once on each node
        assert sum(f" on {node} in " in line for line in out.splitlines() if "envrun: staged to" in line) == 1, out
    assert not Path(f"/tmp/envrun-stage-{job_id}").exists()


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


def test_doctor_checks_each_node_of_a_two_node_allocation(two_nodes: None, reference_image: Path) -> None:
    """envrun doctor in a 2-node allocation: one record per node (the nodes' hostnames), torch answering inside the
    container on both, and the --probe all-reduce across the nodes (gloo: no GPU here)."""
    import json

    result = run_cli(["salloc", "-N2", "--ntasks-per-node=1", ENVRUN, "doctor", "--image", str(reference_image),
                      "--probe", "--json"], timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    found = json.loads(result.stdout)["findings"]
    in_container = [f for f in found if f["area"] == "torch" and "in the container" in f["what"]]
    assert sorted(f["node"] for f in in_container) == ["node1", "node2"]
    assert all(f["level"] == "ok" for f in in_container)
    assert not [f for f in found if f["level"] == "fail"]
    probe = " ".join(f["what"] for f in found if f["area"] == "probe")
    assert "gloo backend" in probe and "ranks answered" in probe


def test_a_recipe_drafted_on_two_nodes_launches_ddp_across_them(two_nodes: None, reference_image: Path,
                                                                 tmp_path: Path) -> None:
    """`envrun recipe draft` on the two-node cluster describes its nodes (both alike), and `envrun --system FILE`
    launches 2 tasks on each of them from it: one world of four."""
    recipe = tmp_path / "twonodes.yaml"
    drafted = run_cli([ENVRUN, "recipe", "draft", "-o", str(recipe)], timeout=120)
    assert drafted.returncode == 0, drafted.stderr
    text = recipe.read_text()
    assert "scontrol show node node1" in text and "Its nodes differ" not in text and "  debug: {" in text
    result = run_cli([ENVRUN, "--system", str(recipe), "--image", str(reference_image), "--explain", "srun", "-N", "2",
                      "--ntasks-per-node=2", "python", "examples/ddp_minimal.py", "--steps", "10", "--json"], timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    check_world_of_four(result.stdout)
    assert f"system twonodes: --system {recipe}" in result.stderr
