"""What a system recipe's readers may read, whichever of the two models holds it: the validated pydantic
Recipe (envbuild.recipes.schema, when a recipe file is checked or a build validates it) or the light
RecipeView that envrun reads from the cache (envbuild.recipes.ops). Planners, checks and launches are
annotated with these protocols, so the type checker holds both models to one shape.

A member is an attribute where both models have the same type, and a property (read-only, so a narrower
type fits) where the schema's is narrower: a Literal, a dict, a nested model. Type-checking only: modules on
envrun's launch path import this under TYPE_CHECKING (typing stays out of its start-up).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol


class RecipeNode(Protocol):
    gpus: int
    gpu_type: str | None
    cores: int
    usable_cores: int | None
    threads_per_core: int
    cores_per_gpu: int | None
    memory_gb: int | None
    memory_per_gpu_gb: int | None
    local_scratch: str | None
    slurm_cpus_per_core: int

    @property
    def gpu_vendor(self) -> str: ...
    @property
    def gpu_cores(self) -> Mapping[int, tuple[int, ...]]: ...
    @property
    def usable(self) -> int: ...


class RecipePartition(Protocol):
    full_node: bool
    cpu_only: bool
    test: bool
    max_nodes: int | None
    max_gpus_per_node: int | None
    max_time: str | None

    @property
    def billing(self) -> str: ...


class RecipeRuntime(Protocol):
    flags: tuple[str, ...]


class RecipePyTorch(Protocol):
    index: str
    default_variant: str


class RecipeForbiddenOption(Protocol):
    options: tuple[str, ...]
    unless: str | None
    why: str


class RecipeLaunch(Protocol):
    gpu_request: str | None
    master_addr_suffix: str
    bind_cpus: bool

    @property
    def per_task_gpu_env(self) -> Mapping[str, str]: ...
    @property
    def srun_env_from(self) -> Mapping[str, str]: ...
    @property
    def forbidden_srun_options(self) -> tuple[RecipeForbiddenOption, ...]: ...


class RecipeStaging(Protocol):
    dir: str
    gres: str | None
    in_memory: bool
    max_gb: int | None
    cleanup: bool


class RecipeBatch(Protocol):
    account_required: bool
    account_example: str | None

    @property
    def memory(self) -> str: ...
    @property
    def staging(self) -> RecipeStaging | None: ...
    @property
    def retired_partitions(self) -> Mapping[str, str]: ...


class RecipeCotainr(Protocol):
    base_image: str | None
    rocm: str | None
    cuda: str | None


class RecipeNetwork(Protocol):
    plugins: tuple[str, ...]
    nccl_net: str | None
    strict_net: bool
    host_libfabric: tuple[str, ...]

    @property
    def fabric(self) -> str: ...


class SystemRecipe(Protocol):
    """A system recipe as its readers see it (recipes/*.yaml, validated)."""

    name: str
    description: str
    processes_per_node: int | None
    binds: tuple[str, ...]
    multinode_binds: tuple[str, ...]
    notes: tuple[str, ...]

    @property
    def architecture(self) -> str: ...
    @property
    def node(self) -> RecipeNode | None: ...
    @property
    def partitions(self) -> Mapping[str, RecipePartition]: ...
    @property
    def runtime(self) -> RecipeRuntime: ...
    @property
    def env(self) -> Mapping[str, str]: ...
    @property
    def launch(self) -> RecipeLaunch: ...
    @property
    def pytorch(self) -> RecipePyTorch: ...
    @property
    def batch(self) -> RecipeBatch: ...
    @property
    def cotainr(self) -> RecipeCotainr: ...
    @property
    def network(self) -> RecipeNetwork: ...

    def cite(self, field: str) -> str: ...
    def pytorch_index_for(self, wheel_tag: str) -> str | None: ...
