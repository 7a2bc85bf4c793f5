"""Where this process sits in the job, whichever launcher started it.

torchrun exports RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT itself.
`srun python` (one Slurm task per process) only sets SLURM_* variables unless the launcher translates
them, so fill_torch_env_from_slurm() derives the torch variables from Slurm's when RANK is missing.
torch.distributed's env:// rendezvous and HuggingFace Accelerate then work unchanged.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass


@dataclass(frozen=True)
class RankLayout:
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int

    @property
    def num_nodes(self) -> int:
        return max(1, self.world_size // max(1, self.local_world_size))


def current_layout(environ: Mapping[str, str] | None = None) -> RankLayout:
    """The torch variables as they are now; a plain `python x.py` is a job of one."""
    env = os.environ if environ is None else environ
    world = int(env.get("WORLD_SIZE", "1"))
    return RankLayout(
        rank=int(env.get("RANK", "0")),
        local_rank=int(env.get("LOCAL_RANK", "0")),
        world_size=world,
        local_world_size=int(env.get("LOCAL_WORLD_SIZE", str(world))),
    )


def expand_tasks_per_node(value: str) -> list[int]:
    """Slurm's compressed per-node counts: "2(x3),1" -> [2, 2, 2, 1]."""
    counts: list[int] = []
    for part in value.split(","):
        match = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if not match:
            raise ValueError(f"cannot read Slurm tasks-per-node value {value!r}")
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts


def slurm_tasks_on_this_node(environ: Mapping[str, str]) -> int:
    # The step's own layout wins: a job step may use fewer tasks than the allocation has.
    for name in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"):
        if name in environ:
            counts = expand_tasks_per_node(environ[name])
            node = int(environ.get("SLURM_NODEID", "0"))
            return counts[min(node, len(counts) - 1)]
    if "SLURM_NTASKS_PER_NODE" in environ:
        return int(environ["SLURM_NTASKS_PER_NODE"])
    return int(environ.get("SLURM_NTASKS", "1"))


def first_host(nodelist: str) -> str:
    """First host of a Slurm hostlist: "gpu[07-09,12],login1" -> "gpu07" (zero padding kept)."""
    match = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if not match:
        raise ValueError(f"cannot read Slurm node list {nodelist!r}")
    prefix, ranges = match.group(1), match.group(2)
    if ranges is None:
        return prefix
    return prefix + re.split(r"[-,]", ranges, maxsplit=1)[0]


def fill_torch_env_from_slurm(environ: MutableMapping[str, str] | None = None) -> list[str]:
    """Set the torch variables from SLURM_* when the launcher did not; returns the names it set.

    Does nothing under torchrun (which sets RANK for its workers) or outside a Slurm step.
    """
    env = os.environ if environ is None else environ
    if "RANK" in env or "SLURM_PROCID" not in env:
        return []
    derived = {
        "RANK": env["SLURM_PROCID"],
        "LOCAL_RANK": env.get("SLURM_LOCALID", "0"),
        "WORLD_SIZE": env.get("SLURM_STEP_NUM_TASKS", env.get("SLURM_NTASKS", "1")),
        "LOCAL_WORLD_SIZE": str(slurm_tasks_on_this_node(env)),
    }
    if "MASTER_ADDR" not in env:
        nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
        derived["MASTER_ADDR"] = first_host(nodelist) if nodelist else "127.0.0.1"
    if "MASTER_PORT" not in env:
        # Every task computes the same port from the job id, so no task has to tell the others.
        derived["MASTER_PORT"] = str(20000 + int(env.get("SLURM_JOB_ID", "0")) % 10000)
    set_names = [name for name in derived if name not in env]
    for name in set_names:
        env[name] = derived[name]
    return set_names


def fill_single_process_env(environ: MutableMapping[str, str] | None = None) -> bool:
    """Make a plain `python x.py` (no launcher at all) a job of one, so the same env:// code path runs."""
    env = os.environ if environ is None else environ
    if "RANK" in env:
        return False
    with socket.socket() as probe:  # any free port; nobody else has to find it
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    defaults = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1",
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    for name, value in defaults.items():
        env.setdefault(name, value)
    return True
