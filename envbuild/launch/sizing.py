"""How big a launch is: tasks per node, CPUs per task, GPUs, processes per task and threads, each with
the reason it was chosen. Pure.

Every number comes from, in order: the user's own srun/torchrun options; the allocation the job holds
(envbuild.launch.allocation); the node facts — the recipe's for a site, the host's for `node: host` — only
when there is no allocation to read (a login node, a workstation, a dry run with --system). Threads,
CPU masks and GPU visibility follow the same numbers: a full-node CPU mask only when the job really
holds the node, and a task that owns several GPUs gets all of their cores.
"""

from __future__ import annotations

from envbuild.launch.args import (
    accelerate_uses_torchrun,
    given_processes,
    has_option,
    launcher_has,
    launcher_kind,
    launcher_split,
    option_value,
    torchrun_has,
    torchrun_passes_local_rank,
    torchrun_split,
)
from envbuild.launch.bindstyle import (
    SLURM_NOT_READ,
    TORCH_NOT_READ,
    choose_gpu_bind,
    choose_numa_binding,
    user_gpu_binding,
)
from envbuild.launch.nodefacts import NodeFacts, group_cores, node_facts
from envbuild.recipes.ops import cores_to_mask
from envbuild.shared.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from envbuild.host.node import HostNode
    from envbuild.launch.allocation import Allocation
    from envbuild.recipes.protocols import SystemRecipe


class LaunchSize:
    """The numbers of one launch, the srun options that carry them, and why each was chosen."""

    __slots__ = ("cpus_per_task", "gpus", "gpus_per_task", "node", "notes", "numa_binding", "processes", "rank_cores",
                 "slurm_binds_gpus", "srun_options", "task_cores", "tasks_per_node", "threads", "warnings")

    def __init__(self, node: NodeFacts) -> None:
        self.node = node
        self.tasks_per_node = 1
        self.cpus_per_task = node.cpus  # CPUs of one task (srun), or of this process (no srun)
        self.gpus = node.gpus  # GPUs this launch has on each node
        self.gpus_per_task = 0  # GPUs each srun task sees (0: none, or not evenly split)
        self.processes: int | None = 1  # training processes per task (torchrun's --nproc-per-node); None: torchrun decides
        self.threads: int | None = None  # OMP_NUM_THREADS; None: leave it to the program
        self.srun_options: list[str] = []  # srun options envrun adds
        self.task_cores: list[tuple[int, ...]] | None = None  # srun mask_cpu per task (full nodes with a GPU map)
        self.rank_cores: list[tuple[int, ...]] | None = None  # torchrun: cores per local rank; None: split at run time
        self.slurm_binds_gpus = False  # srun --gpu-bind gives each task its GPU: no per-task GPU variable of envrun's
        self.numa_binding = ""  # torchrun --numa-binding mode envrun adds: torchrun pins the ranks, not envrun
        self.notes: list[str] = []
        self.warnings: list[str] = []


def size_launch(recipe: SystemRecipe, srun_options: tuple[str, ...] | None, program: tuple[str, ...],
                allocation: Allocation | None, host: HostNode | None, *, slurm: tuple[str, str] = SLURM_NOT_READ,
                torch: tuple[str, str, bool] = TORCH_NOT_READ) -> LaunchSize:
    """`slurm` and `torch`: what is known of this Slurm and of the image's torch (envbuild.launch.bindstyle's
    choose_gpu_bind and choose_numa_binding say what they hold)."""
    return _Sizer(recipe, srun_options, program, allocation, host, slurm, torch).size()


class _Sizer:
    def __init__(self, recipe: SystemRecipe, srun_options: tuple[str, ...] | None, program: tuple[str, ...],
                 allocation: Allocation | None, host: HostNode | None, slurm: tuple[str, str] = SLURM_NOT_READ,
                 torch: tuple[str, str, bool] = TORCH_NOT_READ) -> None:
        self.recipe = recipe
        self.slurm = slurm
        self.torch = torch
        self.opts = srun_options
        self.program = program
        self.alloc = allocation
        self.host = host
        self.node = node_facts(recipe, host)
        self.out = LaunchSize(self.node)
        self.kind = launcher_kind(program)  # torchrun, accelerate, deepspeed: one launcher per node under srun
        self.launcher = LAUNCHER_NAMES.get(self.kind, "")

    def note(self, text: str) -> None:
        self.out.notes.append(text)

    def size(self) -> LaunchSize:
        self.gpus()
        if self.opts is None:
            self.direct()
        elif self.kind:
            self.srun_launcher()
        else:
            self.srun_tasks()
        return self.out

    # -- where the node's numbers come from ------------------------------------------------------------

    def gpus(self) -> None:
        out, alloc = self.out, self.alloc
        asked = _srun_gpus(self.opts or ())
        if asked is not None:
            out.gpus, self.gpus_why = asked[0], f"your srun {asked[1]}"
        elif alloc is not None and alloc.gpus_on_node is not None:
            out.gpus = alloc.gpus_on_node
            self.gpus_why = alloc.why["gpus_on_node"]
            if not out.gpus and self.node.gpus and not self.node.from_host:
                request = (self.recipe.launch.gpu_request or "--gpus-per-node={gpus}").replace("{gpus}", str(self.node.gpus))
                out.warnings.append(f"this job holds no GPUs ({self.gpus_why}); a {self.recipe.name} job asks for them "
                                    f"with {request}")
        else:
            out.gpus, self.gpus_why = self.node.gpus, self.node.why["gpus"]
            if alloc is not None:
                self.gpus_why += "; the job's own GPUs are unknown here"

    def cpus_per_node(self) -> tuple[int, str]:
        """The CPUs a launch may use on each node, and their source."""
        alloc = self.alloc
        if alloc is not None and alloc.cpus_on_node:
            return alloc.cpus_on_node, f"the job's CPUs per node ({alloc.why['cpus_on_node']})"
        return self.node.cpus, self.node.why["cpus"]

    def gpus_text(self) -> str:
        if self.alloc is None and not self.node.from_host and _srun_gpus(self.opts or ()) is None:
            return f"a {self.recipe.name} node has {self.out.gpus} GPUs"
        return f"this launch has {self.out.gpus} GPUs per node ({self.gpus_why})"

    def cpus_text(self, cpus: int, why: str) -> str:
        if self.alloc is None and not self.node.from_host:
            return f"the {cpus} usable cores of a {self.recipe.name} node"
        return f"the {cpus} CPUs per node of {why}"

    # -- srun python: one task per GPU or per process ----------------------------------------------------

    def srun_tasks(self) -> None:
        out, node = self.out, self.node
        cpus, cpus_why = self.cpus_per_node()
        tasks, tasks_why = self.tasks_per_node()
        if tasks_why is None:  # envrun's choice
            if out.gpus:
                tasks, tasks_why = out.gpus, f"one task per GPU: {self.gpus_why}"
            else:
                tasks = max(1, cpus // node.cores_per_process)
                tasks_why = f"one task per {node.cores_per_process} CPU(s) ({node.why['cores_per_process']}) of {cpus_why}"
            self.add_tasks_per_node(tasks, tasks_why)
        out.tasks_per_node = tasks
        if out.gpus and tasks > out.gpus:
            raise UsageError(f"{tasks} tasks per node but {self.gpus_text()}",
                             f"use at most --ntasks-per-node={out.gpus} (one task per GPU)")
        if out.gpus:
            out.gpus_per_task = out.gpus // tasks if out.gpus % tasks == 0 else 1
            if out.gpus % tasks:
                out.warnings.append(f"{tasks} tasks cannot share {out.gpus} GPUs evenly: each task gets one GPU and "
                                    f"{out.gpus - tasks} stay idle; fix: use a number of tasks that divides {out.gpus}")
            elif out.gpus_per_task > 1:
                text = f"each task sees {out.gpus_per_task} GPUs ({tasks} task(s) per node, {self.gpus_why})"
                if tasks == 1:  # the usual slip: a one-task torchrun allocation used with `srun python`
                    out.warnings.append(
                        f"{text}, and `srun python` starts one process per task, so a DDP script uses one of them; "
                        f"for one process per GPU use `srun --ntasks-per-node={out.gpus} "
                        f"--cpus-per-task={max(1, cpus // out.gpus)} python ...` or `srun torchrun ...`")
                else:
                    self.note(text)
        per_task = self.cpus_per_task(tasks, cpus, cpus_why)
        out.cpus_per_task = per_task
        out.threads = per_task
        own_gpu_binding = user_gpu_binding(self.opts or ())
        if own_gpu_binding:
            self.leave_gpus_to_the_user(own_gpu_binding)
        elif self.recipe.launch.bind_cpus and not has_option(self.opts or (), "--cpu-bind"):
            self.bind_tasks(tasks, per_task)
        if out.task_cores and len(out.task_cores[0]) < per_task:
            out.threads = len(out.task_cores[0])  # more threads than the mask's cores would share them
            self.note(f"OMP_NUM_THREADS={out.threads}: the {out.threads} cores of each task's mask "
                      f"(of its {per_task} CPUs; Slurm counts hardware threads)")
        else:
            self.note(f"OMP_NUM_THREADS={per_task}: the {per_task} CPUs of each task")

    def tasks_per_node(self) -> tuple[int, str | None]:
        """The user's tasks per node, else the allocation's; (n, None) when envrun is to choose."""
        opts, alloc = self.opts or (), self.alloc
        given = option_value(opts, "--ntasks-per-node")
        if given and given.isdigit():
            self.override_job_ntasks(int(given))
            return int(given), "your srun --ntasks-per-node"
        total = option_value(opts, "-n", "--ntasks")
        if total and total.isdigit():
            nodes = self.nodes()
            return -(-int(total) // nodes), f"your srun -n {total} over {nodes} node(s)"
        if alloc is not None and alloc.tasks_per_node:
            self.add_tasks_per_node(alloc.tasks_per_node, f"the job's tasks per node ({alloc.why['tasks_per_node']})")
            return alloc.tasks_per_node, ""
        return 0, None

    def nodes(self) -> int:
        given = option_value(self.opts or (), "-N", "--nodes")
        if given:
            first = given.split("-")[0].split(":")[0]
            if first.isdigit():
                return int(first)
        return self.alloc.nodes if self.alloc is not None else 1

    def add_tasks_per_node(self, tasks: int, why: str) -> None:
        self.out.srun_options.append(f"--ntasks-per-node={tasks}")
        self.note(f"--ntasks-per-node={tasks}: {why}")
        self.override_job_ntasks(tasks)

    def override_job_ntasks(self, tasks: int) -> None:
        """srun reads the job's SLURM_NTASKS as -n, which beats --ntasks-per-node: give the step's own total."""
        alloc, opts = self.alloc, self.opts or ()
        if alloc is None or alloc.ntasks is None or has_option(opts, "-n", "--ntasks"):
            return
        total = tasks * self.nodes()
        if total != alloc.ntasks:
            self.out.srun_options.append(f"--ntasks={total}")
            self.note(f"--ntasks={total}: {tasks} per node on {self.nodes()} node(s); srun would otherwise take "
                      f"-n from the job's SLURM_NTASKS={alloc.ntasks}")

    def cpus_per_task(self, tasks: int, cpus: int, cpus_why: str) -> int:
        opts, alloc = self.opts or (), self.alloc
        given = option_value(opts, "-c", "--cpus-per-task")
        if given is not None:
            if not given.isdigit() or int(given) < 1:
                raise UsageError(f"--cpus-per-task={given} is not a positive number", "e.g. srun --cpus-per-task=7 ...")
            per_task = int(given)
        elif alloc is not None and alloc.cpus_per_task and tasks * alloc.cpus_per_task <= cpus:
            per_task = alloc.cpus_per_task
            self.out.srun_options.append(f"--cpus-per-task={per_task}")
            self.note(f"--cpus-per-task={per_task}: the job's CPUs per task ({alloc.why['cpus_per_task']}); "
                      "srun does not pass it on to steps by itself")
        else:
            per_task = cpus // tasks
            if per_task < 1:
                raise UsageError(f"{tasks} tasks per node need at least {tasks} CPUs, but the job holds {cpus} per node "
                                 f"({cpus_why})", f"ask the job for more CPUs (sbatch --cpus-per-task or --ntasks-per-node) "
                                 f"or run fewer tasks (srun --ntasks-per-node={max(1, cpus)})")
            self.out.srun_options.append(f"--cpus-per-task={per_task}")
            self.note(f"--cpus-per-task={per_task}: {cpus} CPUs per node ({cpus_why}) / {tasks} task(s)")
        if tasks * per_task > cpus:
            if tasks == 1:
                raise UsageError(f"--cpus-per-task={per_task} is more than {self.cpus_text(cpus, cpus_why)}",
                                 f"ask for at most {cpus}")
            raise UsageError(f"{tasks} tasks x {per_task} cores is more than {self.cpus_text(cpus, cpus_why)}",
                             "lower --cpus-per-task or --ntasks-per-node")
        return per_task

    def leave_gpus_to_the_user(self, value: str) -> None:
        """The user's srun --gpu-bind chooses each task's GPU: envrun sets no per-task GPU variable and adds no
        GPU-to-core masks (they assume task i uses GPU i), and says when the site needs allow-task-sharing too."""
        self.out.slurm_binds_gpus = True
        self.note(f"your srun --gpu-bind={value}: Slurm gives each task its GPU, so envrun adds no GPU-to-core CPU "
                  "masks and no per-task GPU variable")
        bind = self.recipe.launch.gpu_bind
        flags = (option_value(self.opts or (), "--gres-flags") or "").split(",")
        if bind is not None and "allow-task-sharing" not in flags:
            self.out.warnings.append(
                f"your srun --gpu-bind={value} without --gres-flags=allow-task-sharing: Slurm's per-task GPU cgroups "
                f"keep each task from the node's other GPUs, which breaks GPU-to-GPU communication between them "
                f"({self.recipe.cite('launch.gpu_bind')}); fix: add --gres-flags=allow-task-sharing (Slurm "
                f"{bind.task_sharing_since} or newer)")

    def bind_tasks(self, tasks: int, per_task: int) -> None:
        out = self.out
        full, why = self.holds_full_node()
        cores = group_cores(self.node, tasks) if full and out.gpus == self.node.gpus else None
        choice = choose_gpu_bind(self.recipe, self.opts or (), tasks, out.gpus, self.slurm) if cores else None
        if choice is not None and choice.options:
            out.srun_options += choice.options
            out.slurm_binds_gpus = True
            # Slurm's own order: task i on the i-th block of the node's cores, where its mapped GPU sits
            out.task_cores = [self.node.gpu_cores[gpu] for gpu in choice.task_gpus]
            self.note(f"{choice.reason}; {why}")
            return
        if choice is not None:
            self.note(choice.reason + ("" if choice.deferred else "; the CPU masks instead, as before"))
        if cores:
            out.task_cores = cores
            masks = ",".join(cores_to_mask(c, self.node.mask_width) for c in cores)
            out.srun_options.append(f"--cpu-bind=mask_cpu:{masks}")
            self.note(f"--cpu-bind=mask_cpu:...: each task on the cores closest to its {out.gpus // tasks} GPU(s) "
                      f"({self.recipe.cite('node.gpu_cores')}); {why}")
            return
        out.srun_options.append("--cpu-bind=cores")
        reason = "each task pinned to its own --cpus-per-task cores"
        if self.node.gpu_cores and out.gpus:
            reason += " (the GPU-to-core masks need " + (why or "the whole node: standard partition or --exclusive") + ")"
        self.note(f"--cpu-bind=cores: {reason}")

    def holds_full_node(self) -> tuple[bool, str]:
        """Whether the job holds whole nodes: the GPU-to-core masks are only valid then (with the reason)."""
        opts, alloc, node = self.opts or (), self.alloc, self.node
        partition = option_value(opts, "-p", "--partition") or (alloc.partition if alloc is not None else "")
        spec = self.recipe.partitions.get(partition or "")
        if spec and spec.full_node:
            return True, f"partition {partition} gives whole nodes ({self.recipe.cite('partitions.' + partition)})"
        if alloc is None:
            if has_option(opts, "--exclusive"):
                return True, "srun --exclusive asks for whole nodes"
            return False, ""
        everything = node.cpus * node.threads_per_core
        if alloc.cpus_on_node and alloc.cpus_on_node >= everything and self.out.gpus >= node.gpus:
            return True, f"the job holds every CPU and GPU of its nodes ({alloc.why['cpus_on_node']})"
        return False, (f"the whole node ({everything} CPUs and {node.gpus} GPUs); this job holds "
                       f"{alloc.cpus_on_node or '?'} CPUs and {self.out.gpus} GPUs per node")

    # -- srun torchrun, accelerate launch, deepspeed: one launcher per node -----------------------------------

    def srun_launcher(self) -> None:
        out, opts = self.out, self.opts or ()
        cpus, cpus_why = self.cpus_per_node()
        if has_option(opts, "-n", "--ntasks", "--ntasks-per-node"):
            tasks, _ = self.tasks_per_node()
        else:
            tasks = 1
            self.out.srun_options.append("--ntasks-per-node=1")
            self.note(f"--ntasks-per-node=1: {self.launcher} starts the training processes itself, one launcher per node")
            self.override_job_ntasks(1)
        out.tasks_per_node = tasks
        given = option_value(opts, "-c", "--cpus-per-task")
        if given is None:
            per_task = max(1, cpus // tasks)
            out.srun_options.append(f"--cpus-per-task={per_task}")
            self.note(f"--cpus-per-task={per_task}: " + (f"{cpus_why}, for {self.launcher}'s processes" if tasks == 1
                                                          else f"{cpus} CPUs per node ({cpus_why}) / {tasks} tasks"))
        else:
            per_task = self.cpus_per_task(tasks, cpus, cpus_why)
        out.cpus_per_task = per_task
        self.processes(per_task, max(1, out.gpus // tasks) if out.gpus else 0)

    # -- no srun: this node, this process ----------------------------------------------------------------

    def direct(self) -> None:
        out, alloc, host = self.out, self.alloc, self.host
        if alloc is not None and host is not None:
            cpus = min(host.cpus, alloc.cpus_on_node or host.cpus)
            cpus_why = f"this process's {host.cpus} CPUs" + (f" within the job's ({alloc.why['cpus_on_node']})"
                                                             if alloc.cpus_on_node else "")
        else:
            cpus, cpus_why = self.cpus_per_node()
        out.cpus_per_task = cpus
        if self.kind == "torchrun":
            self.note(f"{cpus} CPUs for torchrun's processes: {cpus_why}")
            self.processes(cpus, out.gpus)
        else:
            out.threads = cpus
            self.note(f"OMP_NUM_THREADS={cpus}: {cpus_why}")

    # -- the launcher's processes ------------------------------------------------------------------------

    def processes(self, cpus: int, gpus: int) -> None:
        """Processes per node (torchrun's --nproc-per-node) and the threads of each, for a launcher with `cpus`
        CPUs and `gpus` GPUs."""
        out, node = self.out, self.node
        given, label = given_processes(self.kind, self.program, self.nodes())

        def per_node(nproc: int) -> str:
            return f"--nproc-per-node={nproc}" if self.kind == "torchrun" else f"{nproc} process(es) per node"

        if given is not None and not given.isdigit():
            out.processes = None  # auto, gpu, cpu: torchrun counts itself, and sets OMP_NUM_THREADS=1
            self.note(f"{label}: torchrun decides, and sets the threads itself")
            return
        if given is not None:
            nproc = int(given)
            if self.kind != "torchrun":
                self.note(f"{per_node(nproc)}: {label}")
            if gpus and nproc > gpus:
                raise UsageError(f"{label} but {self.gpus_text()}",
                                 f"use at most {gpus}" + ("" if self.kind == "torchrun" else " per node"))
        elif gpus:
            nproc = gpus
            self.note(f"{per_node(nproc)}: one process per GPU ({self.gpus_why})")
        else:
            nproc = max(1, cpus // node.cores_per_process)
            self.note(f"{per_node(nproc)}: {cpus} CPUs, {node.cores_per_process} per process "
                      f"({node.why['cores_per_process']})")
        out.processes = nproc
        out.threads = max(1, cpus // nproc)
        if cpus < nproc:
            out.warnings.append(f"{nproc} processes share {cpus} CPU(s): one thread each, and they compete for cores; "
                                f"fix: give the task more CPUs (--cpus-per-task) or run fewer processes ({PROCESS_OPTIONS[self.kind]})")
        full, why = self.holds_full_node()
        if full and gpus == node.gpus and out.tasks_per_node == 1 and self.pins_ranks():
            mode, numa_why = choose_numa_binding(self.recipe, self.torch) if self.torchrun_may_bind(nproc, gpus) \
                else ("", "")
            if mode:
                out.numa_binding = mode
                self.note(f"{numa_why}; {why}")
            else:
                out.rank_cores = group_cores(node, nproc)
                if numa_why:
                    self.note(numa_why)
        if out.rank_cores:
            self.note(f"each rank on the cores closest to its GPU(s) ({self.recipe.cite('node.gpu_cores')}); {why}")
        if out.rank_cores and len(out.rank_cores[0]) < out.threads:
            out.threads = len(out.rank_cores[0])
            self.note(f"OMP_NUM_THREADS={out.threads}: the {out.threads} cores each rank is pinned to")
        else:
            self.note(f"OMP_NUM_THREADS={out.threads}: {cpus} CPUs / {nproc} processes")


    def torchrun_may_bind(self, nproc: int, gpus: int) -> bool:
        """Whether torchrun's own NUMA binding may replace envrun's per-rank affinity: one rank per GPU of the
        node (torch binds local rank i to GPU i's cores), a script that envrun would start through its rank shim,
        and no binding or launch option of the user's that the shim already steps aside for."""
        _, own, rest = torchrun_split(self.program)
        return (self.kind == "torchrun" and nproc == gpus and bool(rest) and self.recipe.launch.bind_cpus
                and not torchrun_has(own, "--no-python", "--numa-binding", "--run-path"))

    def pins_ranks(self) -> bool:
        """Whether envrun pins each rank to its cores (torchrun, unless torch.distributed.launch passes --local-rank
        where the rank step would stand; accelerate when it starts them with torchrun)."""
        if self.kind == "accelerate":
            own = launcher_split("accelerate", self.program)[1]
            return accelerate_uses_torchrun(own) and not launcher_has(own, "--no_python", "--enable_cpu_affinity")
        return self.kind == "torchrun" and not torchrun_passes_local_rank(self.program)


# the option that sets a launcher's processes per node
PROCESS_OPTIONS = {"torchrun": "--nproc-per-node", "accelerate": "--num_processes", "deepspeed": "--num_gpus", "": "-"}
LAUNCHER_NAMES = {"torchrun": "torchrun", "accelerate": "accelerate launch", "deepspeed": "deepspeed.launcher.launch"}


def _srun_gpus(opts: tuple[str, ...]) -> tuple[int, str] | None:
    """GPUs per node the user's srun options ask for: --gpus-per-node=N, --gres=gpu[:type]:N."""
    from envbuild.launch.allocation import count_gpus, gres_gpus

    per_node = option_value(opts, "--gpus-per-node")
    if per_node is not None:
        count = count_gpus(per_node)
        return (count, f"--gpus-per-node={per_node}") if count is not None else None
    gres = option_value(opts, "--gres")
    if gres is not None:
        count = gres_gpus(gres)
        return (count, f"--gres={gres}") if count is not None else None
    return None
