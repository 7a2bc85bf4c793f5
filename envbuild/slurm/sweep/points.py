"""The scale points of a sweep: `--nodes 1,2,4` or `--gpus 1,2,4,8` turned into (nodes, per node) pairs that a
batch job can ask for. Pure.

On nodes without GPUs `--gpus` counts training processes (one per `cores_per_process` CPUs of the node, as
envrun's launch sizing counts them), so the same sweep runs on a CPU cluster and on a laptop's Slurm.
"""

from __future__ import annotations

from dataclasses import dataclass

from envbuild.shared.errors import UsageError

AXES = ("nodes", "gpus")


@dataclass(frozen=True)
class ScalePoint:
    """One point: `nodes` nodes with `per_node` GPUs (or training processes, unit "process") each."""

    nodes: int
    per_node: int
    unit: str = "GPU"  # "GPU" or "process"

    @property
    def workers(self) -> int:
        """GPUs or processes in all: the scale the speed-up is measured against."""
        return self.nodes * self.per_node

    @property
    def key(self) -> str:
        """A name for files and the state file: 2n4g (2 nodes x 4 GPUs), 1n2p (1 node x 2 processes)."""
        return f"{self.nodes}n{self.per_node}{'g' if self.unit == 'GPU' else 'p'}"

    def describe(self) -> str:
        return f"{self.nodes} node{'s' if self.nodes != 1 else ''} x {self.per_node} {plural(self.unit, self.per_node)}"


def plural(unit: str, count: int = 2) -> str:
    """GPU -> GPUs, process -> processes."""
    if count == 1:
        return unit
    return unit + ("es" if unit.endswith("s") else "s")


def parse_counts(text: str, option: str) -> list[int]:
    """'1,2,4' -> [1, 2, 4]: positive, no repeats, in increasing order."""
    words = [w.strip() for w in text.split(",") if w.strip()]
    if not words or not all(w.isdigit() and int(w) > 0 for w in words):
        raise UsageError(f"{option} {text!r} is not a list of positive counts", f"e.g. {option} 1,2,4")
    counts = sorted({int(w) for w in words})
    if len(counts) != len(words):
        raise UsageError(f"{option} {text!r} names a count twice", f"e.g. {option} 1,2,4")
    return counts


def plan_points(axis: str, counts: list[int], per_node_capacity: int, unit: str = "GPU") -> list[ScalePoint]:
    """The points for `--nodes` (whole nodes: `per_node_capacity` each) or `--gpus` (one node while they fit
    on one, then whole nodes). A count that does not fill whole nodes is refused, not rounded."""
    if axis not in AXES:
        raise UsageError(f"unknown sweep axis {axis!r}", "use --nodes or --gpus")
    if per_node_capacity < 1:
        raise UsageError(f"a node here has no {plural(unit)} to sweep over", "sweep over --nodes instead")
    if axis == "nodes":
        return [ScalePoint(nodes=n, per_node=per_node_capacity, unit=unit) for n in counts]
    points = []
    for count in counts:
        if count <= per_node_capacity:
            points.append(ScalePoint(nodes=1, per_node=count, unit=unit))
        elif count % per_node_capacity == 0:
            points.append(ScalePoint(nodes=count // per_node_capacity, per_node=per_node_capacity, unit=unit))
        else:
            lower = count // per_node_capacity * per_node_capacity
            holds = f"{per_node_capacity} {plural(unit, per_node_capacity)}"
            fix = f"use {lower} or {lower + per_node_capacity}" if lower else f"use at most {per_node_capacity}"
            raise UsageError(f"--gpus {count}: a node holds {holds}, so {count} does not fill whole nodes", fix)
    return points
