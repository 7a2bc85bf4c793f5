"""Sweep points from --nodes / --gpus (pure)."""

from __future__ import annotations

import pytest

from envbuild.shared.errors import UsageError
from envbuild.slurm.sweep.points import ScalePoint, parse_counts, plan_points, plural


def test_counts_are_sorted_positive_and_unique() -> None:
    assert parse_counts("4, 1,2", "--nodes") == [1, 2, 4]
    for bad in ("", "1,x", "0,1", "-1", "1,1"):
        with pytest.raises(UsageError):
            parse_counts(bad, "--nodes")


def test_gpus_fill_one_node_then_whole_nodes() -> None:
    points = plan_points("gpus", [1, 2, 4, 8, 16], per_node_capacity=4)
    assert [(p.nodes, p.per_node, p.workers) for p in points] == [(1, 1, 1), (1, 2, 2), (1, 4, 4), (2, 4, 8), (4, 4, 16)]
    assert [p.key for p in points] == ["1n1g", "1n2g", "1n4g", "2n4g", "4n4g"]


def test_a_gpu_count_that_does_not_fill_whole_nodes_is_refused_with_the_neighbours() -> None:
    with pytest.raises(UsageError) as caught:
        plan_points("gpus", [6], per_node_capacity=4)
    assert caught.value.hint == "use 4 or 8"


def test_nodes_take_every_gpu_or_process_of_a_node() -> None:
    points = plan_points("nodes", [4, 8, 16, 32], per_node_capacity=4)
    assert [p.workers for p in points] == [16, 32, 64, 128]
    cpu = plan_points("nodes", [1, 2], per_node_capacity=2, unit="process")
    assert [p.key for p in cpu] == ["1n2p", "2n2p"]
    assert cpu[1].describe() == "2 nodes x 2 processes"


def test_plural() -> None:
    assert (plural("GPU"), plural("process"), plural("process", 1)) == ("GPUs", "processes", "process")
    assert ScalePoint(1, 1, "GPU").describe() == "1 node x 1 GPU"
