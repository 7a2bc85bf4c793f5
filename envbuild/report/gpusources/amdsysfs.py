"""GPU source through the amdgpu driver's files in /sys/class/drm, where no AMD tool is installed; tried last.

/sys lists every GPU of the node whatever the job's device cgroup, so the job's GPUs are chosen with
`whole_node_view` (envbuild.report.gpusources.jobgpus). Light: file reads only.
"""

from __future__ import annotations

from pathlib import Path

from envbuild.report.gpusources.jobgpus import job_devices
from envbuild.report.gpusources.sourcebase import Absent, Device, GpuSource, ToolFailed, pci_bus_id

TYPE_CHECKING = False  # mypy reads the block below; at run time the sampler does without typing
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from envbuild.report.gpusources.sourcebase import Readings

NAME = "sysfs"
SYSFS_DRM = Path("/sys/class/drm")
# What a read covers between two reads (GpuSource.sampling; the report states it).
SYSFS_SAMPLING = "sysfs gpu_busy_percent: the driver's busy percent at each read, nothing between reads"


def open_source(environ: Mapping[str, str], drm_root: Path | None) -> SysfsSource:
    """The amdgpu GPUs under `drm_root` (None: SYSFS_DRM), narrowed to the job's; Absent when there is none."""
    return SysfsSource.open(environ, drm_root or SYSFS_DRM)


class SysfsSource(GpuSource):
    """The amdgpu driver's files: device/gpu_busy_percent, mem_info_vram_used, mem_info_vram_total (bytes).
    Reading files costs microseconds, no process."""

    name = NAME
    sampling = SYSFS_SAMPLING

    @classmethod
    def open(cls, environ: Mapping[str, str], drm_root: Path) -> SysfsSource:
        devices = []
        cards = sorted((path for path in drm_root.glob("card*") if path.name[4:].isdigit()), key=lambda p: int(p.name[4:]))
        for card in cards:
            device = card / "device"
            if not (device / "gpu_busy_percent").is_file():
                continue  # a display controller or a GPU of another driver
            product = _read_file(device / "product_name")
            bdf = device.resolve().name
            devices.append(Device(int(card.name[4:]), product or f"AMD GPU ({card.name})",
                                  _int_file(device / "mem_info_vram_total"), pci_bus_id(bdf) if ":" in bdf else None))
        if not devices:
            raise Absent("no /sys/class/drm/card*/device/gpu_busy_percent")
        chosen, note = job_devices(devices, environ, vendor="amd", whole_node_view=True)
        return cls(drm_root, chosen, note)

    def __init__(self, drm_root: Path, devices: Sequence[Device], note: str) -> None:
        super().__init__(devices, note)
        self._root = drm_root

    def _measure(self) -> Readings:
        readings: Readings = {}
        for device in self.devices:
            folder = self._root / f"card{device.tool_index}" / "device"
            busy = _int_file(folder / "gpu_busy_percent")
            readings[device.tool_index] = (None if busy is None else busy / 100, _int_file(folder / "mem_info_vram_used"),
                                           _int_file(folder / "mem_info_vram_total"))
        if all(util is None for util, _, _ in readings.values()):
            raise ToolFailed("the sysfs GPU files could not be read")
        return readings


def _read_file(path: Path) -> str:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return ""


def _int_file(path: Path) -> int | None:
    text = _read_file(path)
    return int(text) if text.isdigit() else None
