"""GPU source through NVIDIA's NVML in the sampler's own process (`pynvml`, from nvidia-ml-py), tried first.

No process per read, a few library calls per GPU; NVML calls run in a helper thread that is abandoned past
READ_TIMEOUT_S, so a hung driver costs a sample, never the sampler. pynvml is imported when NVML is tried.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
import time

from envbuild.report.gpusources import sourcebase
from envbuild.report.gpusources.jobgpus import job_devices
from envbuild.report.gpusources.sourcebase import Absent, Device, GpuSource, ToolFailed, pci_bus_id

TYPE_CHECKING = False  # mypy reads the block below; at run time the sampler does without typing
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path
    from typing import Any

    from envbuild.report.gpusources.sourcebase import Readings

NAME = "nvml"
# What each way of reading covers between two reads (GpuSource.sampling; the report states it).
NVML_SAMPLING_BUFFER = "NVML sample buffer: the mean of every driver utilisation sample between two reads"
NVML_SAMPLING_CURRENT = "NVML: the driver's utilisation over its last sample period (1/6 s to 1 s) at each read"
# nvmlValueType_t -> the field of the c_nvmlValue_t union that holds a sample (nvml.h)
NVML_SAMPLE_VALUE_FIELDS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def open_source(environ: Mapping[str, str], drm_root: Path | None) -> NvmlSource:
    """NVML's view of the node's GPUs, narrowed to the job's; Absent without pynvml, its library or a driver."""
    return NvmlSource.open(environ)


class NvmlSource(GpuSource):
    """NVML in this process: no process per read, a few library calls per GPU.

    Utilisation comes from NVML's own sample buffer (nvmlDeviceGetSamples with NVML_GPU_UTILIZATION_SAMPLES):
    the driver keeps one utilisation sample per sample period (1/6 s to 1 s, by GPU), and a read averages those
    newer than the previous read's newest, so a reading covers the whole interval between two reads instead of
    the last sample period before it; `util_samples` says how many it averages. A read that finds no new sample
    (reads faster than the driver samples) gives the driver's current rate with util_samples 0. A GPU whose
    driver keeps no buffer (NVMLError_NotSupported, or a pynvml without the call) is read with
    nvmlDeviceGetUtilizationRates, the last sample period only, from then on; `note` and `sampling` say so."""

    name = NAME

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
                                      pci_bus_id(_text(nvml.nvmlDeviceGetPciInfo(handle).busId)),
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
        worker.join(sourcebase.READ_TIMEOUT_S)
        if worker.is_alive():
            self._stuck = worker
            raise ToolFailed(f"NVML did not answer within {sourcebase.READ_TIMEOUT_S:g} s")
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
