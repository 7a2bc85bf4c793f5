"""Which system recipe applies: --system, $ENVBUILD_SYSTEM, or detection from the site's own evidence, in this
order: Slurm's cluster name ($SLURM_CLUSTER_NAME in a job, else ClusterName in slurm.conf), a variable the site
sets on its nodes (JSC's $SYSTEMNAME), then hostname patterns. Detection names a site only on evidence; with
none it says what it looked at. A launch then runs with the `local` recipe (this machine's own facts), while
`envrun sbatch --check` runs without site rules rather than check a job against the wrong site."""

from __future__ import annotations

import os

from envbuild.recipes.loadrecipe import detection_table, is_recipe_path, load_recipe

TYPE_CHECKING = False  # typing itself is not imported: envrun's start-up
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

    from envbuild.recipes.protocols import SystemRecipe

DEFAULT_SYSTEM = "local"
SLURM_CONF = "/etc/slurm/slurm.conf"  # Slurm's default; $SLURM_CONF names another
_SLURM_CONF_MAX = 1 << 20  # a slurm.conf is a few KiB: more is not read


def detect_site(environ: Mapping[str, str], hostname: str | None = None,
                slurm_conf: str | None = None) -> tuple[str | None, str]:
    """(recipe name, why), or (None, what was looked at) when nothing names a known site.

    slurm_conf: the file to read ClusterName from outside a job; None: $SLURM_CONF or Slurm's default;
    "": none (tests)."""
    if environ.get("ENVBUILD_SYSTEM"):
        return environ["ENVBUILD_SYSTEM"], "$ENVBUILD_SYSTEM"
    detects: Sequence[tuple[str, dict[str, Any]]] = detection_table()  # each recipe's `detect`, one cache file
    markers = sorted({variable for _name, detect in detects for variable in detect.get("environment") or {}})
    cluster, cluster_evidence = _cluster_name(environ, slurm_conf)
    if cluster:
        for name, detect in detects:
            if cluster in (detect.get("slurm_cluster_names") or ()):
                return name, cluster_evidence
        # An unknown cluster name rules nothing out: several recipes' cluster names are not confirmed by a public
        # source, and a wrong one must not hide a site whose own hostnames and variables say where we are.
    for name, detect in detects:
        for variable, values in (detect.get("environment") or {}).items():
            if environ.get(variable) and environ[variable] in values:
                return name, f"{variable}={environ[variable]}"
    hostname = hostname if hostname is not None else os.uname().nodename
    for name, detect in detects:
        why = _hostname_evidence(detect, hostname)
        if why:
            return name, why
    looked = [cluster_evidence or "no SLURM_CLUSTER_NAME or slurm.conf ClusterName",
              *(f"{variable}={environ[variable]}" for variable in markers if environ.get(variable)),
              f"hostname {hostname}"]
    return None, ", ".join(looked)


def detect_system(environ: Mapping[str, str], hostname: str | None = None,
                  slurm_conf: str | None = None) -> tuple[str, str]:
    """(recipe name, why) for a launch or a build: the detected site, else `local`, which reads the facts of the
    machine it runs on and so fits any cluster or workstation."""
    name, why = detect_site(environ, hostname, slurm_conf)
    if name is None:
        return DEFAULT_SYSTEM, f"no known site ({why}): the {DEFAULT_SYSTEM} recipe, this machine's own facts"
    return name, why


def system_option(system: str) -> str:
    """Why a recipe was used, for --explain and the dry run: `--system`, with the file where it names one."""
    return f"--system {system}" if is_recipe_path(system) else "--system"


def resolve_recipe(system: str | None, environ: Mapping[str, str]) -> tuple[SystemRecipe, str]:
    if system:
        return load_recipe(system), system_option(system)
    name, why = detect_system(environ)
    return load_recipe(name), why


def resolve_site_recipe(system: str | None, environ: Mapping[str, str]) -> tuple[SystemRecipe | None, str]:
    """The recipe of the site named (--system) or detected, or (None, what detection looked at) on a site without
    a recipe: for checks, whose site rules must not be another site's (never `local` for an unknown site)."""
    if system:
        return load_recipe(system), system_option(system)
    name, why = detect_site(environ)
    return (load_recipe(name) if name else None), why


def cluster_name(environ: Mapping[str, str], slurm_conf: str | None = None) -> tuple[str, str]:
    """(Slurm's cluster name, where it was read), as detection reads it (see _cluster_name)."""
    return _cluster_name(environ, slurm_conf)


def _cluster_name(environ: Mapping[str, str], slurm_conf: str | None) -> tuple[str, str]:
    """(Slurm's cluster name, where it was read), ("", "") if nowhere: the job's $SLURM_CLUSTER_NAME, else
    ClusterName in slurm.conf (login nodes; srun and sbatch set the variable only inside a job)."""
    if environ.get("SLURM_CLUSTER_NAME"):
        return environ["SLURM_CLUSTER_NAME"], f"SLURM_CLUSTER_NAME={environ['SLURM_CLUSTER_NAME']}"
    path = (environ.get("SLURM_CONF") or SLURM_CONF) if slurm_conf is None else slurm_conf
    if not path:
        return "", ""
    try:
        with open(path, "rb") as handle:
            text = handle.read(_SLURM_CONF_MAX).decode("utf-8", "replace")
    except OSError:
        return "", ""
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key.strip().lower() == "clustername":  # slurm.conf keys are case-insensitive
            value = value.split("#", 1)[0].strip()
            if value:
                # slurm.conf(5): upper-case letters in the name are mapped to lower case
                return value.lower(), f"ClusterName={value.lower()} in {path}"
    return "", ""


def _hostname_evidence(detect: dict[str, Any], hostname: str) -> str:
    """Why `hostname` names this recipe's site ('' when it does not): a pattern matches, and where the recipe
    says its patterns are shared with other sites, one of its site paths exists."""
    # Only patterns whose fixed start fits the hostname need the regex engine (importing re weighs on
    # envrun's start-up, and most launches happen where no pattern can match).
    candidates = [p for p in detect.get("hostname_patterns") or () if hostname.startswith(_literal_prefix(p))]
    if not candidates:
        return ""
    import re

    if not any(re.match(pattern, hostname) for pattern in candidates):
        return ""
    required = detect.get("hostname_requires_path") or ()
    if not required:
        return f"hostname {hostname}"
    present = next((path for path in required if site_path_exists(path)), None)
    return f"hostname {hostname} beside {present}" if present else ""


def site_path_exists(path: str) -> bool:
    """Whether a site's own directory (LUMI's /appl/lumi) is here; tests stand in for it."""
    return os.path.isdir(path)


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
