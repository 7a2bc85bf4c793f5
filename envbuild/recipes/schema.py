"""Recipe file schema (pydantic): validates recipes/*.yaml. Loading, with its JSON cache, is in
envbuild.recipes.loadrecipe; what a recipe computes is in envbuild.recipes.ops (shared with the cached view)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from envbuild.recipes.ops import MODEL_KEY, NodeMethods, RecipeMethods, parse_core_list
from envbuild.shared.strictmodel import StrictModel, check_version

if TYPE_CHECKING:
    from envbuild.recipes.protocols import SystemRecipe


class Detect(StrictModel):
    """How envrun tells it runs on this site (envbuild.recipes.detect): Slurm's cluster name, then variables the
    site sets on every node, then hostnames. A recipe that lists cluster names is not chosen in a Slurm job whose
    SLURM_CLUSTER_NAME is another one."""

    slurm_cluster_names: tuple[str, ...] = ()
    # variable -> the values that name this site, e.g. JSC's SYSTEMNAME: [jurecadc]
    environment: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    hostname_patterns: tuple[str, ...] = ()
    # the patterns count only where one of these paths exists: HPE Cray names its nodes nid* and uan* on every
    # such system (LUMI, Perlmutter), so `nid\d+` says LUMI only beside /appl/lumi
    hostname_requires_path: tuple[str, ...] = ()

    @field_validator("hostname_patterns")
    @classmethod
    def _patterns_compile(cls, patterns: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"hostname pattern {pattern!r} is not a regular expression: {exc}") from None
        return patterns


class Node(StrictModel, NodeMethods):
    gpus: int = Field(ge=0)
    gpu_vendor: Literal["none", "amd", "nvidia"] = "none"
    gpu_type: str | None = None
    cores: int = Field(ge=1, description="physical cores per node")
    usable_cores: int | None = Field(default=None, ge=1, description="cores jobs may use (some sites reserve cores)")
    threads_per_core: int = Field(default=1, ge=1)
    cores_per_gpu: int | None = Field(default=None, ge=1)
    memory_gb: int | None = Field(default=None, ge=1, description="memory a job may request per node")
    memory_per_gpu_gb: int | None = Field(default=None, ge=1)
    # GPU (local rank) -> the cores closest to it, e.g. LUMI-G's {0: '49-55', ...}.
    gpu_cores: dict[int, tuple[int, ...]] = Field(default_factory=dict)
    local_scratch: str | None = Field(default=None, description="variable naming node-local disk, e.g. LOCAL_SCRATCH")
    # What one Slurm "CPU" is: 1 where --cpus-per-task counts cores, 2 where it counts SMT threads (JUWELS)
    slurm_cpus_per_core: int = Field(default=1, ge=1)

    @field_validator("gpu_cores", mode="before")
    @classmethod
    def _parse_gpu_cores(cls, value: object) -> object:
        if isinstance(value, dict):
            return {int(k): parse_core_list(v) if isinstance(v, (str, int)) else v for k, v in value.items()}
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Node:
        if self.gpu_cores and sorted(self.gpu_cores) != list(range(self.gpus)):
            raise ValueError(f"gpu_cores must list GPUs 0..{self.gpus - 1}")
        for gpu, cores in self.gpu_cores.items():
            if any(core >= self.cores for core in cores):
                raise ValueError(f"gpu_cores[{gpu}] names a core beyond the node's {self.cores}")
        return self



class Partition(StrictModel):
    full_node: bool = False
    cpu_only: bool = Field(default=False, description="its nodes have no GPUs (JURECA dc-cpu): never chosen for a GPU job")
    test: bool = Field(default=False, description="a short development/test partition, chosen only when asked for")
    max_nodes: int | None = Field(default=None, ge=1)
    max_gpus_per_node: int | None = Field(default=None, ge=1)
    max_time: str | None = None
    # whole-node: a job is billed for every GPU (and core) of its nodes, whatever it asks for (LUMI standard-g);
    # allocated: for what it asks for. A partial GPU request on a whole-node partition pays for idle GPUs.
    billing: Literal["allocated", "whole-node"] = "allocated"


class Runtime(StrictModel):
    flags: tuple[str, ...] = ()


class PyTorchIndex(StrictModel):
    # "host": add no index and rely on the host's pip configuration; otherwise a URL where {tag}
    # becomes the variant's directory name (cpu, cu126, rocm6.4).
    index: str = "https://download.pytorch.org/whl/{tag}"
    default_variant: str = "cpu"


class ForbiddenOption(StrictModel):
    options: tuple[str, ...]
    unless: str | None = None  # an srun option that makes them safe, e.g. --gres-flags=allow-task-sharing
    why: str


class GpuBind(StrictModel):
    """Slurm binds each task of a one-task-per-GPU launch to its GPU (srun --gpu-bind=map:...), with
    --gres-flags=allow-task-sharing so that every task still reaches the node's other GPUs (GPU-to-GPU IPC).
    Where srun has that flag, this replaces the CPU masks and the per-task GPU variable: Slurm gives task i the
    i-th block of cores, and the map gives it the GPU closest to them (envbuild.launch.bindstyle)."""

    map: tuple[int, ...] = Field(description="local task i -> its GPU: srun --gpu-bind=map:<map>")
    task_sharing_since: str = Field(description="the first Slurm whose srun has --gres-flags=allow-task-sharing, "
                                                "e.g. 23.11.4: with an older one envrun keeps the CPU masks")

    @field_validator("task_sharing_since")
    @classmethod
    def _is_version(cls, value: str) -> str:
        return check_version(value, "a Slurm version (e.g. 23.11.4)")


class NumaBinding(StrictModel):
    """torchrun binds each rank to the cores near its GPU itself (--numa-binding=MODE), in place of envrun's
    per-rank affinity shim, when the image's torch is new enough."""

    mode: Literal["node", "socket", "exclusive", "core-complex"] = Field(description="torchrun --numa-binding=MODE")
    torch_since: str = Field(description="the oldest torch this site's guide runs it with, e.g. 2.11: with an older "
                                         "or unknown torch in the image envrun keeps its own per-rank affinity")

    @field_validator("torch_since")
    @classmethod
    def _is_version(cls, value: str) -> str:
        return check_version(value, "a torch version (e.g. 2.11)")


class Launch(StrictModel):
    """How jobs start on this system."""

    gpu_request: str | None = Field(default=None, description="srun/sbatch form, {gpus} replaced, e.g. --gres=gpu:v100:{gpus}")
    # Set in each task of a one-task-per-GPU launch, from that task's SLURM_* values (e.g. LUMI's
    # ROCR_VISIBLE_DEVICES=$SLURM_LOCALID). Values are variable names, evaluated inside the task.
    per_task_gpu_env: dict[str, str] = Field(default_factory=dict)
    # Set in the launching environment before srun (e.g. JUWELS: SRUN_CPUS_PER_TASK from SLURM_CPUS_PER_TASK).
    srun_env_from: dict[str, str] = Field(default_factory=dict)
    master_addr_suffix: str = Field(default="", description="appended to the first node's name, e.g. 'i' for InfiniBand")
    bind_cpus: bool = Field(default=True, description="pin each rank to its cores (mask_cpu from gpu_cores, or an even split)")
    forbidden_srun_options: tuple[ForbiddenOption, ...] = ()
    gpu_bind: GpuBind | None = None
    numa_binding: NumaBinding | None = None


class Staging(StrictModel):
    """Where `envrun sbatch --stage` puts data on each node."""

    dir: str = Field(description="node-local directory, a shell expression evaluated in the job ($LOCAL_SCRATCH)")
    gres: str | None = Field(default=None, description="requested with the job, {gb} replaced, e.g. nvme:{gb}")
    in_memory: bool = Field(default=False, description="the directory is RAM: staged data counts against the job's memory")
    max_gb: int | None = Field(default=None, ge=1, description="the most a job may stage per node")
    cleanup: bool = Field(default=False, description="remove the staged data when the job ends (nothing else does)")


class Batch(StrictModel):
    """How batch jobs are written on this system (`envrun sbatch`, `envrun sbatch --check`)."""

    account_required: bool = False
    account_example: str | None = None
    # per_gpu: --mem from node.memory_per_gpu_gb (node.memory_gb for whole nodes); auto: the site gives memory
    # with the GPUs or the node, and --mem is left out
    memory: Literal["per_gpu", "auto"] = "per_gpu"
    staging: Staging | None = None
    retired_partitions: dict[str, str] = Field(default_factory=dict, description="name -> why it is gone, what instead")


class Cotainr(StrictModel):
    """What conda environment builds (cotainr) start from on this system: `cotainr --system`'s systems.json
    entry, kept here with its source so that the check of torch wheels against it can read the GPU stack."""

    base_image: str | None = Field(default=None, description="cotainr --base-image: docker://..., oras://... or a path")
    rocm: str | None = Field(default=None, description="the ROCm version in the base image, e.g. 6.2")
    cuda: str | None = Field(default=None, description="the CUDA version in the base image, e.g. 12.6")


class Network(StrictModel):
    """The interconnect between nodes and what a container needs to use it (`envrun doctor`, `--strict-net`)."""

    fabric: Literal["none", "ethernet", "slingshot", "infiniband"] = Field(
        default="none", description="none/ethernet: nothing beyond TCP sockets to check")
    # NCCL/RCCL net plugins the image must carry for the fabric, as file-name globs (LUMI: librccl-net*.so)
    plugins: tuple[str, ...] = ()
    # NCCL_NET value that makes NCCL/RCCL fail instead of falling back to sockets (--strict-net): "IB" for
    # NCCL's own InfiniBand transport, the plugin's name ("AWS Libfabric") for the OFI plugins
    nccl_net: str | None = None
    strict_net: bool = Field(default=False, description="set NCCL_NET on every launch, as --strict-net does")
    # host files a containerised libfabric needs when the image does not carry a CXI-capable one (LUMI)
    host_libfabric: tuple[str, ...] = Field(default=(), description="globs of the host's libfabric.so (CXI)")


class Recipe(StrictModel, RecipeMethods):
    """A system recipe (recipes/*.yaml), validated: the facts of one site."""

    name: str
    description: str = ""
    # The CPU architecture of the system's nodes (uname -m): images built for another one fail with
    # "exec format error", so builds, locks and envrun check it against the host and the image.
    architecture: Literal["x86_64", "aarch64"] = "x86_64"
    detect: Detect = Detect()
    # `node: host` in the file (None here): no site facts; envrun reads the cores and GPUs of the machine it
    # runs on and of the job it runs in (any cluster, a workstation)
    node: Node | None
    processes_per_node: int | None = Field(default=None, ge=1, description="CPU-only systems: DDP processes per node")
    partitions: dict[str, Partition] = Field(default_factory=dict)
    runtime: Runtime = Runtime()
    binds: tuple[str, ...] = ()
    multinode_binds: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)
    launch: Launch = Launch()
    pytorch: PyTorchIndex = PyTorchIndex()
    batch: Batch = Batch()
    cotainr: Cotainr = Cotainr()
    network: Network = Network()
    notes: tuple[str, ...] = ()

    @field_validator("node", mode="before")
    @classmethod
    def _host_node(cls, value: object) -> object:
        if value is None:
            raise ValueError("give the node's facts, or `node: host` to read them from the machine envrun runs on")
        return None if value == "host" else value

    @model_validator(mode="after")
    def _gpu_bind_fits_the_node(self) -> Recipe:
        """launch.gpu_bind.map gives every GPU of the node to one task, and task i the GPU of the i-th block of
        cores (node.gpu_cores ordered by their first core): Slurm hands a whole node's tasks their cores in that
        order, so any other map would put tasks beside a far GPU."""
        bind = self.launch.gpu_bind
        if bind is None:
            return self
        if self.node is None or not self.node.gpu_cores:
            raise ValueError("launch.gpu_bind needs node.gpu_cores (which cores each GPU is closest to)")
        if sorted(bind.map) != list(range(self.node.gpus)):
            raise ValueError(f"launch.gpu_bind.map must name each GPU 0..{self.node.gpus - 1} once, not {list(bind.map)}")
        cores = self.node.gpu_cores
        by_cores = sorted(cores, key=lambda gpu: min(cores[gpu]))
        if list(bind.map) != by_cores:
            raise ValueError(f"launch.gpu_bind.map {list(bind.map)} does not follow node.gpu_cores: task i gets the i-th "
                             f"block of cores, whose GPUs are {by_cores} in that order")
        return self


def dump_for_cache(value: Any) -> Any:
    """JSON-able form of a validated model that keeps which model each mapping was (for the views)."""
    if isinstance(value, BaseModel):
        return {MODEL_KEY: type(value).__name__, **{name: dump_for_cache(getattr(value, name)) for name in type(value).model_fields}}
    if isinstance(value, dict):
        return {str(key): dump_for_cache(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [dump_for_cache(item) for item in value]
    return value


if TYPE_CHECKING:
    def _read_as_system_recipe(recipe: Recipe) -> SystemRecipe:
        """Checked by mypy only: the schema keeps the shape its readers are annotated with (recipes/protocols.py)."""
        return recipe
