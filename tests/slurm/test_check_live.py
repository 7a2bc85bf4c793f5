"""`envrun sbatch --check` on the local test cluster asks the cluster itself (issue 38): a partition that does not
exist, a time over a partition's MaxTime (`short`, 10 minutes: provision/cluster.sh), more GPUs per node than the
nodes have, and `--test-only` with sbatch's own answer, each a finding; every fact says where it came from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli

pytestmark = [pytest.mark.slurm]
ENVRUN = str(REPO / "bin/envrun")


def check(tmp_path: Path, directives: str, *more: str) -> tuple[int, dict[str, object]]:
    (tmp_path / "train.py").write_text("print('trained')\n")
    (tmp_path / "job.sh").write_text("#!/bin/bash\n" + directives + "srun python train.py\n")
    result = run_cli([ENVRUN, "sbatch", "--check", "job.sh", "--json", *more], cwd=tmp_path, timeout=120)
    assert result.returncode in (0, 1), result.stdout + result.stderr
    return result.returncode, json.loads(result.stdout)


def rules(data: dict[str, object]) -> list[tuple[str, str]]:
    return [(f["rule"], f["what"]) for f in data["findings"]]  # type: ignore[index, union-attr]


def test_a_partition_this_cluster_does_not_have(tmp_path: Path) -> None:
    code, data = check(tmp_path, "#SBATCH --partition=kempner_dev\n#SBATCH --time=00:05:00\n")
    assert code == 1
    (finding,) = [f for f in data["findings"] if f["rule"] == "cluster_partition"]  # type: ignore[union-attr]
    assert finding["what"] == "--partition=kempner_dev: this cluster (envbuild-local) has no partition kempner_dev"
    assert "debug" in finding["why"] and "scontrol show partition/node on envbuild-local" in finding["source"]
    assert any("checked against envbuild-local" in note for note in data["notes"])  # type: ignore[union-attr]


def test_a_time_over_the_partitions_limit_and_more_gpus_than_a_node_has(tmp_path: Path) -> None:
    code, data = check(tmp_path, "#SBATCH -p short\n#SBATCH --time=00:20:00\n#SBATCH --gpus-per-node=8\n")
    assert code == 1
    assert rules(data) == [("cluster_limits", "--time=00:20:00 is over the time limit of short (00:10:00)"),
                           ("cluster_limits", "--gpus-per-node=8: short has at most 4 GPUs per node")]


def test_test_only_gives_slurms_own_answer(tmp_path: Path) -> None:
    code, data = check(tmp_path, "#SBATCH --partition=nope\n#SBATCH --time=00:05:00\n", "--test-only")
    assert code == 1
    (refused,) = [f for f in data["findings"] if f["rule"] == "sbatch_test_only"]  # type: ignore[union-attr]
    assert "invalid partition" in refused["what"].lower()
    code, data = check(tmp_path, "#SBATCH --time=00:05:00\n", "--test-only")
    assert code == 0, data
    (accepted,) = [f for f in data["findings"] if f["rule"] == "sbatch_test_only_accepted"]  # type: ignore[union-attr]
    assert accepted["level"] == "info" and "to start at" in accepted["what"]
