"""Which system recipe applies: --system, $ENVBUILD_SYSTEM, or detection from Slurm and the hostname."""

from __future__ import annotations

import os

from envbuild.recipes.load import detection_table, load_recipe

TYPE_CHECKING = False  # typing itself is not imported: envrun's start-up
if TYPE_CHECKING:
    from collections.abc import Mapping

    from envbuild.recipes.schema import Recipe

DEFAULT_SYSTEM = "local"


def detect_system(environ: Mapping[str, str], hostname: str | None = None) -> tuple[str, str]:
    """(recipe name, why). Slurm's cluster name wins over hostname patterns."""
    if environ.get("ENVBUILD_SYSTEM"):
        return environ["ENVBUILD_SYSTEM"], "$ENVBUILD_SYSTEM"
    detects = detection_table()  # each recipe's `detect`, from one cache file
    cluster = environ.get("SLURM_CLUSTER_NAME")
    if cluster:
        for name, detect in detects:
            if cluster in (detect.get("slurm_cluster_names") or ()):
                return name, f"SLURM_CLUSTER_NAME={cluster}"
    hostname = hostname if hostname is not None else os.uname().nodename
    for name, detect in detects:
        # Only patterns whose fixed start fits the hostname need the regex engine (importing re costs
        # envrun ~8 ms, and most launches happen where no pattern can match).
        candidates = [p for p in detect.get("hostname_patterns") or () if hostname.startswith(_literal_prefix(p))]
        if candidates:
            import re

            if any(re.match(pattern, hostname) for pattern in candidates):
                return name, f"hostname {hostname}"
    return DEFAULT_SYSTEM, "no site detected; default"


def resolve_recipe(system: str | None, environ: Mapping[str, str]) -> tuple[Recipe, str]:
    if system:
        return load_recipe(system), "--system"
    name, why = detect_system(environ)
    return load_recipe(name), why


def _literal_prefix(pattern: str) -> str:
    """The text a '^'-anchored regex must start with: '^nid\\d+' -> 'nid'. Unanchored patterns -> ''."""
    if not pattern.startswith("^"):
        return ""
    prefix = []
    for char in pattern[1:]:
        if char in "\\.[]()*+?{}|$^":
            break
        prefix.append(char)
    if prefix and pattern[1 + len(prefix) : 2 + len(prefix)] in ("*", "?", "{"):
        prefix.pop()  # the last literal is optional or repeated
    return "".join(prefix)
