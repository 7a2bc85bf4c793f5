"""What the cluster says (envbuild.slurm.cluster) and the rules that check a script against it (issue 38):
scontrol's --oneliner output (one recording of the test cluster's real output, one written in its shape for a
site with several partitions: tests/fixtures/scontrol/README.md)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from envbuild.slurm.check.pitfalls import check_script
from envbuild.slurm.cluster import ClusterFacts, expand_hostlist, parse_nodes, parse_partitions, read_live_cluster

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "scontrol"


def site() -> ClusterFacts:
    return ClusterFacts(name="site", read_at="2026-11-28T12:00",
                        partitions=parse_partitions((FIXTURES / "site-partition.txt").read_text()),
                        nodes=parse_nodes((FIXTURES / "site-node.txt").read_text()))


def test_the_test_clusters_own_output() -> None:
    partitions = parse_partitions((FIXTURES / "local-partition.txt").read_text())
    nodes = parse_nodes((FIXTURES / "local-node.txt").read_text())
    (debug,) = partitions.values()
    assert (debug.name, debug.max_time_s, debug.default, debug.nodes) == ("debug", None, True, ("vm",))
    (node,) = nodes.values()
    assert (node.cpus, node.gpus, node.features) == (2, 4, ())
    assert node.memory_mb and node.memory_mb > 1000


def test_a_site_with_several_partitions() -> None:
    facts = site()
    assert sorted(facts.partitions) == ["cpu", "gpu", "gpu_dev"]
    assert facts.partitions["gpu"].max_time_s == 2 * 86400 and facts.partitions["gpu_dev"].max_time_s == 1800
    assert facts.partitions["cpu"].nodes == (*(f"c0{i}" for i in range(1, 9)), "c10")
    assert facts.default_partition() is not None and facts.default_partition().name == "cpu"  # type: ignore[union-attr]
    g1 = facts.nodes["g001"]
    assert (g1.gpus, g1.gpu_type, g1.features, g1.cpus) == (4, "a100", ("a100", "ib"), 64)
    assert "Wed Nov 8 2023" not in g1.name and facts.nodes["c10"].gpus == 0  # a value with spaces stays one value


@pytest.mark.parametrize(("text", "names"), [
    ("n[001-003,007],g1", ("n001", "n002", "n003", "n007", "g1")),
    ("vm", ("vm",)), ("(null)", ()), ("a[1-2]-ib", ("a1-ib", "a2-ib")),
])
def test_host_lists(text: str, names: tuple[str, ...]) -> None:
    assert expand_hostlist(text) == names


def rules(text: str) -> list[tuple[int, str, str]]:
    report = check_script("#!/bin/bash\n" + text + "srun python train.py\n", None, {}, syntax_error=None,
                          cluster=site())
    return [(f.line, f.rule, f.what) for f in report.findings if f.rule.startswith("cluster_")]


def test_a_partition_that_does_not_exist() -> None:
    assert rules("#SBATCH --partition=kempner_dev,gpu\n") == [
        (2, "cluster_partition", "--partition=kempner_dev,gpu: this cluster (site) has no partition kempner_dev")]


def test_time_over_the_partitions_limit() -> None:
    assert rules("#SBATCH --partition=gpu_dev\n#SBATCH --time=01:00:00\n") == [
        (3, "cluster_limits", "--time=01:00:00 is over the time limit of gpu_dev (00:30:00)")]
    assert rules("#SBATCH --partition=gpu_dev,gpu\n#SBATCH --time=01:00:00\n") == []  # gpu takes it


def test_gpus_where_the_partition_has_none_or_fewer() -> None:
    assert rules("#SBATCH --gpus-per-node=4\n") == [(2, "cluster_limits", "--gpus-per-node=4: cpu has no GPUs")]
    assert rules("#SBATCH -p gpu\n#SBATCH --gres=gpu:8\n") == [
        (3, "cluster_limits", "--gres=gpu:8: gpu has at most 4 GPUs per node")]


def test_nodes_memory_and_features() -> None:
    found = rules("#SBATCH -p gpu\n#SBATCH --nodes=5\n#SBATCH --mem=600G\n#SBATCH --constraint=a100|h100\n")
    assert [line for line, _rule, _what in found] == [3, 4]
    assert rules("#SBATCH -p gpu\n#SBATCH -C h100\n") == [(3, "cluster_limits", "-C h100: no node of gpu has h100")]


def test_without_facts_nothing_is_said_of_the_cluster() -> None:
    report = check_script("#!/bin/bash\n#SBATCH -p nowhere\nsrun python x.py\n", None, {}, syntax_error=None)
    assert not [f for f in report.findings if f.rule.startswith("cluster_")]


def test_no_slurm_gives_no_facts() -> None:
    def missing(*_args: object, **_kwargs: object) -> subprocess.Popen[str]:
        raise FileNotFoundError("scontrol")

    assert read_live_cluster("x", start=missing).facts is None
