"""What `envrun recipe draft` reads of the cluster it runs on, as text for the pure planner
(envbuild.slurm.recipedraft): `scontrol show config` (ClusterName, where slurm.conf and so gres.conf are),
`scontrol show partition|node --oneliner`, gres.conf (Cores=: which cores each GPU is closest to) and, on one of
the cluster's nodes (inside a job there, or a login node that is one), `lscpu -p` (NUMA domains, CPU -> core) and
`nvidia-smi topo -m` or `rocm-smi --showtoponuma` (each GPU's CPU or NUMA affinity).

Without Slurm (scontrol missing, or not answering within SCONTROL_TIMEOUT_S) there is nothing to draft from:
a usage error that says so.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping
from typing import Any

from envbuild.shared.errors import UsageError
from envbuild.slurm.cluster import SCONTROL_TIMEOUT_S, parse_oneliners
from envbuild.slurm.recipedraft import DraftInput, NodeProbe

TOOL_TIMEOUT_S = 30  # nvidia-smi can take seconds to wake idle GPUs
GRES_CONF_LIMIT = 1 << 20  # a gres.conf is a few KiB
GPU_TOOLS = (("nvidia-smi", ("topo", "-m")), ("rocm-smi", ("--showtoponuma",)))
NO_SLURM_FIX = ("run it on a login node of the cluster (where `scontrol show partition` answers), or start from "
                "a recipe in recipes/ and write the site's facts by hand (docs/concepts/recipes.md)")

Runner = Callable[..., Any]


def _run(run: Runner, argv: list[str], timeout: int) -> str | None:
    """The standard output of `argv`, or None when it is missing, fails or does not answer in time."""
    try:
        done = run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return str(done.stdout) if done.returncode == 0 else None


def _scontrol(run: Runner, *words: str) -> str:
    try:
        done = run(["scontrol", *words], capture_output=True, text=True, timeout=SCONTROL_TIMEOUT_S, check=False)
    except FileNotFoundError:
        raise UsageError("envrun recipe draft reads the cluster through Slurm's scontrol, which is not on PATH here",
                         NO_SLURM_FIX) from None
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UsageError(f"`scontrol {' '.join(words)}` did not answer: {exc}", NO_SLURM_FIX) from None
    if done.returncode != 0:
        message = " ".join(str(done.stderr).split())[:300] or f"exit status {done.returncode}"
        raise UsageError(f"`scontrol {' '.join(words)}` failed: {message}", NO_SLURM_FIX)
    return str(done.stdout)


def config_values(text: str) -> dict[str, str]:
    """`scontrol show config`'s `Key = Value` lines."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, equals, value = line.partition("=")
        if equals and key.strip() and " " not in key.strip():
            values[key.strip()] = value.strip()
    return values


def read_gres_conf(slurm_conf: str) -> tuple[str | None, str, str]:
    """(gres.conf's text or None, its path, why there is none): it sits beside slurm.conf."""
    path = os.path.join(os.path.dirname(slurm_conf or "/etc/slurm/slurm.conf"), "gres.conf")
    try:
        with open(path, "rb") as handle:
            return handle.read(GRES_CONF_LIMIT).decode("utf-8", "replace"), path, ""
    except FileNotFoundError:
        return None, path, f"no {path} here; a configless Slurm keeps it on the nodes"
    except OSError as exc:
        return None, path, f"{path}: {exc.strerror}"


def probe_node(node: str, run: Runner, which: Callable[[str], str | None] = shutil.which) -> NodeProbe:
    """lscpu's CPU list and the first GPU tool that answers, on this node."""
    lscpu = _run(run, ["lscpu", "-p=CPU,CORE,SOCKET,NODE"], TOOL_TIMEOUT_S) or ""
    for tool, words in GPU_TOOLS:
        if which(tool) is None:
            continue
        output = _run(run, [tool, *words], TOOL_TIMEOUT_S)
        if output:
            return NodeProbe(node=node, lscpu=lscpu, gpu_tool=" ".join([tool, *words]), gpu_tool_output=output)
    return NodeProbe(node=node, lscpu=lscpu)


def read_draft_input(*, name: str | None, partition: str | None, environ: Mapping[str, str],
                     run: Runner = subprocess.run, hostname: str | None = None) -> DraftInput:
    """Everything the planner needs, read now. `name`: the recipe's name (None: the cluster's)."""
    config = config_values(_scontrol(run, "show", "config"))
    partitions = _scontrol(run, "show", "partition", "--oneliner")
    nodes = _scontrol(run, "show", "node", "--oneliner")
    cluster = config.get("ClusterName") or "cluster"
    gres_conf, gres_path, gres_why = read_gres_conf(environ.get("SLURM_CONF") or config.get("SLURM_CONF", ""))
    node_names = {entity["NodeName"] for entity in parse_oneliners(nodes) if entity.get("NodeName")}
    here = environ.get("SLURMD_NODENAME") or hostname or os.uname().nodename
    probe = probe_node(here, run) if here in node_names else None
    return DraftInput(cluster=cluster, name=name or recipe_name(cluster), drafted_at=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                      partitions_text=partitions, nodes_text=nodes, gres_conf=gres_conf, gres_conf_path=gres_path,
                      gres_conf_why=gres_why, probe=probe, partition=partition)


def recipe_name(cluster: str) -> str:
    """A recipe name from a ClusterName: lower case, letters, digits and dashes."""
    name = "".join(char if char.isalnum() else "-" for char in cluster.lower()).strip("-")
    return name or "cluster"
