"""System recipes: per-site knowledge (GPUs, cores, binds, env, wheel indexes) kept as data in recipes/*.yaml."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from envbuild.errors import UsageError
from envbuild.yamlsource import load_yaml_file


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Detect(_Strict):
    slurm_cluster_names: tuple[str, ...] = ()
    hostname_patterns: tuple[str, ...] = ()


class Node(_Strict):
    gpus: int = Field(ge=0)
    gpu_vendor: Literal["none", "amd", "nvidia"] = "none"
    cores: int = Field(ge=1)
    usable_cores: int | None = Field(default=None, ge=1)
    cores_per_gpu: int | None = Field(default=None, ge=1)
    memory_per_gpu_gb: int | None = Field(default=None, ge=1)


class Partition(_Strict):
    full_node: bool = False
    max_nodes: int | None = Field(default=None, ge=1)
    max_time: str | None = None


class Runtime(_Strict):
    flags: tuple[str, ...] = ()


class PyTorchIndex(_Strict):
    # "host": add no index and rely on the host's pip configuration; otherwise a URL where {tag}
    # becomes the variant's directory name (cpu, cu126, rocm6.4).
    index: str = "https://download.pytorch.org/whl/{tag}"
    default_variant: str = "cpu"


class Recipe(_Strict):
    name: str
    description: str = ""
    detect: Detect = Detect()
    node: Node
    processes_per_node: int | None = Field(default=None, ge=1)
    cpu_bind: str | None = None
    gpu_request: str | None = None
    partitions: dict[str, Partition] = {}
    runtime: Runtime = Runtime()
    binds: tuple[str, ...] = ()
    multinode_binds: tuple[str, ...] = ()
    env: dict[str, str] = {}
    pytorch: PyTorchIndex = PyTorchIndex()
    notes: tuple[str, ...] = ()

    def pytorch_index_for(self, wheel_tag: str) -> str | None:
        """The wheel index URL for a PyTorch variant, or None when the host's pip configuration decides."""
        if self.pytorch.index == "host":
            return None
        return self.pytorch.index.replace("{tag}", wheel_tag)


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
