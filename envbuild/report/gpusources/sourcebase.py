"""What every GPU source of the job report shares: the GPU record (Device), the source's base class (GpuSource,
which is also the "no GPU" source), the ways an open or a read fails (Absent, ToolFailed), and running a tool
so that it cannot hang the sampler.

Reads never hang the sampler: tools run with a timeout and are killed (with their process group) past it; a
failed read gives util/mem_used None for that sample and is counted in `note`. After FAILURES_BEFORE_BACKOFF
failures in a row a source tries only every RETRY_EVERY reads, so a broken driver costs a timeout now and then,
not every interval. The timeouts are read as `sourcebase.OPEN_TIMEOUT_S` / `sourcebase.READ_TIMEOUT_S` where they
are used, so that one value holds for every source.

Light: the standard library's subprocess, shutil and signal at import (no typing, no dataclasses: the sampler
starts with `python -S` beside the training).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from pathlib import Path

TYPE_CHECKING = False  # mypy reads the block below; at run time the sampler does without typing and dataclasses
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
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

OPEN_TIMEOUT_S = 10.0  # the first call may initialise the driver (no persistence daemon): seconds, not milliseconds
READ_TIMEOUT_S = 3.0  # one read: under the sampler's interval, so a hung tool delays a sample, never the next
FAILURES_BEFORE_BACKOFF = 3
RETRY_EVERY = 10
MIB = 1024 * 1024


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


class Absent(Exception):
    """This way of reading GPUs does not exist on this node (no tool, no library, no driver): try the next."""


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
        kill_group(process)
        raise ToolFailed(f"{tool} did not answer within {timeout:g} s (killed)") from None
    if process.returncode != 0:
        said = next((line.strip() for line in (err + "\n" + out).splitlines() if line.strip()), "")
        raise ToolFailed(f"{tool} failed (exit {process.returncode})" + (f": {said}" if said else ""))
    return out


def kill_group(process: subprocess.Popen[Any]) -> None:
    """Kill a tool with its whole process group (it started it with start_new_session) and close its pipes."""
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


def find_tool(tool: str, environ: Mapping[str, str]) -> str:
    """The tool's path on the task's PATH; Absent when it is not there (the next source is tried)."""
    found = shutil.which(tool, path=environ.get("PATH", os.defpath))
    if found is None:
        raise Absent(tool)
    return found


def tool_number(text: object) -> float | None:
    """A tool's number, None for its ways of saying there is none ("[N/A]", "[Not Supported]", "N/A")."""
    if isinstance(text, bool):
        return None
    if isinstance(text, (int, float)):
        return float(text)
    if isinstance(text, dict):
        return tool_number(text.get("value"))
    try:
        return float(str(text).strip())
    except ValueError:
        return None


def in_bytes(value: float | None, scale: int) -> int | None:
    """A tool's figure in units of `scale` bytes (MIB for MiB) as bytes; None stays None."""
    return None if value is None else int(value * scale)


def pci_bus_id(text: str | None) -> str | None:
    """PCI addresses as tools write them ("00000000:19:00.0", "0000:C1:00.0") in one form: "0000:19:00.0"."""
    if not text:
        return None
    domain, _, rest = text.strip().lower().rpartition(":")
    domain, _, bus = domain.rpartition(":")
    if not domain or not bus:
        return None
    return f"{int(domain, 16):04x}:{bus}:{rest}"
