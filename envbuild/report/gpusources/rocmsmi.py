"""GPU source through AMD's `rocm-smi`, tried after amd-smi; called once per read
(envbuild.report.gpusources.callperread).

Light: the standard library's json at import.
"""

from __future__ import annotations

import json

from envbuild.report.gpusources.callperread import open_call_per_read
from envbuild.report.gpusources.sourcebase import Device, in_bytes, pci_bus_id, tool_number

TYPE_CHECKING = False  # mypy reads the block below; at run time the sampler does without typing
if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping
    from pathlib import Path
    from typing import Any

    from envbuild.report.gpusources.callperread import CallPerReadSource
    from envbuild.report.gpusources.sourcebase import Readings

NAME = "rocm-smi"
ROCM_SMI_NAMES = ("--showproductname", "--showbus", "--json")
ROCM_SMI_METRIC = ("--showuse", "--showmeminfo", "vram", "--json")
# What a read covers between two reads (GpuSource.sampling; the report states it).
ROCM_SMI_SAMPLING = "rocm-smi: the driver's busy percent (GPU use) at each read, nothing between reads"


def open_source(environ: Mapping[str, str], drm_root: Path | None) -> CallPerReadSource:
    """rocm-smi's view of the node's GPUs, narrowed to the job's; Absent when it is not on the PATH."""
    return open_call_per_read(NAME, ROCM_SMI_SAMPLING, ROCM_SMI_NAMES, ROCM_SMI_METRIC, parse_rocm_smi_names,
                              parse_rocm_smi_metric, environ, vendor="amd")


def _rocm_smi_cards(text: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """rocm-smi's --json output: {"card0": {"field": "value", ...}, ..., "system": {...}}."""
    data = json.loads(text)
    for key, fields in data.items() if isinstance(data, dict) else ():
        if key.startswith("card") and key[4:].isdigit() and isinstance(fields, dict):
            yield int(key[4:]), {name.lower(): value for name, value in fields.items()}


def parse_rocm_smi_names(text: str) -> list[Device]:
    """`rocm-smi --showproductname --showbus --json`: "Card Series" (spelled "Card series" by some versions;
    ROCm 6.2's --showallinfo names the GPU "Device Name" instead) and "PCI Bus"."""
    return [Device(index, str(fields.get("card series") or fields.get("device name") or fields.get("card model")
                              or "AMD GPU"), None,
                   pci_bus_id(str(fields["pci bus"])) if fields.get("pci bus") else None)
            for index, fields in sorted(_rocm_smi_cards(text))]


def parse_rocm_smi_metric(text: str) -> Readings:
    """`rocm-smi --showuse --showmeminfo vram --json`: "GPU use (%)", "VRAM Total Used Memory (B)" and
    "VRAM Total Memory (B)", all strings."""
    readings: Readings = {}
    for index, fields in _rocm_smi_cards(text):
        util = tool_number(fields.get("gpu use (%)"))
        readings[index] = (None if util is None else util / 100, in_bytes(tool_number(fields.get("vram total used memory (b)")), 1),
                           in_bytes(tool_number(fields.get("vram total memory (b)")), 1))
    return readings
