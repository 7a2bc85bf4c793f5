"""Stand-ins for nvidia-smi, amd-smi and rocm-smi: they replay a trace of GPU values in the output formats the
real tools document (no GPU, driver or vendor tool is on the test machines). This module is their one
implementation; the executables beside it (nvidia-smi, amd-smi, rocm-smi: small sh scripts) call it.

The formats, written from the tools' documentation and public examples of their output, in our own words:
- nvidia-smi --query-gpu=FIELDS --format=csv[,noheader][,nounits] [-lms MS | -l S]: one row per GPU, fields
  joined by ", ", memory in MiB, utilisation in %, "00000000:19:00.0" bus ids; the loop repeats the rows.
- amd-smi static|metric|list --json: a JSON list with one object per GPU (ROCm 6) or that list under
  "gpu_data" (ROCm 7; the trace's "amd_smi_shape"); numbers as {"value": n, "unit": "%"|"MB"}, MB being MiB;
  sections not read as "N/A".
- rocm-smi --showuse --showmeminfo vram --showproductname --showbus --json: {"card0": {"GPU use (%)": "97",
  "VRAM Total Memory (B)": "...", ...}}, every value a string.

Scenario, from the environment:
  ENVBUILD_FAKEGPU_TRACE  a trace file (JSON, see traces/); unset: traces/nvidia-8gpu-idle-except-0.json for
                          nvidia-smi, traces/amd-mi250x-8gcd-idle-except-0.json for the AMD tools
  ENVBUILD_FAKEGPU_STATE  a file counting the calls of the stand-ins that share it: call N shows step N of the
                          trace (the last step repeats); one loop period of nvidia-smi counts as one call.
                          Unset: the step follows the clock (step_s seconds each, round and round), and
                          hang_after_calls/fail_after_calls apply only when they are 0.
A trace: {"gpus": [{"name", "mem_total_mib", "bus_id", "uuid"}], "steps": [{"util": [% per GPU],
"mem_used_mib": [per GPU]}], "step_s": 1.0, "amd_smi_shape": "list"|"gpu_data",
"hang_after_calls": N|null (from call N on: sleep hang_s seconds, print nothing),
"fail_after_calls": N|null (from call N on: print fail_message, exit fail_exit)}.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_TRACE = {"nvidia-smi": "nvidia-8gpu-idle-except-0.json", "amd-smi": "amd-mi250x-8gcd-idle-except-0.json",
                 "rocm-smi": "amd-mi250x-8gcd-idle-except-0.json"}
# nvidia-smi's own words when the driver is not there (its exit status is 9).
NVIDIA_DRIVER_FAILED = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                        "Make sure that the latest NVIDIA driver is installed and running.")
NVIDIA_UNITS = {"utilization.gpu": " %", "memory.used": " MiB", "memory.total": " MiB"}


def main(tool: str, argv: list[str]) -> int:
    trace_path = os.environ.get("ENVBUILD_FAKEGPU_TRACE") or str(HERE / "traces" / DEFAULT_TRACE[tool])
    trace = json.loads(Path(trace_path).read_text())
    call = _count_call()
    if _due(trace.get("fail_after_calls"), call):
        print(trace.get("fail_message") or (NVIDIA_DRIVER_FAILED if tool == "nvidia-smi" else f"{tool}: GPU not found"))
        return int(trace.get("fail_exit", 9 if tool == "nvidia-smi" else 1))
    if _due(trace.get("hang_after_calls"), call):
        time.sleep(float(trace.get("hang_s", 3600)))
        return 0
    try:
        if tool == "nvidia-smi":
            return _nvidia_smi(trace, argv, call)
        if tool == "amd-smi":
            return _amd_smi(trace, argv, call)
        return _rocm_smi(trace, argv, call)
    except BrokenPipeError:  # the reader went away, as the real loop sees it
        return 0


def _count_call() -> int | None:
    state = os.environ.get("ENVBUILD_FAKEGPU_STATE")
    if not state:
        return None
    path = Path(state)
    call = int(path.read_text() or 0) if path.exists() else 0
    path.write_text(str(call + 1))
    return call


def _due(after: int | None, call: int | None) -> bool:
    return after is not None and (call if call is not None else 0) >= after


def _step(trace: dict[str, Any], call: int | None) -> dict[str, list[float]]:
    steps: list[dict[str, list[float]]] = trace["steps"]
    if call is None:
        return steps[int(time.time() / float(trace.get("step_s", 1.0))) % len(steps)]
    return steps[min(call, len(steps) - 1)]


def _values(trace: dict[str, Any], call: int | None) -> list[dict[str, Any]]:
    """Per GPU: its trace entry plus util (%) and used (MiB) at this call."""
    step = _step(trace, call)
    return [{**gpu, "index": index, "util": step["util"][index], "used": step["mem_used_mib"][index]}
            for index, gpu in enumerate(trace["gpus"])]


# --- nvidia-smi --------------------------------------------------------------------------------------------------

def _option(argv: list[str], *names: str) -> str | None:
    for position, arg in enumerate(argv):
        for name in names:
            if arg == name and position + 1 < len(argv):
                return argv[position + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


def _nvidia_smi(trace: dict[str, Any], argv: list[str], call: int | None) -> int:
    query = _option(argv, "--query-gpu")
    if query is None:
        print("stand-in nvidia-smi: only --query-gpu is replayed", file=sys.stderr)
        return 2
    fields = query.split(",")
    formats = (_option(argv, "--format") or "csv").split(",")
    loop_ms = _option(argv, "-lms", "--loop-ms")
    loop_s = _option(argv, "-l", "--loop")
    period = int(loop_ms) / 1000 if loop_ms else (float(loop_s) if loop_s else None)
    header = "noheader" not in formats
    units = "nounits" not in formats
    for beat in range(10**9 if period else 1):
        now = call + beat if call is not None else None
        if beat and _due(trace.get("hang_after_calls"), now):
            time.sleep(float(trace.get("hang_s", 3600)))
            return 0
        if header:
            print(", ".join(field + (f" [{NVIDIA_UNITS[field].strip()}]" if field in NVIDIA_UNITS else "")
                            for field in fields))
        for gpu in _values(trace, now):
            print(", ".join(_nvidia_field(gpu, field, units) for field in fields))
        sys.stdout.flush()
        if period:
            time.sleep(period)
    return 0


def _nvidia_field(gpu: dict[str, Any], field: str, units: bool) -> str:
    domain, bus = gpu["bus_id"].split(":", 1)
    value = {"index": gpu["index"], "name": gpu["name"], "utilization.gpu": gpu["util"], "memory.used": gpu["used"],
             "memory.total": gpu["mem_total_mib"], "pci.bus_id": f"{int(domain, 16):08X}:{bus.upper()}",
             "uuid": gpu.get("uuid", "")}.get(field, "[N/A]")
    if isinstance(value, float):
        value = round(value)
    return f"{value}{NVIDIA_UNITS.get(field, '') if units else ''}"


# --- amd-smi -----------------------------------------------------------------------------------------------------

def _measure(value: float, unit: str) -> dict[str, Any]:
    return {"value": round(value), "unit": unit}


def _amd_smi(trace: dict[str, Any], argv: list[str], call: int | None) -> int:
    if "--json" not in argv or not argv:
        print("stand-in amd-smi: only --json output is replayed", file=sys.stderr)
        return 2
    command, flags = argv[0], set(argv[1:])
    entries = []
    for gpu in _values(trace, call):
        entry: dict[str, Any] = {"gpu": gpu["index"]}
        if command == "list":
            entry.update(bdf=gpu["bus_id"], uuid=gpu.get("uuid", "N/A"), kfd_id=1000 + gpu["index"],
                         node_id=2 + gpu["index"], partition_id=0)
        elif command == "static":
            everything = not flags - {"--json"}
            if everything or flags & {"-a", "--asic"}:
                entry["asic"] = {"market_name": gpu["name"], "vendor_id": "0x1002", "vendor_name": "Advanced Micro Devices Inc. [AMD/ATI]",
                                 "device_id": "0x740c", "rev_id": "0x01", "asic_serial": "N/A", "oam_id": gpu["index"]}
            if everything or flags & {"-b", "--bus"}:
                entry["bus"] = {"bdf": gpu["bus_id"], "max_pcie_width": 16, "max_pcie_speed": _measure(16, "GT/s"),
                                "pcie_interface_version": "Gen 4", "slot_type": "OAM"}
        elif command == "metric":
            everything = not flags - {"--json"}
            if everything or flags & {"-u", "--usage"}:
                entry["usage"] = {"gfx_activity": _measure(gpu["util"], "%"), "umc_activity": _measure(0, "%"),
                                  "mm_activity": "N/A", "vcn_activity": [_measure(0, "%"), "N/A", "N/A", "N/A"],
                                  "jpeg_activity": ["N/A"] * 4, "gfx_busy_inst": "N/A", "jpeg_busy": "N/A",
                                  "vcn_busy": "N/A", "gfx_busy_acc": "N/A"}
            if everything or flags & {"-m", "--mem-usage"}:
                total, used = gpu["mem_total_mib"], gpu["used"]
                entry["mem_usage"] = {"total_vram": _measure(total, "MB"), "used_vram": _measure(used, "MB"),
                                      "free_vram": _measure(total - used, "MB"), "total_visible_vram": _measure(total, "MB"),
                                      "used_visible_vram": _measure(used, "MB"), "free_visible_vram": _measure(total - used, "MB"),
                                      "total_gtt": _measure(128 * 1024, "MB"), "used_gtt": _measure(11, "MB"),
                                      "free_gtt": _measure(128 * 1024 - 11, "MB")}
        else:
            print(f"stand-in amd-smi: command {command!r} is not replayed", file=sys.stderr)
            return 2
        entries.append(entry)
    output: Any = {"gpu_data": entries} if trace.get("amd_smi_shape") == "gpu_data" else entries
    print(json.dumps(output, indent=4))
    return 0


# --- rocm-smi ----------------------------------------------------------------------------------------------------

def _rocm_smi(trace: dict[str, Any], argv: list[str], call: int | None) -> int:
    if "--json" not in argv:
        print("stand-in rocm-smi: only --json output is replayed", file=sys.stderr)
        return 2
    cards: dict[str, dict[str, str]] = {}
    for gpu in _values(trace, call):
        fields: dict[str, str] = {}
        if "--showuse" in argv or "-u" in argv:
            fields["GPU use (%)"] = str(round(gpu["util"]))
            fields["GFX Activity"] = str(1_000_000 + 4000 * round(gpu["util"]))
        if "--showmeminfo" in argv:
            fields["VRAM Total Memory (B)"] = str(gpu["mem_total_mib"] * 1024 * 1024)
            fields["VRAM Total Used Memory (B)"] = str(gpu["used"] * 1024 * 1024)
        if "--showproductname" in argv:
            fields.update({"Card Series": gpu["name"], "Card Model": "0x740c",
                           "Card Vendor": "Advanced Micro Devices, Inc. [AMD/ATI]", "Card SKU": "D65209",
                           "Subsystem ID": "0x0b0c", "Device Rev": "0x01", "Node ID": str(2 + gpu["index"]),
                           "GUID": str(11000 + gpu["index"]), "GFX Version": "gfx90a"})
        if "--showbus" in argv:
            fields["PCI Bus"] = gpu["bus_id"].upper()
        cards[f"card{gpu['index']}"] = fields
    print(json.dumps(cards))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
