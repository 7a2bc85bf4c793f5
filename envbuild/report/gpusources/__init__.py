"""The ways the job report's sampler reads a node's GPUs: one module per GPU source, registered in GPU_SOURCES.

envbuild.report.gpus.open_gpu_source tries the sources in GPU_SOURCES' order and keeps the first that reads
the node's GPUs. Every source module defines the same two names:
- `NAME`: the source's name in the report (its `gpu_source`, and the words of its failures);
- `open_source(environ, drm_root)`: the job's GPUs on this node through this source, as a
  sourcebase.GpuSource subclass whose `_measure()` reads them; `environ` is the task's environment,
  `drm_root` the folder of the node's DRM devices (None: /sys/class/drm) for a source that reads /sys. It
  raises sourcebase.Absent when the way of reading does not exist here (no tool, library or driver: the next
  source is tried silently) and sourcebase.ToolFailed when it exists but fails (named in the chosen source's
  note).
What they share is in the modules of SHARED_MODULES: sourcebase (the GPU record, the base class, running a
tool with a timeout, the tools' number formats), jobgpus (which of the listed GPUs are the job's, from Slurm's
ids and the visible-device variables) and callperread (a tool called once per read).

To add a GPU tool: write its module here (NAME, open_source, its parser, and a GpuSource subclass with a
`sampling` sentence saying how a read covers the time between two reads; `callperread.open_call_per_read`
when the tool is simply called at each read), add one line to GPU_SOURCES at the place it is to be tried,
and test its parser against the tool's real output (tests/support/fakegpu/recorded, tests/report/test_gpus.py).
tests/report/test_gpusources.py checks that every module here is registered or shared, and every line has its
module.

Light: this file imports nothing; a source's module is imported when it is tried (the sampler starts with
`python -S` beside the training).
"""

from __future__ import annotations

# The GPU sources in the order they are tried: (module of this package, how the note of a node with no GPU
# names what was looked for, "" for a source whose absence says nothing of the node, such as a library).
GPU_SOURCES = (
    ("nvml", ""),  # NVML in-process (pynvml): no process per read, averages the driver's own sample buffer
    ("nvidiasmi", "nvidia-smi"),
    ("amdsmi", "amd-smi"),
    ("rocmsmi", "rocm-smi"),
    ("amdsysfs", "/sys/class/drm"),  # the amdgpu driver's files: no tool needed, the busy percent at the read
)
# The modules of this package that are not sources: what the sources share.
SHARED_MODULES = ("sourcebase", "jobgpus", "callperread")
