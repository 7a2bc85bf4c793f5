"""What one node offers a launch: CPUs, GPUs and which cores sit near which GPU, from the recipe for a
site or from the host for `node: host`; and the CPU masks that split a node's cores among its tasks. Pure.
"""

from __future__ import annotations

from envbuild.recipes.ops import cores_to_mask

TYPE_CHECKING = False
if TYPE_CHECKING:
    from envbuild.host.node import HostNode
    from envbuild.recipes.protocols import SystemRecipe


class NodeFacts:
    """One node as the planner sees it when there is no allocation: from the recipe or from this host."""

    __slots__ = ("cores_per_process", "cpus", "from_host", "gpu_cores", "gpu_vendor", "gpus", "mask_width",
                 "threads_per_core", "why")

    def __init__(self, *, cpus: int, gpus: int, why: dict[str, str], gpu_cores: dict[int, tuple[int, ...]] | None = None,
                 mask_width: int | None = None, threads_per_core: int = 1, cores_per_process: int = 1,
                 gpu_vendor: str = "none", from_host: bool = False) -> None:
        self.cpus = cpus  # CPUs jobs may use
        self.gpus = gpus
        self.gpu_cores = gpu_cores or {}  # GPU -> its closest cores
        self.mask_width = mask_width or cpus  # digits of a mask_cpu value: every core of the node
        self.threads_per_core = threads_per_core
        self.cores_per_process = cores_per_process  # CPU-only DDP: CPUs per training process
        self.gpu_vendor = gpu_vendor
        self.from_host = from_host
        self.why = why  # field -> its source: "recipes/lumi-g.yaml:27 node.gpus"


def node_facts(recipe: SystemRecipe, host: HostNode | None) -> NodeFacts:
    node = recipe.node
    if node is None:
        if host is None:  # planning for another machine (wrappers): nothing is known until run time
            from envbuild.host.node import HostNode

            host = HostNode(cpus=1, why={"cpus": "unknown host"})
        return NodeFacts(
            cpus=host.cpus, gpus=host.gpus, gpu_vendor=host.gpu_vendor, from_host=True, why={
                "cpus": f"this host: {host.why.get('cpus', f'{host.cpus} CPUs')} ({recipe.cite('node')})",
                "gpus": f"this host: {host.why.get('gpus', 'no GPU driver found')} ({recipe.cite('node')})",
                "cores_per_process": "one process per CPU on a host without GPUs, as torchrun --nproc-per-node=auto",
            })
    cores_field = "node.usable_cores" if node.usable_cores else "node.cores"
    per_process, per_process_why = 1, "one process per CPU, as torchrun --nproc-per-node=auto"
    if recipe.processes_per_node:
        per_process = max(1, node.usable // recipe.processes_per_node)
        per_process_why = f"{node.usable} cores / {recipe.processes_per_node} processes ({recipe.cite('processes_per_node')})"
    return NodeFacts(
        cpus=node.usable, gpus=node.gpus, gpu_cores=dict(node.gpu_cores), mask_width=node.cores,
        threads_per_core=node.threads_per_core, cores_per_process=per_process, gpu_vendor=node.gpu_vendor, why={
            "cpus": f"{node.usable} usable cores of a {recipe.name} node ({recipe.cite(cores_field)})",
            "gpus": f"{node.gpus} GPUs on a {recipe.name} node ({recipe.cite('node.gpus')})",
            "cores_per_process": per_process_why,
        })


def group_cores(node: NodeFacts, groups: int) -> list[tuple[int, ...]] | None:
    """The cores of each of `groups` equal groups of the node's GPUs (group i: GPUs i*k .. i*k+k-1), from
    the GPU-to-core map; None when there is no map or the GPUs do not split evenly."""
    if not node.gpu_cores or groups < 1 or node.gpus % groups:
        return None
    per = node.gpus // groups
    return [tuple(sorted({c for g in range(i * per, (i + 1) * per) for c in node.gpu_cores[g]})) for i in range(groups)]


def cpu_masks(node: NodeFacts, groups: int) -> tuple[str, ...]:
    """srun's mask_cpu values for one task per group of GPUs: LUMI-G, 8 -> the documented eight masks."""
    cores = group_cores(node, groups) or []
    return tuple(cores_to_mask(c, node.mask_width) for c in cores)
