"""Which system recipe applies: --system, $ENVBUILD_SYSTEM, or detection from Slurm and the hostname."""

from __future__ import annotations

import re
import socket
from collections.abc import Mapping
from typing import TYPE_CHECKING

from envbuild.recipes import available_recipes, load_recipe

if TYPE_CHECKING:
    from envbuild.recipeschema import Recipe

DEFAULT_SYSTEM = "local"


def detect_system(environ: Mapping[str, str], hostname: str | None = None) -> tuple[str, str]:
    """(recipe name, why). Slurm's cluster name wins over hostname patterns."""
    if environ.get("ENVBUILD_SYSTEM"):
        return environ["ENVBUILD_SYSTEM"], "$ENVBUILD_SYSTEM"
    recipes = [load_recipe(name) for name in available_recipes()]
    cluster = environ.get("SLURM_CLUSTER_NAME")
    if cluster:
        for recipe in recipes:
            if cluster in recipe.detect.slurm_cluster_names:
                return recipe.name, f"SLURM_CLUSTER_NAME={cluster}"
    hostname = hostname if hostname is not None else socket.gethostname()
    for recipe in recipes:
        if any(re.match(pattern, hostname) for pattern in recipe.detect.hostname_patterns):
            return recipe.name, f"hostname {hostname}"
    return DEFAULT_SYSTEM, "no site detected; default"


def resolve_recipe(system: str | None, environ: Mapping[str, str]) -> tuple[Recipe, str]:
    if system:
        return load_recipe(system), "--system"
    name, why = detect_system(environ)
    return load_recipe(name), why
