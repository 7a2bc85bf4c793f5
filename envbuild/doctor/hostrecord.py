"""What doctor reads on a host (a login node, or each node of a job): one record, live or from a file.

Every host fact the checks use goes through `HostRecord`: which paths exist and of what kind, what glob
patterns match, which directories are writable, the job's and the user's variables, and (inside a job) what
torch said inside the container on that node. `capture_host` fills it from the machine it runs on; a JSON
file holds a recorded one (tests/fixtures/hosts: a LUMI-G node, a Puhti node), and each node of a job sends
its record back to the doctor as one JSON line (`envrun doctor --node-record`).
"""

from __future__ import annotations

import glob
import json
import os
import socket
from dataclasses import asdict, dataclass, field
from typing import Any

from envbuild.host.node import usable_cpus
from envbuild.shared.visibledevices import VISIBLE_DEVICE_VARIABLES

# Variables the checks read: the job's, the visible-device lists, the caches, NCCL/libfabric settings.
RECORDED_PREFIXES = ("SLURM_", "NCCL_", "RCCL_", "FI_", "ENVRUN_")
# The caches a training job writes at run time (models, datasets, compiled kernels).
CACHE_VARIABLES = ("HF_HOME", "TORCH_HOME")
RECORDED_NAMES = (*VISIBLE_DEVICE_VARIABLES, *CACHE_VARIABLES, "XDG_CACHE_HOME", "HOME", "USER", "TMPDIR",
                  "LOCAL_SCRATCH", "ENVBUILD_SYSTEM")
# Device paths whose presence says which GPUs and interconnect a node has.
DEVICE_DIRS = ("/dev/dri", "/dev/infiniband")
DEVICE_PATHS = ("/dev/kfd", "/dev/nvidiactl", "/dev/infiniband", "/dev/dri")
DEVICE_GLOBS = ("/dev/nvidia[0-9]*", "/dev/dri/renderD*", "/dev/infiniband/uverbs*")
NODE_RECORD_MARK = "ENVRUN_DOCTOR_NODE "
# srun forwards the tasks' output in pieces of about 1 KiB, so long lines from two nodes interleave (seen with
# two records of 1.3 KB each): each record travels as numbered lines well below that.
RECORD_CHUNK = 500


@dataclass
class HostRecord:
    hostname: str
    cpus: int
    env: dict[str, str] = field(default_factory=dict)
    paths: dict[str, str] = field(default_factory=dict)  # path -> dir, file, char, other, missing
    globs: dict[str, list[str]] = field(default_factory=dict)  # pattern -> matches
    writable: dict[str, bool] = field(default_factory=dict)  # directory -> can this user create files in it
    container: dict[str, Any] | None = None  # the in-container probe's answer, when one ran on this host
    source: str = "this machine"

    def exists(self, path: str) -> bool:
        return self.paths.get(path, "missing") != "missing"

    def matches(self, pattern: str) -> list[str]:
        return self.globs.get(pattern, [])

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def record_from_json(text: str, source: str) -> HostRecord:
    data = json.loads(text)
    if not isinstance(data, dict) or "hostname" not in data:
        raise ValueError(f"{source}: not a doctor host record (no hostname)")
    known = {name: data[name] for name in HostRecord.__dataclass_fields__ if name in data}
    known["source"] = source
    return HostRecord(**known)


def load_record(path: str) -> HostRecord:
    """A record file: JSON, or what `envrun doctor --node-record > FILE` wrote (its numbered lines)."""
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    if text.startswith(NODE_RECORD_MARK):
        joined = join_record_lines(text)
        if len(joined) != 1:
            raise ValueError(f"{path}: holds {len(joined)} complete node records; give one per file")
        joined[0].source = path
        return joined[0]
    return record_from_json(text, path)


def record_lines(record: HostRecord) -> list[str]:
    """The record as `MARK HOST INDEX/COUNT TEXT` lines (see RECORD_CHUNK)."""
    text = record.to_json()
    pieces = [text[i:i + RECORD_CHUNK] for i in range(0, len(text), RECORD_CHUNK)] or [""]
    return [f"{NODE_RECORD_MARK}{record.hostname} {n}/{len(pieces)} {piece}" for n, piece in enumerate(pieces)]


def join_record_lines(output: str) -> list[HostRecord]:
    parts: dict[str, dict[int, str]] = {}
    counts: dict[str, int] = {}
    for line in output.splitlines():
        if not line.startswith(NODE_RECORD_MARK):
            continue
        host, position, piece = [*line[len(NODE_RECORD_MARK):].split(" ", 2), ""][:3]
        index, _, count = position.partition("/")
        if index.isdigit() and count.isdigit():
            parts.setdefault(host, {})[int(index)] = piece
            counts[host] = int(count)
    return [record_from_json("".join(pieces[i] for i in range(counts[host])), f"node {host}")
            for host, pieces in parts.items() if len(pieces) == counts[host]]


def _kind(path: str) -> str:
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError:
        return "missing"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    return "char" if stat.S_ISCHR(mode) else "other"


def _writable(path: str) -> bool:
    """Can files be created in `path` (or, when it does not exist yet, in its nearest existing parent)?"""
    probe = path
    while probe and not os.path.exists(probe):
        parent = os.path.dirname(probe.rstrip("/"))
        if parent == probe:
            break
        probe = parent
    return bool(probe) and os.path.isdir(probe) and os.access(probe, os.W_OK | os.X_OK)


def capture_host(paths: list[str], patterns: list[str], writable: list[str],
                 environ: dict[str, str] | None = None, container: dict[str, Any] | None = None) -> HostRecord:
    """This machine's record for the given paths, glob patterns and cache directories."""
    environ = dict(os.environ if environ is None else environ)
    cpus = usable_cpus()
    return HostRecord(
        hostname=socket.gethostname().split(".")[0], cpus=cpus,
        env={k: v for k, v in environ.items() if k.startswith(RECORDED_PREFIXES) or k in RECORDED_NAMES},
        paths={path: _kind(path) for path in dict.fromkeys([*DEVICE_PATHS, *paths])},
        globs={pattern: sorted(glob.glob(pattern)) for pattern in dict.fromkeys([*DEVICE_GLOBS, *patterns])},
        writable={path: _writable(path) for path in dict.fromkeys(writable)},
        container=container,
    )
