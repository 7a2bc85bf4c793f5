"""GPU source through AMD's `amd-smi`, tried before rocm-smi; called once per read
(envbuild.report.gpusources.callperread).

Light: the standard library's json at import.
"""

from __future__ import annotations

import json

from envbuild.report.gpusources.callperread import open_call_per_read
from envbuild.report.gpusources.sourcebase import MIB, Device, in_bytes, pci_bus_id, tool_number

TYPE_CHECKING = False  # mypy reads the block below; at run time the sampler does without typing
if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path
    from typing import Any

    from envbuild.report.gpusources.callperread import CallPerReadSource
    from envbuild.report.gpusources.sourcebase import Readings

NAME = "amd-smi"
AMD_SMI_NAMES = ("static", "--asic", "--bus", "--json")
AMD_SMI_METRIC = ("metric", "--usage", "--mem-usage", "--json")
# What a read covers between two reads (GpuSource.sampling; the report states it).
AMD_SMI_SAMPLING = "amd-smi metric: the firmware's recent average busy percent (gfx_activity) at each read, nothing between reads"


def open_source(environ: Mapping[str, str], drm_root: Path | None) -> CallPerReadSource:
    """amd-smi's view of the node's GPUs, narrowed to the job's; Absent when it is not on the PATH."""
    return open_call_per_read(NAME, AMD_SMI_SAMPLING, AMD_SMI_NAMES, AMD_SMI_METRIC, parse_amd_smi_static,
                              parse_amd_smi_metric, environ, vendor="amd")


def _amd_smi_entries(text: str) -> list[dict[str, Any]]:
    """amd-smi's --json output: a list of one object per GPU (ROCm 6), or that list under "gpu_data" (ROCm 7)."""
    data = json.loads(text)
    if isinstance(data, dict):
        data = data.get("gpu_data", [])
    return [entry for entry in data if isinstance(entry, dict) and isinstance(entry.get("gpu"), int)]


def _section(entry: dict[str, Any], key: str) -> dict[str, Any]:
    value = entry.get(key)
    return value if isinstance(value, dict) else {}  # amd-smi writes "N/A" for a section it could not read


def parse_amd_smi_static(text: str) -> list[Device]:
    """`amd-smi static --asic --bus --json`: asic.market_name and bus.bdf of every GPU."""
    devices = []
    for entry in _amd_smi_entries(text):
        asic = _section(entry, "asic")
        bus = _section(entry, "bus")
        name = str(asic.get("market_name") or "AMD GPU")
        bdf = bus.get("bdf")
        devices.append(Device(entry["gpu"], name, None, pci_bus_id(bdf) if isinstance(bdf, str) else None))
    return devices


def parse_amd_smi_metric(text: str) -> Readings:
    """`amd-smi metric --usage --mem-usage --json`: usage.gfx_activity (%) and mem_usage.used_vram/total_vram
    ({"value": n, "unit": "MB"}, where amd-smi's MB are MiB: it divides bytes by 1024*1024)."""
    readings: Readings = {}
    for entry in _amd_smi_entries(text):
        usage = _section(entry, "usage")
        memory = _section(entry, "mem_usage")
        util = tool_number(usage.get("gfx_activity"))
        readings[entry["gpu"]] = (None if util is None else util / 100, in_bytes(tool_number(memory.get("used_vram")), MIB),
                                  in_bytes(tool_number(memory.get("total_vram")), MIB))
    return readings
