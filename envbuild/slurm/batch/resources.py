"""What a batch job asks Slurm for: partition, GPUs, tasks, CPUs, memory, time and account, chosen from the
system recipe and the user's request, each with the reason it was chosen. Pure.

The rules are the sites' own (cited in recipes/*.yaml): the smallest partition that fits the request (a
shared one for part of a node, a whole-node one for whole nodes, a test partition only when asked), GPUs in
the system's request form, one launcher task with every CPU of the node's share for torchrun, accelerate and
deepspeed, one task per GPU with its cores for srun, memory per GPU or for the whole node.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from envbuild.launch.args import LAUNCHERS, PER_NODE_LAUNCHERS
from envbuild.shared.durations import format_duration, parse_duration, parse_slurm_time
from envbuild.shared.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from envbuild.host.node import HostNode
    from envbuild.recipes.protocols import SystemRecipe

DEFAULT_TIME = "01:00:00"


@dataclass(frozen=True)
class JobRequest:
    """What the user asked for (options, then the envrun config's batch defaults); None: let envrun choose."""

    nodes: int = 1
    gpus_per_node: int | None = None
    time: str | None = None
    account: str | None = None
    account_source: str = "--account"
    partition: str | None = None
    partition_source: str = "--partition"
    launcher: str = "torchrun"
    test: bool = False
    stage_gb: float = 0.0  # data staged to each node (every --stage together)
    processes_per_node: int | None = None  # CPU-only nodes: training processes per node (None: as many as fit)


@dataclass(frozen=True)
class Directive:
    """One #SBATCH line and why it is there."""

    option: str
    why: str


@dataclass
class JobResources:
    partition: str | None
    nodes: int
    gpus_per_node: int
    tasks_per_node: int
    cpus_per_task: int
    memory_gb: int | None
    time: str
    account: str | None
    stage_gres_gb: int | None = None
    directives: list[Directive] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class NodeShape:
    """The node the job lands on: from the recipe, or the host for `node: host` recipes."""

    gpus: int
    cpus: int  # Slurm CPUs a job may use on a whole node
    cpus_per_gpu: int  # Slurm CPUs that go with one GPU
    cores_per_process: int  # CPU-only DDP: Slurm CPUs per training process
    memory_gb: int | None
    memory_per_gpu_gb: int | None
    why: str


def node_shape(recipe: SystemRecipe, host: HostNode | None) -> NodeShape:
    node = recipe.node
    if node is None:
        cpus = host.cpus if host is not None else 1
        gpus = host.gpus if host is not None else 0
        return NodeShape(gpus=gpus, cpus=cpus, cpus_per_gpu=max(1, cpus // gpus) if gpus else cpus,
                         cores_per_process=1, memory_gb=None, memory_per_gpu_gb=None,
                         why=f"this host: {cpus} CPUs, {gpus} GPUs ({recipe.cite('node')})")
    per_core = node.slurm_cpus_per_core
    cpus = node.usable * per_core
    per_gpu = (node.cores_per_gpu or (node.usable // node.gpus if node.gpus else node.usable)) * per_core
    per_process = max(1, node.usable // recipe.processes_per_node) * per_core if recipe.processes_per_node else per_core
    return NodeShape(gpus=node.gpus, cpus=cpus, cpus_per_gpu=per_gpu, cores_per_process=per_process,
                     memory_gb=node.memory_gb, memory_per_gpu_gb=node.memory_per_gpu_gb,
                     why=f"a {recipe.name} node: {node.gpus} GPUs, {cpus} Slurm CPUs ({recipe.cite('node')})")


def plan_resources(recipe: SystemRecipe, request: JobRequest, host: HostNode | None = None) -> JobResources:
    return _Chooser(recipe, request, node_shape(recipe, host)).choose()


class _Chooser:
    def __init__(self, recipe: SystemRecipe, request: JobRequest, node: NodeShape) -> None:
        self.recipe = recipe
        self.request = request
        self.node = node
        self.directives: list[Directive] = []
        self.warnings: list[str] = []

    def add(self, option: str, why: str) -> None:
        self.directives.append(Directive(option, why))

    def choose(self) -> JobResources:
        request, node = self.request, self.node
        if request.launcher not in LAUNCHERS:
            raise UsageError(f"unknown launcher {request.launcher!r}", f"use one of: {', '.join(LAUNCHERS)}")
        if request.nodes < 1:
            raise UsageError(f"--nodes {request.nodes}: a job needs at least one node", "e.g. --nodes 2")
        gpus = self.gpus()
        processes = self.cpu_processes(gpus)
        whole = gpus == node.gpus and (processes is None or processes * node.cores_per_process >= node.cpus)
        seconds = self.seconds()
        partition = self.partition(gpus, whole, seconds)
        time = self.time(partition, seconds)
        account = self.account()
        tasks, cpus = self.tasks_and_cpus(gpus, whole, processes)
        memory = self.memory(gpus, whole, partition)
        stage_gb = self.stage_gres(memory)
        self.gres(gpus, stage_gb)
        out = JobResources(partition=partition, nodes=request.nodes, gpus_per_node=gpus, tasks_per_node=tasks,
                           cpus_per_task=cpus, memory_gb=memory, time=time, account=account, stage_gres_gb=stage_gb)
        out.directives = self.directives
        out.warnings = self.warnings
        return out

    # -- GPUs ----------------------------------------------------------------------------------------

    def gpus(self) -> int:
        node, asked = self.node, self.request.gpus_per_node
        if asked is None:
            return node.gpus
        if asked < 0:
            raise UsageError(f"--gpus-per-node {asked} is negative", "give 0 for a CPU job, or the GPUs per node")
        if asked > node.gpus:
            total = asked * self.request.nodes
            fix = f"ask for at most {node.gpus}"
            if node.gpus and total % node.gpus == 0:
                fix = f"for {total} GPUs use --nodes {total // node.gpus} --gpus-per-node {node.gpus}"
            raise UsageError(f"--gpus-per-node {asked}, but {node.why}", fix)
        return asked

    def cpu_processes(self, gpus: int) -> int | None:
        """Training processes per node asked for on a node without GPUs (envrun sweep --gpus there), or None."""
        asked, node = self.request.processes_per_node, self.node
        if asked is None:
            return None
        if gpus:
            raise UsageError(f"{asked} processes per node were asked for on nodes with {gpus} GPUs",
                             "count GPUs there (--gpus-per-node); processes per node are for CPU-only nodes")
        fits = max(1, node.cpus // node.cores_per_process)
        if not 1 <= asked <= fits:
            raise UsageError(f"{asked} training processes per node, but {node.why} fits 1 to {fits} "
                             f"({node.cores_per_process} CPU(s) each)", f"ask for at most {fits} per node, or more nodes")
        return asked

    # -- partition and time --------------------------------------------------------------------------

    def seconds(self) -> int | None:
        if self.request.time is None:
            return None
        return parse_duration(self.request.time, "--time")

    def partition(self, gpus: int, whole: bool, seconds: int | None) -> str | None:
        recipe, request = self.recipe, self.request
        partitions = recipe.partitions
        asked = request.partition
        if asked:
            if asked in recipe.batch.retired_partitions:
                raise UsageError(f"partition {asked} ({request.partition_source}) no longer exists on {recipe.name}: "
                                 f"{recipe.batch.retired_partitions[asked]}",
                                 f"choose another partition ({', '.join(partitions)})")
            if asked not in partitions:
                if recipe.node is not None:
                    raise UsageError(f"{recipe.name} has no partition {asked} ({request.partition_source})",
                                     f"use one of: {', '.join(partitions)} ({recipe.cite('partitions')})")
                self.add(f"--partition={asked}", f"{request.partition_source}")
                return asked
            problem = self.misfit(asked, gpus, whole, seconds)
            if problem:
                raise UsageError(f"partition {asked} ({request.partition_source}): {problem}",
                                 "ask for less, or leave out --partition and let envrun choose")
            self.add(f"--partition={asked}", f"{request.partition_source} ({recipe.cite('partitions.' + asked)})")
            return asked
        if not partitions:
            return None
        candidates = [name for name, spec in partitions.items() if spec.test == request.test]
        if not candidates:
            if request.test:
                raise UsageError(f"{recipe.name} has no test partition", "leave out --test")
            return None
        # whole nodes go to a whole-node partition first, part of a node to a shared one; a job without GPUs
        # to a CPU partition first
        ordered = sorted(candidates, key=lambda name: (partitions[name].full_node != whole,
                                                       partitions[name].cpu_only != (gpus == 0)))
        misfits = []
        for name in ordered:
            problem = self.misfit(name, gpus, whole, seconds)
            if problem is None:
                self.add(f"--partition={name}", self.partition_reason(name, gpus, whole))
                if partitions[name].full_node and not whole:
                    self.warnings.append(
                        f"partition {name} gives whole nodes: the job is billed for {self.node.gpus} GPUs per node "
                        f"but uses {gpus}; fix: --gpus-per-node {self.node.gpus}, or fewer nodes")
                return name
            misfits.append(f"{name}: {problem}")
        raise UsageError(f"no {recipe.name} {'test ' if request.test else ''}partition fits {request.nodes} node(s) x "
                         f"{gpus} GPUs" + (f" for {self.request.time}" if seconds else "") + ": " + "; ".join(misfits),
                         "ask for fewer nodes, GPUs or less time" + ("" if request.test else ", or split the job"))

    def misfit(self, name: str, gpus: int, whole: bool, seconds: int | None) -> str | None:
        spec = self.recipe.partitions[name]
        cite = self.recipe.cite(f"partitions.{name}")
        if spec.cpu_only and gpus:
            return f"its nodes have no GPUs ({cite})"
        if spec.max_nodes is not None and self.request.nodes > spec.max_nodes:
            return f"at most {spec.max_nodes} node(s) ({cite})"
        if spec.max_gpus_per_node is not None and gpus > spec.max_gpus_per_node:
            return f"at most {spec.max_gpus_per_node} GPUs per node ({cite})"
        if spec.max_time and seconds is not None and seconds > parse_slurm_time(spec.max_time, cite):
            return f"at most {spec.max_time} ({cite})"
        return None

    def partition_reason(self, name: str, gpus: int, whole: bool) -> str:
        spec = self.recipe.partitions[name]
        what = "whole nodes" if spec.full_node else "shared nodes"
        if self.request.test:
            what = "the test partition, " + what
        shape = f"{self.request.nodes} node(s) x {gpus} GPUs" if self.node.gpus else f"{self.request.nodes} node(s)"
        return f"the smallest partition for {shape}: {what} ({self.recipe.cite('partitions.' + name)})"

    def time(self, partition: str | None, seconds: int | None) -> str:
        if self.request.time is not None:
            text = format_duration(seconds or 0)
            self.add(f"--time={text}", f"the time limit (--time {self.request.time})")
            return text
        limit = self.recipe.partitions[partition].max_time if partition and partition in self.recipe.partitions else None
        default = DEFAULT_TIME
        why = "envrun's default (1 hour); give --time, or batch: {time: ...} in the envrun config"
        if limit and parse_slurm_time(limit, "max_time") < parse_slurm_time(DEFAULT_TIME, "default"):
            default, why = format_duration(parse_slurm_time(limit, "max_time")), f"the most partition {partition} allows"
        self.add(f"--time={default}", why)
        return default

    # -- account -------------------------------------------------------------------------------------

    def account(self) -> str | None:
        recipe, request = self.recipe, self.request
        if request.account:
            self.add(f"--account={request.account}", f"the project the job is billed to ({request.account_source})")
            return request.account
        if recipe.batch.account_required:
            example = recipe.batch.account_example or "PROJECT"
            raise UsageError(
                f"{recipe.name} needs an account for every job ({recipe.cite('batch.account_required')}), and none "
                "was given", f"pass --account {example}, or set it once in ~/.config/envbuild/envrun.yaml: "
                f"`systems: {{{recipe.name}: {{batch: {{account: {example}}}}}}}` (or export SBATCH_ACCOUNT)")
        return None

    # -- tasks, CPUs, memory -------------------------------------------------------------------------

    def tasks_and_cpus(self, gpus: int, whole: bool, processes: int | None = None) -> tuple[int, int]:
        node, launcher = self.node, self.request.launcher
        cpus = node.cpus if whole or not gpus else node.cpus_per_gpu * gpus
        share = f"every CPU of the node ({node.why})" if whole or not gpus else \
            f"{node.cpus_per_gpu} CPUs per GPU x {gpus} ({node.why})"
        if processes is not None and not whole:
            cpus = processes * node.cores_per_process
            share = f"{node.cores_per_process} CPU(s) per process x {processes} process{'es' if processes > 1 else ''} ({node.why})"
        if launcher in PER_NODE_LAUNCHERS:
            tasks, per_task = 1, cpus
            self.add("--ntasks-per-node=1", f"{launcher} starts the training processes itself: one launcher per node")
            self.add(f"--cpus-per-task={per_task}", f"{share}, for {launcher}'s processes")
        elif gpus:
            tasks, per_task = gpus, cpus // gpus
            self.add(f"--ntasks-per-node={tasks}", "srun starts one training process per GPU")
            self.add(f"--cpus-per-task={per_task}", f"the CPUs that go with one GPU: {cpus} / {gpus} GPUs; {share}")
        else:
            per_task = node.cores_per_process
            tasks = max(1, cpus // per_task)
            self.add(f"--ntasks-per-node={tasks}", f"srun starts one training process per {per_task} CPU(s): {share}")
            self.add(f"--cpus-per-task={per_task}", "CPUs per training process")
        return tasks, per_task

    def gres(self, gpus: int, stage_gb: int | None) -> None:
        """The GPU request in the system's form, with the node-local disk for staging in the same --gres."""
        recipe = self.recipe
        disk = recipe.batch.staging.gres.replace("{gb}", str(stage_gb)) if stage_gb and recipe.batch.staging and \
            recipe.batch.staging.gres else None
        disk_why = f"{stage_gb} GB of node-local disk for --stage ({recipe.cite('batch.staging.gres')})" if disk else ""
        if not gpus:
            if disk:
                self.add(f"--gres={disk}", disk_why)
            return
        request = (recipe.launch.gpu_request or "--gpus-per-node={gpus}").replace("{gpus}", str(gpus))
        why = (f"{gpus} GPUs per node in {recipe.name}'s request form "
               f"({recipe.cite('launch.gpu_request') if recipe.launch.gpu_request else 'Slurm'})")
        if disk and request.startswith("--gres="):
            self.add(f"{request},{disk}", f"{why}; {disk_why}")
            return
        self.add(request, why)
        if disk:
            self.add(f"--gres={disk}", disk_why)

    def memory(self, gpus: int, whole: bool, partition: str | None) -> int | None:
        recipe, node = self.recipe, self.node
        if recipe.batch.memory == "auto" or recipe.node is None:
            return None
        if (whole or not gpus) and node.memory_gb:
            self.add(f"--mem={node.memory_gb}G", f"the whole node's memory for jobs ({recipe.cite('node.memory_gb')})")
            return node.memory_gb
        if gpus and node.memory_per_gpu_gb:
            total = node.memory_per_gpu_gb * gpus
            self.add(f"--mem={total}G", f"{node.memory_per_gpu_gb}G per GPU x {gpus} "
                                        f"({recipe.cite('node.memory_per_gpu_gb')})")
            return total
        return None

    def stage_gres(self, memory_gb: int | None) -> int | None:
        """GB of node-local disk to request with the job, or None; refuses what the node cannot hold."""
        from math import ceil

        size = self.request.stage_gb
        if not size:
            return None
        staging, recipe = self.recipe.batch.staging, self.recipe
        if staging is None:
            raise UsageError(f"--stage: {recipe.name} nodes have no node-local storage to stage to "
                             f"({recipe.cite('batch')})", "read the data from the parallel file system instead "
                             "(leave out --stage)")
        if staging.in_memory:
            budget = memory_gb or self.node.memory_gb
            limit = min(x for x in (staging.max_gb, budget // 4 if budget else None) if x is not None) \
                if (staging.max_gb or budget) else None
            if limit is not None and size > limit:
                raise UsageError(
                    f"--stage: {size:.1f} GB is too much for {staging.dir} on {recipe.name}: that directory is RAM "
                    f"({recipe.cite('batch.staging.in_memory')}), taken from the job's {budget} GB, and more than a "
                    f"quarter of it ({limit} GB) leaves too little for training",
                    "read the data from the parallel file system (e.g. /flash or /scratch), or stage a smaller subset")
            return None
        if staging.max_gb is not None and size > staging.max_gb:
            raise UsageError(f"--stage: {size:.1f} GB does not fit the {staging.max_gb} GB of node-local disk on a "
                             f"{recipe.name} node ({recipe.cite('batch.staging.max_gb')})",
                             "stage a subset, or read the rest from the parallel file system")
        if staging.gres is None:
            return None
        # 20% + 1 GB over the data: extracting archives writes a little more than their contents
        return min(ceil(size * 1.2) + 1, staging.max_gb or ceil(size * 1.2) + 1)
