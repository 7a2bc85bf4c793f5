"""The GPUs a job holds on this node, and how busy they are: what the per-node sampler reads every interval.

One function, `open_gpu_source(environ)`, tries the ways to read GPUs in SOURCE_ORDER and keeps the first that
works: NVIDIA's NVML in-process (`pynvml`, from nvidia-ml-py), `nvidia-smi`, AMD's `amd-smi`, `rocm-smi`, and
the amdgpu driver's files in /sys/class/drm. It never raises: a node without GPUs, or whose tools fail, gets a
source whose `name` is None and whose `note` says why, so the report still shows the CPUs.

Which GPUs are the job's (`job_devices`), in this order:
- SLURM_STEP_GPUS, else SLURM_JOB_GPUS: Slurm's global GPU ids, which Slurm documents as "not relative to any
  device cgroup". When the tool shows as many GPUs as the job holds, the node's device cgroup has hidden the
  others (or the job holds the whole node): all shown are the job's. When it shows more (no cgroup), the ids are
  taken as positions in the tool's list, which is PCI order; that holds where gres.conf lists the GPUs in that
  order (Slurm's AutoDetect does).
- else the visible-device variables the task got: CUDA_VISIBLE_DEVICES (NVIDIA), ROCR_VISIBLE_DEVICES and then
  HIP_VISIBLE_DEVICES within it (AMD), GPU_DEVICE_ORDINAL (both; Slurm sets it like the others). Numbers index
  the tool's list (relative to the cgroup when there is one, physical when not: both are the tool's list);
  NVIDIA UUIDs (and their unique prefixes, which CUDA accepts) are matched against the tool's UUIDs. MIG
  instances and unmatched values cannot be mapped: all GPUs are reported, and `note` says so.
- else all GPUs of the node are reported, and `note` says so.
The per-task variables can be narrower than the step (`--gpus-per-task`), which is why Slurm's step ids come
first. /sys lists every GPU of the node whatever the cgroup, so the sysfs source reads visible-device numbers
as the node's GPU numbers and says so in `note`.

The `index` of every GPU reported is its position among the job's GPUs on this node, in the tool's (PCI) order:
0..n-1, the number a program of the job uses (`cuda:0`), whatever the node's own numbering.

Each source's `sampling` says, in words for the report, how its utilisation covers the time between two reads:
NVML averages its own sample buffer over the whole interval (`util_samples` per reading says how many driver
samples), nvidia-smi its loop's rows; amd-smi, rocm-smi and sysfs give the busy percent at the moment of the read.

Reads never hang the sampler: tools run with a timeout and are killed (with their process group) past it, NVML
calls run in a helper thread that is abandoned past it; a failed read gives util/mem_used None for that sample
and is counted in `note`. After FAILURES_BEFORE_BACKOFF failures in a row a source tries only every RETRY_EVERY
reads, so a broken driver costs a timeout now and then, not every interval.

Light: the standard library's json, subprocess, shutil and threading at import (no typing, no dataclasses: the
sampler starts with `python -S` beside the training); pynvml is imported when NVML is tried.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

TYPE_CHECKING = False  # mypy reads the block below; at run time the sampler does without typing and dataclasses
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence
    from typing import Any, TypedDict

    class GpuName(TypedDict):
        index: int
        name: str
        mem_total: int | None

    class _GpuReadingFields(TypedDict):
        index: int
        util: float | None  # 0-1
        mem_used: int | None  # bytes
        mem_total: int | None  # bytes

    class GpuReading(_GpuReadingFields, total=False):
        util_samples: int  # NVML: how many driver samples `util` averages (0: none new, the driver's current rate)

    # tool_index -> (util 0-1, mem_used bytes, mem_total bytes)
    Readings = dict[int, tuple[float | None, int | None, int | None]]

SOURCE_ORDER = ("nvml", "nvidia-smi", "amd-smi", "rocm-smi", "sysfs")
SYSFS_DRM = Path("/sys/class/drm")
OPEN_TIMEOUT_S = 10.0  # the first call may initialise the driver (no persistence daemon): seconds, not milliseconds
READ_TIMEOUT_S = 3.0  # one read: under the sampler's interval, so a hung tool delays a sample, never the next
# nvidia-smi's own loop period. Why a loop: one long-lived `nvidia-smi ... -lms` process costs one NVML
# initialisation for the whole step, where a call per read would start a process and initialise NVML every
# interval; and the rows it writes between two reads are averaged, so a read covers the whole interval
# instead of the last moment before it.
NVIDIA_SMI_LOOP_MS = 1000
FAILURES_BEFORE_BACKOFF = 3
RETRY_EVERY = 10
MIB = 1024 * 1024

NVIDIA_SMI_QUERY = "index,name,utilization.gpu,memory.used,memory.total,pci.bus_id,uuid"
AMD_SMI_NAMES = ("static", "--asic", "--bus", "--json")
AMD_SMI_METRIC = ("metric", "--usage", "--mem-usage", "--json")
ROCM_SMI_NAMES = ("--showproductname", "--showbus", "--json")
ROCM_SMI_METRIC = ("--showuse", "--showmeminfo", "vram", "--json")
NO_GPU_NOTE = "no nvidia-smi, amd-smi, rocm-smi or /sys/class/drm GPU on this node"

# What each way of reading covers between two reads (GpuSource.sampling; the report states it).
NVML_SAMPLING_BUFFER = "NVML sample buffer: the mean of every driver utilisation sample between two reads"
NVML_SAMPLING_CURRENT = "NVML: the driver's utilisation over its last sample period (1/6 s to 1 s) at each read"
AMD_SMI_SAMPLING = "amd-smi metric: the firmware's recent average busy percent (gfx_activity) at each read, nothing between reads"
ROCM_SMI_SAMPLING = "rocm-smi: the driver's busy percent (GPU use) at each read, nothing between reads"
SYSFS_SAMPLING = "sysfs gpu_busy_percent: the driver's busy percent at each read, nothing between reads"
# nvmlValueType_t -> the field of the c_nvmlValue_t union that holds a sample (nvml.h)
NVML_SAMPLE_VALUE_FIELDS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


class Device:
    """One GPU as a tool lists it; `tool_index` is the tool's own number for it."""

    __slots__ = ("bus_id", "mem_total", "name", "tool_index", "uuid")

    def __init__(self, tool_index: int, name: str, mem_total: int | None = None, bus_id: str | None = None,
                 uuid: str | None = None) -> None:
        self.tool_index = tool_index
        self.name = name
        self.mem_total = mem_total
        self.bus_id = bus_id  # "0000:19:00.0", lower case, 4-digit domain
        self.uuid = uuid

    def _fields(self) -> tuple[int, str, int | None, str | None, str | None]:
        return (self.tool_index, self.name, self.mem_total, self.bus_id, self.uuid)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Device) and self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return "Device" + repr(self._fields())


class ToolFailed(Exception):
    """A source could not be read; the message says what happened, for `note`."""


class GpuSource:
    """The job's GPUs on this node through one way of reading them; the base class is the "no GPU" source."""

    name: str | None = None
    # How the source's utilisation covers the time between two reads, in words for the report's start record
    # (the sampler reads it with getattr(source, "sampling", "")); "" for the no-GPU source.
    sampling = ""

    def __init__(self, devices: Sequence[Device] = (), note: str = "") -> None:
        self.devices = list(devices)  # the job's GPUs, in the tool's order: output index = position
        self._caveat = note
        self._problems: dict[str, int] = {}
        self._failures_in_row = 0
        self._skipped = 0
        self._util_samples: dict[int, int] = {}  # tool_index -> driver samples the last util averages (NVML)

    @property
    def note(self) -> str:
        """Why there is no source, the caveat of the GPU choice, and the read failures so far."""
        problems = [message if count == 1 else f"{message} ({count} reads)" for message, count in self._problems.items()]
        return "; ".join(part for part in (self._caveat, *problems) if part)

    def names(self) -> list[GpuName]:
        return [{"index": index, "name": device.name, "mem_total": device.mem_total}
                for index, device in enumerate(self.devices)]

    def read(self) -> list[GpuReading]:
        """One sample of every job GPU; util/mem_used None where the read failed."""
        if not self.devices:
            return []
        if self._failures_in_row >= FAILURES_BEFORE_BACKOFF and self._skipped < RETRY_EVERY - 1:
            self._skipped += 1
            return self._unknown()
        self._skipped = 0
        try:
            readings = self._measure()
        except ToolFailed as failure:
            self._failures_in_row += 1
            self._problems[str(failure)] = self._problems.get(str(failure), 0) + 1
            return self._unknown()
        except Exception as error:  # noqa: BLE001 - a parser surprise must cost one sample, never the sampler
            self._failures_in_row += 1
            message = f"{self.name} gave output this reader does not understand ({type(error).__name__}: {error})"
            self._problems[message] = self._problems.get(message, 0) + 1
            return self._unknown()
        self._failures_in_row = 0
        samples: list[GpuReading] = []
        for index, device in enumerate(self.devices):
            util, used, total = readings.get(device.tool_index, (None, None, None))
            sample: GpuReading = {"index": index, "util": None if util is None else round(min(max(util, 0.0), 1.0), 3),
                                  "mem_used": used, "mem_total": total if total is not None else device.mem_total}
            if util is not None and device.tool_index in self._util_samples:
                sample["util_samples"] = self._util_samples[device.tool_index]
            samples.append(sample)
        return samples

    def close(self) -> None:
        """Stop what the source started (a tool's loop, NVML); safe to call twice."""

    def _measure(self) -> Readings:
        return {}

    def _unknown(self) -> list[GpuReading]:
        return [{"index": index, "util": None, "mem_used": None, "mem_total": device.mem_total}
                for index, device in enumerate(self.devices)]


class Absent(Exception):
    """This way of reading GPUs does not exist on this node (no tool, no library, no driver): try the next."""


# --- choosing the job's GPUs -------------------------------------------------------------------------------------

def job_devices(devices: Sequence[Device], environ: Mapping[str, str], *, vendor: str,
                whole_node_view: bool = False) -> tuple[list[Device], str]:
    """The job's GPUs among `devices` (a tool's list, in its order) and a caveat ("" when sure); see the module
    docstring. `whole_node_view`: the list shows every GPU of the node even under a device cgroup (sysfs)."""
    devices = list(devices)
    for variable in ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS"):
        value = environ.get(variable, "").strip()
        ids = _numbers(value)
        if not value or ids is None:
            continue
        if len(ids) == len(devices) and not whole_node_view:
            return devices, ""
        if ids and max(ids) < len(devices):
            return [devices[i] for i in sorted(set(ids))], ""
        return devices, (f"{variable}={value} does not match the {len(devices)} GPUs seen here: "
                         "all of them are reported")
    if vendor == "nvidia":
        variables = [name for name in ("CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL") if name in environ][:1]
    else:  # HIP's list indexes the GPUs that ROCR's (or the ordinal, which repeats it) left
        variables = [name for name in ("ROCR_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL") if name in environ][:1]
        variables += [name for name in ("HIP_VISIBLE_DEVICES",) if name in environ]
    if not variables:
        return devices, f"no Slurm GPU ids or visible-device variable: all {len(devices)} GPUs of the node are reported"
    chosen = devices
    for variable in variables:
        chosen, caveat = _visible(chosen, variable, environ[variable], whole_node_view and chosen is devices)
        if caveat:
            return devices, caveat
    if whole_node_view and chosen and _numbers(environ[variables[0]]) is not None:
        return chosen, f"sysfs lists every GPU of the node: {variables[0]} taken as the node's GPU numbers"
    return chosen, ""


def _visible(devices: list[Device], variable: str, value: str, whole_node_view: bool) -> tuple[list[Device], str]:
    items = [item.strip() for item in value.split(",") if item.strip()]
    if not items or items == ["-1"] or value.strip() == "NoDevFiles":
        return [], ""
    numbers = _numbers(value)
    if numbers is not None:
        if len(numbers) == len(devices) and not whole_node_view:
            return devices, ""
        if max(numbers) < len(devices):
            return [devices[i] for i in sorted(set(numbers))], ""
        return devices, f"{variable}={value} does not match the {len(devices)} GPUs seen here: all of them are reported"
    if any(item.upper().startswith("MIG-") for item in items):
        return devices, f"{variable} names MIG instances, which have no utilisation of their own: whole GPUs are reported"
    picked: list[Device] = []
    for item in items:
        matches = [d for d in devices if d.uuid and d.uuid.lower().startswith(item.lower())]
        if len(matches) != 1:
            return devices, f"{variable}={value} does not name the GPUs seen here: all of them are reported"
        picked.append(matches[0])
    return [d for d in devices if d in picked], ""


def _numbers(value: str) -> list[int] | None:
    """"0,2-3" -> [0, 2, 3]; None when it is not a list of numbers (UUIDs)."""
    numbers: list[int] = []
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        low, dash, high = item.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            return None
        numbers.extend(range(int(low), int(high) + 1) if dash else [int(low)])
    return numbers


# --- running tools -----------------------------------------------------------------------------------------------

def run_tool(argv: Sequence[str], environ: Mapping[str, str], timeout: float) -> str:
    """stdout of one tool call; ToolFailed when it cannot start, fails, or runs past `timeout` (then its whole
    process group is killed: a hung tool must not hang the sampler, nor outlive it)."""
    tool = Path(argv[0]).name
    try:
        process = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   env=dict(environ), start_new_session=True, text=True, errors="replace")
    except OSError as error:
        raise ToolFailed(f"{tool} could not start ({error.strerror})") from None
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(process)
        raise ToolFailed(f"{tool} did not answer within {timeout:g} s (killed)") from None
    if process.returncode != 0:
        said = next((line.strip() for line in (err + "\n" + out).splitlines() if line.strip()), "")
        raise ToolFailed(f"{tool} failed (exit {process.returncode})" + (f": {said}" if said else ""))
    return out


def _kill_group(process: subprocess.Popen[Any]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired, ValueError, OSError):
        process.communicate(timeout=1)
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=1)


def _which(tool: str, environ: Mapping[str, str]) -> str:
    found = shutil.which(tool, path=environ.get("PATH", os.defpath))
    if found is None:
        raise Absent(tool)
    return found


def _number(text: object) -> float | None:
    """A tool's number, None for its ways of saying there is none ("[N/A]", "[Not Supported]", "N/A")."""
    if isinstance(text, bool):
        return None
    if isinstance(text, (int, float)):
        return float(text)
    if isinstance(text, dict):
        return _number(text.get("value"))
    try:
        return float(str(text).strip())
    except ValueError:
        return None


def _bytes(value: float | None, scale: int) -> int | None:
    return None if value is None else int(value * scale)


def _bus_id(text: str | None) -> str | None:
    """PCI addresses as tools write them ("00000000:19:00.0", "0000:C1:00.0") in one form: "0000:19:00.0"."""
    if not text:
        return None
    domain, _, rest = text.strip().lower().rpartition(":")
    domain, _, bus = domain.rpartition(":")
    if not domain or not bus:
        return None
    return f"{int(domain, 16):04x}:{bus}:{rest}"


# --- NVIDIA ------------------------------------------------------------------------------------------------------

class NvmlSource(GpuSource):
    """NVML in this process: no process per read, a few library calls per GPU.

    Utilisation comes from NVML's own sample buffer (nvmlDeviceGetSamples with NVML_GPU_UTILIZATION_SAMPLES):
    the driver keeps one utilisation sample per sample period (1/6 s to 1 s, by GPU), and a read averages those
    newer than the previous read's newest, so a reading covers the whole interval between two reads instead of
    the last sample period before it; `util_samples` says how many it averages. A read that finds no new sample
    (reads faster than the driver samples) gives the driver's current rate with util_samples 0. A GPU whose
    driver keeps no buffer (NVMLError_NotSupported, or a pynvml without the call) is read with
    nvmlDeviceGetUtilizationRates, the last sample period only, from then on; `note` and `sampling` say so."""

    name = "nvml"

    def __init__(self, nvml: Any, handles: dict[int, Any], devices: Sequence[Device], note: str) -> None:
        super().__init__(devices, note)
        self._nvml = nvml
        self._handles = handles
        self._stuck: threading.Thread | None = None
        self._last_seen: dict[int, int] = {}  # tool_index -> the newest sample's time stamp already counted (us)
        self._rates_only: list[int] = []  # tool_index of the GPUs whose driver keeps no sample buffer
        for device in self.devices:
            self._last_seen[device.tool_index] = self._newest_sample(device)
        self._describe_sampling()

    @classmethod
    def open(cls, environ: Mapping[str, str]) -> NvmlSource:
        try:
            nvml = importlib.import_module("pynvml")
        except ImportError:
            raise Absent("pynvml") from None
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as error:
            if isinstance(error, (nvml.NVMLError_LibraryNotFound, nvml.NVMLError_DriverNotLoaded)):
                raise Absent(str(error)) from None
            raise ToolFailed(f"NVML could not start ({error})") from None
        try:
            handles, devices = {}, []
            for index in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                handles[index] = handle
                devices.append(Device(index, _text(nvml.nvmlDeviceGetName(handle)),
                                      int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
                                      _bus_id(_text(nvml.nvmlDeviceGetPciInfo(handle).busId)),
                                      _text(nvml.nvmlDeviceGetUUID(handle))))
        except nvml.NVMLError as error:
            with contextlib.suppress(Exception):
                nvml.nvmlShutdown()
            raise ToolFailed(f"NVML could not list the GPUs ({error})") from None
        if not devices:
            nvml.nvmlShutdown()
            raise Absent("NVML sees no GPU")
        chosen, note = job_devices(devices, environ, vendor="nvidia")
        return cls(nvml, handles, chosen, note)

    def _newest_sample(self, device: Device) -> int:
        """The time stamp the first read counts from: the buffer's newest sample at open (so samples from before
        the step are left out), else now on the host clock, which is the clock NVML stamps its samples with."""
        now = int(time.time() * 1_000_000)
        try:
            _, samples = self._samples(device, 0)
        except Exception:  # noqa: BLE001 - no buffer here: _utilisation finds out again and says so
            return now
        return max((int(sample.timeStamp) for sample in samples), default=now)

    def _samples(self, device: Device, since: int) -> tuple[int, list[Any]]:
        """nvmlDeviceGetSamples: (value type, samples newer than `since`). NVML answers NotFound when there is
        none; a pynvml without the call counts as a driver without the buffer."""
        nvml = self._nvml
        if not hasattr(nvml, "nvmlDeviceGetSamples"):
            self._no_buffer(device, "this pynvml has no nvmlDeviceGetSamples")
            return 0, []
        try:
            value_type, samples = nvml.nvmlDeviceGetSamples(self._handles[device.tool_index],
                                                            nvml.NVML_GPU_UTILIZATION_SAMPLES, since)
        except nvml.NVMLError as error:
            if _nvml_error_is(nvml, error, "NVMLError_NotSupported"):
                self._no_buffer(device, "its driver keeps no utilisation samples (NVML: Not Supported)")
                return 0, []
            if _nvml_error_is(nvml, error, "NVMLError_NotFound"):
                return 0, []
            raise
        return int(value_type), list(samples)

    def _no_buffer(self, device: Device, why: str) -> None:
        if device.tool_index in self._rates_only:
            return
        self._rates_only.append(device.tool_index)
        caveat = (f"GPU {self.devices.index(device)}: {why}: its utilisation is the driver's last sample period "
                  "at each read, not the whole interval")
        self._caveat = "; ".join(part for part in (self._caveat, caveat) if part)
        self._describe_sampling()

    def _describe_sampling(self) -> None:
        positions = [index for index, device in enumerate(self.devices) if device.tool_index in self._rates_only]
        if not positions:
            self.sampling = NVML_SAMPLING_BUFFER
        elif len(positions) == len(self.devices):
            self.sampling = NVML_SAMPLING_CURRENT
        else:
            self.sampling = (f"{NVML_SAMPLING_BUFFER}; GPUs {', '.join(map(str, positions))} (no buffer): "
                             f"{NVML_SAMPLING_CURRENT}")

    def _measure(self) -> Readings:
        if self._stuck is not None and self._stuck.is_alive():
            raise ToolFailed("an NVML call still has not returned")
        result: Readings = {}
        counts: dict[int, int] = {}
        worker = threading.Thread(target=self._measure_into, args=(result, counts), daemon=True)
        worker.start()
        worker.join(READ_TIMEOUT_S)
        if worker.is_alive():
            self._stuck = worker
            raise ToolFailed(f"NVML did not answer within {READ_TIMEOUT_S:g} s")
        self._util_samples = counts
        return result

    def _measure_into(self, result: Readings, counts: dict[int, int]) -> None:
        nvml = self._nvml
        for device in self.devices:
            handle = self._handles[device.tool_index]
            util = used = total = None
            with contextlib.suppress(nvml.NVMLError):
                util, count = self._utilisation(device)
                if count is not None:
                    counts[device.tool_index] = count
            with contextlib.suppress(nvml.NVMLError):
                memory = nvml.nvmlDeviceGetMemoryInfo(handle)
                used, total = int(memory.used), int(memory.total)
            result[device.tool_index] = (util, used, total)

    def _utilisation(self, device: Device) -> tuple[float, int | None]:
        """(utilisation 0-1, driver samples it averages: 0 for the current rate, None for a GPU without buffer)."""
        index = device.tool_index
        if index not in self._rates_only:
            value_type, samples = self._samples(device, self._last_seen[index])
            # NVML returns only samples newer than `since`; the filter keeps a read from counting one twice anyway
            new = [sample for sample in samples if int(sample.timeStamp) > self._last_seen[index]]
            if new:
                field = NVML_SAMPLE_VALUE_FIELDS.get(value_type, "uiVal")
                values = [float(getattr(sample.sampleValue, field)) for sample in new]
                self._last_seen[index] = max(int(sample.timeStamp) for sample in new)
                return sum(values) / len(values) / 100, len(values)
        rate = self._nvml.nvmlDeviceGetUtilizationRates(self._handles[index]).gpu / 100
        return rate, (None if index in self._rates_only else 0)

    def close(self) -> None:
        if self._handles:
            self._handles = {}
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()


def _nvml_error_is(nvml: Any, error: BaseException, name: str) -> bool:
    """Whether `error` is pynvml's exception class `name` (pynvml makes one per NVML return code)."""
    kind = getattr(nvml, name, None)
    return isinstance(kind, type) and isinstance(error, kind)


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def parse_nvidia_smi(text: str, query: str = NVIDIA_SMI_QUERY) -> tuple[list[Device], Readings]:
    """Rows of `nvidia-smi --query-gpu=QUERY --format=csv[,noheader][,nounits]` (memory in MiB, utilisation in %),
    read by the names in `query`: a header row, units ("96 %", "61870 MiB") and the tool's words for no value
    ("[N/A]", "[Not Supported]") are understood. A row without "index" takes its position."""
    names = [name.strip() for name in query.split(",")]
    devices: list[Device] = []
    readings: Readings = {}
    for line in text.splitlines():
        values = [value.strip() for value in line.split(",")]
        if len(values) != len(names) or values[0] == names[0]:  # not a row of this query, or its header
            continue
        row = dict(zip(names, values, strict=True))
        index_text = row.get("index", str(len(devices)))
        if not index_text.isdigit():
            continue
        index = int(index_text)
        util, used, total = (_number(_without_unit(row.get(name, ""))) for name in
                             ("utilization.gpu", "memory.used", "memory.total"))
        devices.append(Device(index, row.get("name", "NVIDIA GPU"), _bytes(total, MIB), _bus_id(row.get("pci.bus_id")),
                              row.get("uuid")))
        readings[index] = (None if util is None else util / 100, _bytes(used, MIB), _bytes(total, MIB))
    return devices, readings


def _without_unit(value: str) -> str:
    """"96 %" -> "96", "61870 MiB" -> "61870": what --format=csv writes without nounits."""
    number, _, unit = value.partition(" ")
    return number if unit in ("%", "MiB") else value


class NvidiaSmiSource(GpuSource):
    """nvidia-smi: one query at open (names, bus ids, UUIDs, a first reading), then its own loop
    (`-lms NVIDIA_SMI_LOOP_MS`, see there why), read without blocking; the rows since the last read are averaged."""

    name = "nvidia-smi"

    def __init__(self, executable: str, environ: Mapping[str, str], devices: Sequence[Device], note: str,
                 first: Readings) -> None:
        super().__init__(devices, note)
        self.sampling = (f"nvidia-smi every {NVIDIA_SMI_LOOP_MS} ms, its rows between two reads averaged; each row "
                         "the driver's utilisation over its last sample period (1/6 s to 1 s)")
        self._executable = executable
        self._environ = dict(environ)
        self._last = first
        self._last_row_at = time.monotonic()
        self._loop: subprocess.Popen[bytes] | None = None
        self._buffer = b""

    @classmethod
    def open(cls, environ: Mapping[str, str]) -> NvidiaSmiSource:
        executable = _which("nvidia-smi", environ)
        out = run_tool([executable, *cls._query()], environ, OPEN_TIMEOUT_S)
        devices, first = parse_nvidia_smi(out)
        if not devices:
            raise ToolFailed("nvidia-smi listed no GPU")
        chosen, note = job_devices(devices, environ, vendor="nvidia")
        return cls(executable, environ, chosen, note, first)

    @staticmethod
    def _query() -> list[str]:
        return [f"--query-gpu={NVIDIA_SMI_QUERY}", "--format=csv,noheader,nounits"]

    def _measure(self) -> Readings:
        if self._loop is None:
            self._start_loop()
        assert self._loop is not None and self._loop.stdout is not None
        rows = self._drain(self._loop.stdout.fileno())
        now = time.monotonic()
        if rows:
            self._last_row_at = now
            self._last = _average(rows)
            return self._last
        ended = self._loop.poll()
        if ended is not None:
            self._stop_loop()
            raise ToolFailed(f"nvidia-smi's loop ended (exit {ended})")
        silent = now - self._last_row_at
        if silent > max(READ_TIMEOUT_S, 3 * NVIDIA_SMI_LOOP_MS / 1000):
            self._stop_loop()
            raise ToolFailed(f"nvidia-smi wrote nothing for {silent:.0f} s (killed)")
        return self._last  # read faster than the loop writes: the latest rows still hold

    def _start_loop(self) -> None:
        try:
            self._loop = subprocess.Popen([self._executable, *self._query(), "-lms", str(NVIDIA_SMI_LOOP_MS)],
                                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                          env=self._environ, start_new_session=True)
        except OSError as error:
            raise ToolFailed(f"nvidia-smi could not start ({error.strerror})") from None
        assert self._loop.stdout is not None
        os.set_blocking(self._loop.stdout.fileno(), False)
        self._buffer = b""
        self._last_row_at = time.monotonic()

    def _drain(self, fd: int) -> list[Readings]:
        """The complete rows waiting in the pipe, grouped one Readings per row. The pipe holds minutes of rows,
        so a sampler that pauses loses nothing; past that, nvidia-smi just waits."""
        chunks = [self._buffer]
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        data = b"".join(chunks)
        complete, _, self._buffer = data.rpartition(b"\n")
        return [parse_nvidia_smi(line)[1] for line in complete.decode(errors="replace").splitlines() if line.strip()]

    def _stop_loop(self) -> None:
        if self._loop is not None:
            _kill_group(self._loop)
            self._loop = None

    def close(self) -> None:
        self._stop_loop()


def _average(rows: list[Readings]) -> Readings:
    """Mean utilisation of each GPU over the rows; memory from the latest row."""
    merged: Readings = {}
    utils: dict[int, list[float]] = {}
    for row in rows:
        for index, (util, used, total) in row.items():
            if util is not None:
                utils.setdefault(index, []).append(util)
            merged[index] = (None, used, total)
    return {index: (sum(utils[index]) / len(utils[index]) if utils.get(index) else None, used, total)
            for index, (_, used, total) in merged.items()}


# --- AMD: amd-smi and rocm-smi ------------------------------------------------------------------------------------

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
        devices.append(Device(entry["gpu"], name, None, _bus_id(bdf) if isinstance(bdf, str) else None))
    return devices


def parse_amd_smi_metric(text: str) -> Readings:
    """`amd-smi metric --usage --mem-usage --json`: usage.gfx_activity (%) and mem_usage.used_vram/total_vram
    ({"value": n, "unit": "MB"}, where amd-smi's MB are MiB: it divides bytes by 1024*1024)."""
    readings: Readings = {}
    for entry in _amd_smi_entries(text):
        usage = _section(entry, "usage")
        memory = _section(entry, "mem_usage")
        util = _number(usage.get("gfx_activity"))
        readings[entry["gpu"]] = (None if util is None else util / 100, _bytes(_number(memory.get("used_vram")), MIB),
                                  _bytes(_number(memory.get("total_vram")), MIB))
    return readings


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
                   _bus_id(str(fields["pci bus"])) if fields.get("pci bus") else None)
            for index, fields in sorted(_rocm_smi_cards(text))]


def parse_rocm_smi_metric(text: str) -> Readings:
    """`rocm-smi --showuse --showmeminfo vram --json`: "GPU use (%)", "VRAM Total Used Memory (B)" and
    "VRAM Total Memory (B)", all strings."""
    readings: Readings = {}
    for index, fields in _rocm_smi_cards(text):
        util = _number(fields.get("gpu use (%)"))
        readings[index] = (None if util is None else util / 100, _bytes(_number(fields.get("vram total used memory (b)")), 1),
                           _bytes(_number(fields.get("vram total memory (b)")), 1))
    return readings


class CallPerReadSource(GpuSource):
    """A tool called once per read (amd-smi and rocm-smi have no loop whose output is stable to parse)."""

    def __init__(self, name: str, argv: list[str], parse: Callable[[str], Readings], environ: Mapping[str, str],
                 devices: Sequence[Device], note: str) -> None:
        super().__init__(devices, note)
        self.name = name
        self.sampling = AMD_SMI_SAMPLING if name == "amd-smi" else ROCM_SMI_SAMPLING
        self._argv = argv
        self._parse = parse
        self._environ = dict(environ)

    def _measure(self) -> Readings:
        return self._parse(run_tool(self._argv, self._environ, READ_TIMEOUT_S))


def _open_amd_tool(name: str, names_args: Sequence[str], metric_args: Sequence[str],
                   parse_names: Callable[[str], list[Device]], parse_metric: Callable[[str], Readings],
                   environ: Mapping[str, str]) -> CallPerReadSource:
    executable = _which(name, environ)
    listed = parse_names(run_tool([executable, *names_args], environ, OPEN_TIMEOUT_S))
    if not listed:
        raise ToolFailed(f"{name} listed no GPU")
    first = parse_metric(run_tool([executable, *metric_args], environ, OPEN_TIMEOUT_S))
    devices = [Device(d.tool_index, d.name, first.get(d.tool_index, (None, None, None))[2], d.bus_id, d.uuid)
               for d in sorted(listed, key=lambda d: d.tool_index)]
    chosen, note = job_devices(devices, environ, vendor="amd")
    return CallPerReadSource(name, [executable, *metric_args], parse_metric, environ, chosen, note)


# --- sysfs -------------------------------------------------------------------------------------------------------

class SysfsSource(GpuSource):
    """The amdgpu driver's files: device/gpu_busy_percent, mem_info_vram_used, mem_info_vram_total (bytes).
    Reading files costs microseconds, no process."""

    name = "sysfs"
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
                                  _int_file(device / "mem_info_vram_total"), _bus_id(bdf) if ":" in bdf else None))
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


# --- choosing a source -------------------------------------------------------------------------------------------

def open_gpu_source(environ: Mapping[str, str], *, drm_root: Path = SYSFS_DRM) -> GpuSource:
    """The first way in SOURCE_ORDER that reads this node's GPUs, narrowed to the job's; never raises. A source
    found but failing is skipped and named in the chosen source's `note`; none at all gives name None."""
    failures: list[str] = []
    openers: dict[str, Callable[[], GpuSource]] = {
        "nvml": lambda: NvmlSource.open(environ),
        "nvidia-smi": lambda: NvidiaSmiSource.open(environ),
        "amd-smi": lambda: _open_amd_tool("amd-smi", AMD_SMI_NAMES, AMD_SMI_METRIC, parse_amd_smi_static,
                                          parse_amd_smi_metric, environ),
        "rocm-smi": lambda: _open_amd_tool("rocm-smi", ROCM_SMI_NAMES, ROCM_SMI_METRIC, parse_rocm_smi_names,
                                           parse_rocm_smi_metric, environ),
        "sysfs": lambda: SysfsSource.open(environ, drm_root),
    }
    for name in SOURCE_ORDER:
        try:
            source = openers[name]()
        except Absent:
            continue
        except ToolFailed as failure:
            failures.append(str(failure))
            continue
        except Exception as error:  # noqa: BLE001 - a surprise in one way of reading must not cost the others
            failures.append(f"{name} gave output this reader does not understand ({type(error).__name__}: {error})")
            continue
        if not source.devices:
            source.close()
            failures.append(source._caveat or f"the job holds no GPU on this node ({name} lists "
                            "GPUs, but the job's visible-device variable is empty)")
            return GpuSource((), "; ".join(failures))
        source._caveat = "; ".join([*failures, source._caveat] if source._caveat else failures)
        return source
    return GpuSource((), "; ".join(failures) if failures else NO_GPU_NOTE)
