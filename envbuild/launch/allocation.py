"""What the job holds, read from the SLURM_* variables of the job envrun runs in (what this host has is
in envbuild.host.node): the numbers a launch is sized from when the user's own srun/torchrun options leave them open.

Pure over its inputs (a mapping of variables, a command runner for scontrol), light on
imports (envrun's start-up path: os only).

What Slurm 22.05 sets, observed on the local test cluster (tests/launch/test_allocation.py keeps these):
  sbatch -n1 -c2 --gres=gpu:2   SLURM_NTASKS=1 SLURM_CPUS_PER_TASK=2 SLURM_CPUS_ON_NODE=2 SLURM_JOB_CPUS_PER_NODE=2
                                SLURM_GPUS_ON_NODE=2 SLURM_JOB_GPUS=0,1 CUDA_VISIBLE_DEVICES=0,1
  sbatch --ntasks-per-node=2    SLURM_NTASKS=2 SLURM_NTASKS_PER_NODE=2 SLURM_TASKS_PER_NODE=2
  sbatch -c1                    no SLURM_NTASKS; SLURM_TASKS_PER_NODE=1
  sbatch --exclusive            no SLURM_NTASKS but SLURM_TASKS_PER_NODE=2 (one per CPU), every GPU, no SLURM_EXCLUSIVE
  salloc -n1 -c2 --gres=gpu:2   no GPU variable at all (the shell runs on the login node) and no SLURM_CPUS_ON_NODE;
                                `scontrol show job` says TresPerNode=gres:gpu:2
So tasks count as the user's choice only through SLURM_NTASKS_PER_NODE or SLURM_NTASKS (SLURM_TASKS_PER_NODE is
Slurm's own fill), and a whole node shows only through its CPU and GPU counts.
"""

from __future__ import annotations

from envbuild.host.node import count_devices
from envbuild.shared.visibledevices import VISIBLE_DEVICE_VARIABLES

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping


class Allocation:
    """The job's numbers per node; None where the job's variables do not say. `why` maps each field to the
    variable it came from ("SLURM_CPUS_PER_TASK=20"), for `envrun --explain`."""

    __slots__ = ("cpus_on_node", "cpus_per_task", "gpus_on_node", "in_step", "job_id", "nodes", "ntasks",
                 "partition", "tasks_per_node", "why")

    def __init__(self, *, job_id: str, nodes: int = 1, tasks_per_node: int | None = None, ntasks: int | None = None,
                 cpus_per_task: int | None = None, cpus_on_node: int | None = None, gpus_on_node: int | None = None,
                 partition: str = "", in_step: bool = False, why: dict[str, str] | None = None) -> None:
        self.job_id = job_id
        self.nodes = nodes
        self.tasks_per_node = tasks_per_node  # only when the job asked for tasks (SLURM_NTASKS[_PER_NODE])
        self.ntasks = ntasks  # SLURM_NTASKS: srun reads it as -n, so a step of another size must override it
        self.cpus_per_task = cpus_per_task
        self.cpus_on_node = cpus_on_node  # the job's CPUs on each node (the smallest, if they differ)
        self.gpus_on_node = gpus_on_node  # None: unknown here (an salloc shell); 0: the job has none
        self.partition = partition
        self.in_step = in_step  # envrun itself runs inside a job step (srun envrun ...)
        self.why = why or {}


def _int(text: str | None) -> int | None:
    return int(text) if text and text.strip().isdigit() else None


def smallest_count(text: str) -> int | None:
    """Slurm's compressed per-node lists: '40(x2),20' -> 20; '2' -> 2; '' -> None."""
    counts = [_int(entry.split("(", 1)[0]) for entry in text.split(",") if entry.strip()]
    valid = [c for c in counts if c is not None]
    return min(valid) if valid else None


def count_gpus(text: str) -> int | None:
    """'4' -> 4, 'v100:2' -> 2, 'gpu:a100:2' -> 2, 'a100:2,v100:1' -> 3 (SLURM_GPUS_PER_NODE / --gres forms)."""
    total = None
    for entry in text.split(","):
        last = entry.strip().rsplit(":", 1)[-1].split("(", 1)[0]
        value = _int(last)
        if value is None:
            return None
        total = (total or 0) + value
    return total


def gres_gpus(text: str) -> int | None:
    """GPUs per node in a gres list, as srun's --gres or scontrol's TresPerNode write it: 'gpu:v100:2,nvme:200'
    -> 2, 'gres:gpu:2' and 'gres/gpu:a100:4' -> 2 and 4, 'gpu' or 'gpu:v100' (no count: one) -> 1; None when
    the list names no GPU."""
    for entry in text.split(","):
        name = entry.strip()
        for prefix in ("gres:", "gres/"):
            if name.startswith(prefix):
                name = name[len(prefix):]
        if name == "gpu" or name.startswith("gpu:"):
            count = count_gpus(name)
            return count if count is not None else 1
    return None


def read_allocation(environ: Mapping[str, str]) -> Allocation | None:
    """The job envrun runs in, or None outside one (login node, workstation)."""
    job_id = environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID")
    if not job_id:
        return None
    why: dict[str, str] = {}

    def take(field: str, name: str, value: int | None) -> int | None:
        if value is not None and field not in why:
            why[field] = f"{name}={environ[name]}"
        return value

    nodes = take("nodes", "SLURM_JOB_NUM_NODES", _int(environ.get("SLURM_JOB_NUM_NODES"))) \
        or take("nodes", "SLURM_NNODES", _int(environ.get("SLURM_NNODES"))) or 1
    ntasks = take("ntasks", "SLURM_NTASKS", _int(environ.get("SLURM_NTASKS")))
    tasks_per_node = take("tasks_per_node", "SLURM_NTASKS_PER_NODE", _int(environ.get("SLURM_NTASKS_PER_NODE")))
    if tasks_per_node is None and ntasks is not None and ntasks % nodes == 0:
        tasks_per_node = ntasks // nodes
        why["tasks_per_node"] = f"SLURM_NTASKS={ntasks} over {nodes} node{'s' if nodes > 1 else ''}"
    cpus_on_node = None
    for name in ("SLURM_JOB_CPUS_PER_NODE", "SLURM_CPUS_ON_NODE"):
        cpus_on_node = take("cpus_on_node", name, smallest_count(environ.get(name, "")))
        if cpus_on_node is not None:
            break
    # On a node (batch script, job step) a GPU job always has GPU variables; an salloc shell has none.
    on_node = bool(environ.get("SLURM_CPUS_ON_NODE") or environ.get("SLURM_STEP_ID") or environ.get("ENVIRONMENT") == "BATCH")
    gpus_on_node = None
    for name, parse in (("SLURM_GPUS_ON_NODE", _int), ("SLURM_GPUS_PER_NODE", count_gpus),
                        ("SLURM_JOB_GPUS", count_devices), ("SLURM_STEP_GPUS", count_devices),
                        *((v, count_devices) for v in VISIBLE_DEVICE_VARIABLES)):
        if environ.get(name):
            gpus_on_node = take("gpus_on_node", name, parse(environ[name]))
            if gpus_on_node is not None:
                break
    if gpus_on_node is None and on_node:
        gpus_on_node = 0
        why["gpus_on_node"] = "no GPU in the job's variables (SLURM_GPUS_ON_NODE, SLURM_JOB_GPUS, CUDA_VISIBLE_DEVICES, ...)"
    return Allocation(
        job_id=job_id, nodes=nodes, tasks_per_node=tasks_per_node, ntasks=ntasks,
        cpus_per_task=take("cpus_per_task", "SLURM_CPUS_PER_TASK", _int(environ.get("SLURM_CPUS_PER_TASK"))),
        cpus_on_node=cpus_on_node, gpus_on_node=gpus_on_node, partition=environ.get("SLURM_JOB_PARTITION", ""),
        in_step=bool(environ.get("SLURM_STEP_ID")), why=why,
    )


def gpus_from_scontrol(allocation: Allocation, run: Callable[[list[str]], str] | None = None) -> None:
    """Fill in the job's GPUs per node from `scontrol show job` where its variables cannot say (an salloc
    shell). One process start, only then; a failure leaves them unknown."""
    if allocation.gpus_on_node is not None:
        return
    if run is None:
        import subprocess

        def run(argv: list[str]) -> str:
            return subprocess.run(argv, capture_output=True, text=True, timeout=10, check=True).stdout

    try:
        text = run(["scontrol", "show", "job", "-o", allocation.job_id])
    except Exception:  # noqa: BLE001 - no scontrol, no controller, a timeout: the GPUs stay unknown
        return
    for field in text.split():
        key, _, value = field.partition("=")
        if key == "TresPerNode":  # gres:gpu:2, gres/gpu:a100:2, gres:gpu:v100:2,gres:nvme:200
            count = gres_gpus(value)
            if count is not None:
                allocation.gpus_on_node = count
                allocation.why["gpus_on_node"] = f"scontrol show job: TresPerNode={value}"
            return


