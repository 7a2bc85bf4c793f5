"""A GPU source that calls its tool once per read, for tools that have no loop whose output is stable to parse
(amd-smi and rocm-smi): one call lists the GPUs at open, another measures them at open and at every read.

Light: nothing at import but the shared parts of the GPU sources.
"""

from __future__ import annotations

from envbuild.report.gpusources import sourcebase
from envbuild.report.gpusources.jobgpus import job_devices
from envbuild.report.gpusources.sourcebase import Device, GpuSource, ToolFailed, find_tool, run_tool

TYPE_CHECKING = False  # mypy reads the block below; at run time the sampler does without typing
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from envbuild.report.gpusources.sourcebase import Readings


class CallPerReadSource(GpuSource):
    """A tool called once per read: `argv` measures every GPU, `parse` reads its output."""

    def __init__(self, name: str, sampling: str, argv: list[str], parse: Callable[[str], Readings],
                 environ: Mapping[str, str], devices: Sequence[Device], note: str) -> None:
        super().__init__(devices, note)
        self.name = name
        self.sampling = sampling
        self._argv = argv
        self._parse = parse
        self._environ = dict(environ)

    def _measure(self) -> Readings:
        return self._parse(run_tool(self._argv, self._environ, sourcebase.READ_TIMEOUT_S))


def open_call_per_read(name: str, sampling: str, names_args: Sequence[str], metric_args: Sequence[str],
                       parse_names: Callable[[str], list[Device]], parse_metric: Callable[[str], Readings],
                       environ: Mapping[str, str], *, vendor: str) -> CallPerReadSource:
    """Open the tool `name` found on the task's PATH: `names_args` lists the GPUs, `metric_args` measures them
    (once here, for the memory totals); the job's GPUs are chosen as `vendor`'s runtime shows them."""
    executable = find_tool(name, environ)
    listed = parse_names(run_tool([executable, *names_args], environ, sourcebase.OPEN_TIMEOUT_S))
    if not listed:
        raise ToolFailed(f"{name} listed no GPU")
    first = parse_metric(run_tool([executable, *metric_args], environ, sourcebase.OPEN_TIMEOUT_S))
    devices = [Device(d.tool_index, d.name, first.get(d.tool_index, (None, None, None))[2], d.bus_id, d.uuid)
               for d in sorted(listed, key=lambda d: d.tool_index)]
    chosen, note = job_devices(devices, environ, vendor=vendor)
    return CallPerReadSource(name, sampling, [executable, *metric_args], parse_metric, environ, chosen, note)
