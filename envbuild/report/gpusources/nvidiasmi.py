"""GPU source through NVIDIA's `nvidia-smi`, tried after NVML (which runs in the sampler itself).

One query at open (names, bus ids, UUIDs, a first reading), then the tool's own loop, read without blocking.
"""

from __future__ import annotations

import os
import subprocess
import time

from envbuild.report.gpusources import sourcebase
from envbuild.report.gpusources.jobgpus import job_devices
from envbuild.report.gpusources.sourcebase import (
    MIB,
    Device,
    GpuSource,
    ToolFailed,
    find_tool,
    in_bytes,
    kill_group,
    pci_bus_id,
    run_tool,
    tool_number,
)

TYPE_CHECKING = False  # mypy reads the block below; at run time the sampler does without typing
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

    from envbuild.report.gpusources.sourcebase import Readings

NAME = "nvidia-smi"
# nvidia-smi's own loop period. Why a loop: one long-lived `nvidia-smi ... -lms` process costs one NVML
# initialisation for the whole step, where a call per read would start a process and initialise NVML every
# interval; and the rows it writes between two reads are averaged, so a read covers the whole interval
# instead of the last moment before it.
NVIDIA_SMI_LOOP_MS = 1000
NVIDIA_SMI_QUERY = "index,name,utilization.gpu,memory.used,memory.total,pci.bus_id,uuid"


def open_source(environ: Mapping[str, str], drm_root: Path | None) -> NvidiaSmiSource:
    """nvidia-smi's view of the node's GPUs, narrowed to the job's; Absent when it is not on the PATH."""
    return NvidiaSmiSource.open(environ)


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
        util, used, total = (tool_number(_without_unit(row.get(name, ""))) for name in
                             ("utilization.gpu", "memory.used", "memory.total"))
        devices.append(Device(index, row.get("name", "NVIDIA GPU"), in_bytes(total, MIB), pci_bus_id(row.get("pci.bus_id")),
                              row.get("uuid")))
        readings[index] = (None if util is None else util / 100, in_bytes(used, MIB), in_bytes(total, MIB))
    return devices, readings


def _without_unit(value: str) -> str:
    """"96 %" -> "96", "61870 MiB" -> "61870": what --format=csv writes without nounits."""
    number, _, unit = value.partition(" ")
    return number if unit in ("%", "MiB") else value


class NvidiaSmiSource(GpuSource):
    """nvidia-smi: one query at open (names, bus ids, UUIDs, a first reading), then its own loop
    (`-lms NVIDIA_SMI_LOOP_MS`, see there why), read without blocking; the rows since the last read are averaged."""

    name = NAME

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
        executable = find_tool("nvidia-smi", environ)
        out = run_tool([executable, *cls._query()], environ, sourcebase.OPEN_TIMEOUT_S)
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
        if silent > max(sourcebase.READ_TIMEOUT_S, 3 * NVIDIA_SMI_LOOP_MS / 1000):
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
            kill_group(self._loop)
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
