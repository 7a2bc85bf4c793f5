"""What the machine envrun runs on has: CPUs in this process's affinity and the GPUs the drivers show.

Light on imports (envrun's start-up path: os, and the visible-device variables from envbuild.shared), and pure
over its inputs where tests need it (a mapping of variables, a CPU count, a directory listing function).
"""

from __future__ import annotations

from envbuild.shared.visibledevices import VISIBLE_DEVICE_VARIABLES

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping


# The container runtime's flag that passes a maker's GPUs (and, for --nv, the host's driver libraries) in.
GPU_RUNTIME_FLAGS = {"nvidia": "--nv", "amd": "--rocm"}


def count_devices(text: str) -> int:
    """'0,1' -> 2; '' -> 0; 'GPU-uuid-a,GPU-uuid-b' -> 2; 'NoDevFiles' (Slurm's placeholder) -> 0."""
    return len([d for d in text.split(",") if d.strip() and d.strip() != "NoDevFiles"])


class HostNode:
    """The machine envrun runs on: node facts for recipes that have none of their own (`node: host`)."""

    __slots__ = ("cpus", "gpu_vendor", "gpus", "why")

    def __init__(self, cpus: int, gpus: int = 0, gpu_vendor: str = "none", why: dict[str, str] | None = None) -> None:
        self.cpus = cpus
        self.gpus = gpus
        self.gpu_vendor = gpu_vendor
        self.why = why or {}


def usable_cpus() -> int:
    """The CPUs this process may run on: its affinity, which Slurm, cgroups and taskset narrow (the machine's
    count where there is no affinity, off Linux)."""
    import os

    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def read_host_node(environ: Mapping[str, str], cpus: int | None = None,
                   listdir: Callable[[str], list[str]] | None = None) -> HostNode:
    """CPUs this process may run on (its affinity, which Slurm and cgroups narrow), and the GPUs the
    drivers show, narrowed by the visible-device variables when they are set."""
    if cpus is None:
        cpus = usable_cpus()
    listdir = listdir or _listdir
    why = {"cpus": f"{cpus} CPUs in this process's affinity"}
    nvidia = [e for e in listdir("/proc/driver/nvidia/gpus")]
    amd = [e for e in listdir("/sys/class/kfd/kfd/topology/nodes") if _kfd_is_gpu(e)]
    vendor, gpus, source = "none", 0, ""
    if nvidia:
        vendor, gpus, source = "nvidia", len(nvidia), "/proc/driver/nvidia/gpus"
    elif amd:
        vendor, gpus, source = "amd", len(amd), "/sys/class/kfd/kfd/topology/nodes"
    for name in VISIBLE_DEVICE_VARIABLES:  # the first one set counts the GPUs
        if gpus and name in environ:
            gpus, source = min(gpus, count_devices(environ[name])), f"{name}={environ[name]}"
            break
    if source:
        why["gpus"] = f"{gpus} {vendor} GPUs ({source})"
    return HostNode(cpus=cpus, gpus=gpus, gpu_vendor=vendor, why=why)


def _listdir(path: str) -> list[str]:
    import os

    try:
        return os.listdir(path)
    except OSError:
        return []


def _kfd_is_gpu(node: str) -> bool:
    """KFD topology nodes are CPUs (gpu_id 0) and GPUs (gpu_id non-zero)."""
    try:
        with open(f"/sys/class/kfd/kfd/topology/nodes/{node}/gpu_id") as handle:
            return handle.read().strip() not in ("", "0")
    except OSError:
        return False
