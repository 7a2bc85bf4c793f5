"""The numbers of a parsed batch script: nodes, tasks, CPUs, GPUs and memory per node of the job, and of each
srun step where its own options override the job's. Pure. None means "not known from the text" (a value
such as $N, or an option that is not given and has no Slurm default that matters)."""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from envbuild.launch.allocation import count_gpus, gres_gpus
from envbuild.launch.args import option_value

TYPE_CHECKING = False
if TYPE_CHECKING:
    from envbuild.slurm.check.parse import BatchScript, Directive, SrunLine

_UNITS = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}
# srun's --ntasks given as the job's node count: one task per node
_NODE_COUNT_VARIABLES = ("$SLURM_NNODES", "${SLURM_NNODES}", "$SLURM_JOB_NUM_NODES", "${SLURM_JOB_NUM_NODES}")


def count(value: str | None) -> int | None:
    """'8' -> 8; '2-4' (a node range) -> 2, its minimum; '$N' and other text -> None."""
    if value is None:
        return None
    text = value.strip().split("-", 1)[0] if "-" in value.strip()[1:] else value.strip()
    return int(text) if text.isdigit() else None


def size_mb(value: str | None) -> int | None:
    """Slurm memory sizes: '480G' -> 491520, '4000' -> 4000 (megabytes by default), '0' -> 0; else None."""
    if not value:
        return None
    text = value.strip().upper()
    if len(text) > 2 and text.endswith("B") and text[-2] in _UNITS:  # 500GB
        text = text[:-1]
    unit = text[-1] if text[-1] in _UNITS else "M"
    number = text[:-1] if text[-1] in _UNITS else text
    return int(int(number) * _UNITS[unit]) if number.isdigit() else None


def format_mb(mb: int) -> str:
    return f"{mb // 1024}G" if mb % 1024 == 0 else f"{mb}M"


@dataclass(frozen=True)
class Sized:
    """A number and the directive it comes from (for the finding's line and the text as written)."""

    value: int
    directive: Directive
    how: str  # "--gpus-per-node=8", "--gpus=16 over 2 nodes"
    tasks: int = 1  # CPUs: the tasks per node counted


class JobShape:
    """What the #SBATCH lines ask for, per node."""

    def __init__(self, script: BatchScript) -> None:
        self.script = script
        self._gpus: tuple[Sized | None] | None = None  # asked for once per srun line: computed once

    def get(self, *names: str) -> Directive | None:
        return self.script.last(*names)

    @property
    def nodes(self) -> int:
        return count(self.value("nodes")) or 1

    def value(self, name: str) -> str | None:
        found = self.get(name)
        return found.value if found else None

    def tasks_per_node(self) -> int | None:
        """--ntasks-per-node, else --ntasks over the nodes (at most this many on one node); None: not given
        (Slurm starts one task per node)."""
        per_node = self.get("ntasks-per-node")
        if per_node is not None:
            return count(per_node.value)
        total = count(self.value("ntasks"))
        if total:
            return ceil(total / self.nodes)
        per_gpu = self.get("ntasks-per-gpu")  # --ntasks-per-gpu=1 with --gpus-per-node=8: 8 tasks per node
        if per_gpu is not None and count(per_gpu.value) is not None:
            gpus = self._gpus_without_tasks()
            return (count(per_gpu.value) or 0) * gpus.value if gpus else None
        return None

    def tasks_directive(self) -> Directive | None:
        return self.get("ntasks-per-node") or self.get("ntasks") or self.get("ntasks-per-gpu")

    def cpus_per_task(self) -> int | None:
        return count(self.value("cpus-per-task"))

    def gpus(self) -> Sized | None:
        """GPUs per node, from --gpus-per-node, --gres, --gpus (the job's total) or --gpus-per-task."""
        if self._gpus is None:
            self._gpus = (self._gpus_from_directives(),)
        return self._gpus[0]

    def _gpus_from_directives(self) -> Sized | None:
        sized = self._gpus_without_tasks()
        if sized is not None:
            return sized
        found = self.get("gpus-per-task")
        if found and found.value and count_gpus(found.value) is not None:
            tasks = self.tasks_per_node() or 1
            return Sized((count_gpus(found.value) or 0) * tasks, found, f"{found.written} x {tasks} task(s)")
        return None

    def _gpus_without_tasks(self) -> Sized | None:
        """GPUs per node from the options that do not count tasks."""
        found = self.get("gpus-per-node")
        if found and found.value and count_gpus(found.value) is not None:
            return Sized(count_gpus(found.value) or 0, found, found.written)
        found = self.get("gres")
        if found and found.value and gres_gpus(found.value) is not None:
            return Sized(gres_gpus(found.value) or 0, found, found.written)
        found = self.get("gpus")
        if found and found.value and count_gpus(found.value) is not None:
            total = count_gpus(found.value) or 0
            per_node = ceil(total / self.nodes)
            return Sized(per_node, found, found.written + (f" over {self.nodes} nodes" if self.nodes > 1 else ""))
        return None

    def gpus_spread(self) -> bool:
        """--gpus (the job's total) without --nodes: Slurm takes as many nodes as the GPUs need."""
        sized = self.gpus()
        return sized is not None and sized.directive.name == "gpus" and self.get("nodes") is None

    def gpus_per_node(self) -> int:
        sized = self.gpus()
        return sized.value if sized else 0

    def cpus(self) -> Sized | None:
        """Slurm CPUs per node: tasks per node x --cpus-per-task, or --cpus-per-gpu x GPUs."""
        per_gpu = self.get("cpus-per-gpu")
        if per_gpu is not None and count(per_gpu.value) is not None:
            gpus = self.gpus_per_node()
            return Sized((count(per_gpu.value) or 0) * gpus, per_gpu, f"{per_gpu.written} x {gpus} GPUs") if gpus \
                else None
        cpus = self.get("cpus-per-task")
        tasks = self.tasks_per_node()
        tasks_directive = self.tasks_directive()
        if cpus is None and tasks_directive is None:
            return None
        per_task = count(cpus.value) if cpus else 1
        if per_task is None or (tasks is None and tasks_directive is not None):
            return None
        if tasks_directive is not None and tasks_directive.name == "ntasks" and self.get("nodes") is None:
            # Slurm spreads --ntasks over as many nodes as they need; only one task's CPUs must fit on a node
            return Sized(per_task, cpus, f"{cpus.written} (one task)") if cpus else None
        tasks = tasks or 1
        how = (f"{tasks} task(s) per node" if tasks_directive is None else _tasks_how(self, tasks_directive, tasks))
        how += f" x {cpus.written}" if cpus else " x 1 CPU"
        source = cpus if cpus is not None else tasks_directive
        assert source is not None
        return Sized(tasks * per_task, source, how, tasks)


def _tasks_how(job: JobShape, directive: Directive, tasks: int) -> str:
    if directive.name == "ntasks" and job.nodes > 1:
        return f"{directive.written} over {job.nodes} nodes"
    return directive.written


class StepShape:
    """An srun line's step: its own options where it gives them, else the job's."""

    def __init__(self, srun: SrunLine, job: JobShape) -> None:
        self.srun = srun
        self.job = job
        self.options = srun.options

    def option(self, *names: str) -> str | None:
        return option_value(self.options, *names)

    def sets(self, *names: str) -> bool:
        return self.option(*names) is not None

    @property
    def nodes(self) -> int | None:
        given = self.option("-N", "--nodes")
        return count(given) if given is not None else self.job.nodes

    def tasks_per_node(self) -> int | None:
        """Tasks of this step on one node; the job's when srun does not say (Slurm's default: one)."""
        given = self.option("--ntasks-per-node")
        if given is not None:
            return count(given)
        total = self.option("-n", "--ntasks")
        if total is not None:
            if total.strip() in _NODE_COUNT_VARIABLES:
                return 1
            nodes, number = self.nodes, count(total)
            return ceil(number / nodes) if number and nodes else None
        return self.job.tasks_per_node() or 1

    def gpus_per_node(self) -> int | None:
        for names, parse in ((("--gpus-per-node",), count_gpus), (("--gres",), gres_gpus)):
            given = self.option(*names)
            if given is not None:
                return parse(given)
        total = self.option("-G", "--gpus")
        if total is not None:
            number, nodes = count_gpus(total), self.nodes
            return ceil(number / nodes) if number is not None and nodes else None
        per_task = self.option("--gpus-per-task")
        if per_task is not None:
            tasks, number = self.tasks_per_node(), count_gpus(per_task)
            return tasks * number if tasks is not None and number is not None else None
        return self.job.gpus_per_node()
