"""System recipes: per-site knowledge (GPUs, cores, binds, env, wheel indexes, launch rules) kept as
data in recipes/*.yaml, each fact citing its public source in a comment there."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from envbuild.errors import UsageError
from envbuild.yamlsource import load_yaml_file


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Detect(_Strict):
    slurm_cluster_names: tuple[str, ...] = ()
    hostname_patterns: tuple[str, ...] = ()


def parse_core_list(text: str) -> tuple[int, ...]:
    """'1-7' -> (1..7); '0,2,4-5' -> (0, 2, 4, 5)."""
    cores: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        if not re.fullmatch(r"\d+(-\d+)?", part):
            raise ValueError(f"{text!r} is not a core list like '1-7' or '0,2,4-5'")
        low, _, high = part.partition("-")
        cores.extend(range(int(low), int(high or low) + 1))
    return tuple(cores)


def cores_to_mask(cores: tuple[int, ...], width: int) -> str:
    """Cores -> srun's mask_cpu hex form, zero-padded to the node's core count: (1..7), 64 -> 0x00000000000000fe."""
    value = sum(1 << core for core in cores)
    return f"0x{value:0{max(1, (width + 3) // 4)}x}"


class Node(_Strict):
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
    gpu_cores: dict[int, tuple[int, ...]] = {}
    local_scratch: str | None = Field(default=None, description="variable naming node-local disk, e.g. LOCAL_SCRATCH")

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

    @property
    def usable(self) -> int:
        return self.usable_cores or self.cores


class Partition(_Strict):
    full_node: bool = False
    max_nodes: int | None = Field(default=None, ge=1)
    max_gpus_per_node: int | None = Field(default=None, ge=1)
    max_time: str | None = None


class Runtime(_Strict):
    flags: tuple[str, ...] = ()


class PyTorchIndex(_Strict):
    # "host": add no index and rely on the host's pip configuration; otherwise a URL where {tag}
    # becomes the variant's directory name (cpu, cu126, rocm6.4).
    index: str = "https://download.pytorch.org/whl/{tag}"
    default_variant: str = "cpu"


class ForbiddenOption(_Strict):
    options: tuple[str, ...]
    unless: str | None = None  # an srun option that makes them safe, e.g. --gres-flags=allow-task-sharing
    why: str


class Launch(_Strict):
    """How jobs start on this system."""

    gpu_request: str | None = Field(default=None, description="srun/sbatch form, {gpus} replaced, e.g. --gres=gpu:v100:{gpus}")
    # Set in each task of a one-task-per-GPU launch, from that task's SLURM_* values (e.g. LUMI's
    # ROCR_VISIBLE_DEVICES=$SLURM_LOCALID). Values are variable names, evaluated inside the task.
    per_task_gpu_env: dict[str, str] = {}
    # Set in the launching environment before srun (e.g. JUWELS: SRUN_CPUS_PER_TASK from SLURM_CPUS_PER_TASK).
    srun_env_from: dict[str, str] = {}
    master_addr_suffix: str = Field(default="", description="appended to the first node's name, e.g. 'i' for InfiniBand")
    bind_cpus: bool = Field(default=True, description="pin each rank to its cores (mask_cpu from gpu_cores, or an even split)")
    forbidden_srun_options: tuple[ForbiddenOption, ...] = ()


class Recipe(_Strict):
    name: str
    description: str = ""
    detect: Detect = Detect()
    node: Node
    processes_per_node: int | None = Field(default=None, ge=1, description="CPU-only systems: DDP processes per node")
    partitions: dict[str, Partition] = {}
    runtime: Runtime = Runtime()
    binds: tuple[str, ...] = ()
    multinode_binds: tuple[str, ...] = ()
    env: dict[str, str] = {}
    launch: Launch = Launch()
    pytorch: PyTorchIndex = PyTorchIndex()
    notes: tuple[str, ...] = ()

    def pytorch_index_for(self, wheel_tag: str) -> str | None:
        """The wheel index URL for a PyTorch variant, or None when the host's pip configuration decides."""
        if self.pytorch.index == "host":
            return None
        return self.pytorch.index.replace("{tag}", wheel_tag)

    def processes(self) -> int:
        """Training processes per node: one per GPU, else the recipe's CPU process count."""
        return self.node.gpus or self.processes_per_node or 1

    def rank_cores(self, local_rank: int, per_node: int) -> tuple[int, ...]:
        """The cores local rank `local_rank` of `per_node` ranks should run on."""
        if self.node.gpu_cores and per_node <= self.node.gpus:
            return self.node.gpu_cores[local_rank]
        usable = self.node.usable
        share = max(1, usable // per_node)
        start = (local_rank * share) % usable
        return tuple(range(start, start + share))

    def cpu_masks(self, per_node: int) -> tuple[str, ...]:
        return tuple(cores_to_mask(self.rank_cores(r, per_node), self.node.cores) for r in range(per_node))


def recipes_dir() -> Path:
    """$ENVBUILD_RECIPES, else the recipes shipped inside the package, else the checkout's recipes/."""
    override = os.environ.get("ENVBUILD_RECIPES")
    if override:
        return Path(override)
    packaged = Path(__file__).with_name("_recipes")
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent / "recipes"


def available_recipes(directory: Path | None = None) -> list[str]:
    directory = directory or recipes_dir()
    return sorted(p.stem for p in directory.glob("*.yaml"))


def load_recipe(name: str, directory: Path | None = None) -> Recipe:
    directory = directory or recipes_dir()
    path = directory / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(available_recipes(directory)) or "none"
        raise UsageError(
            f"no system recipe named {name!r} in {directory}",
            f"use one of: {known} (or add recipes/{name}.yaml)",
        )
    document = load_yaml_file(path)
    try:
        recipe = Recipe.model_validate(document.data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = tuple(first["loc"])
        pos = document.position_of(loc)
        field = ".".join(str(part) for part in loc)
        raise UsageError(f"{path}:{pos.line}:{pos.column}: {field}: {first['msg']}", "fix the recipe file") from None
    if recipe.name != name:
        raise UsageError(f"{path}: name is {recipe.name!r} but the file is named {name}.yaml", "make them agree")
    return recipe
