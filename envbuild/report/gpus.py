"""The GPUs a job holds on this node, and how busy they are: what the per-node sampler reads every interval.

One function, `open_gpu_source(environ)`, tries the ways to read GPUs in the order of
envbuild.report.gpusources.GPU_SOURCES (one module each) and keeps the first that works: NVIDIA's NVML
in-process (`pynvml`, from nvidia-ml-py), `nvidia-smi`, AMD's `amd-smi`, `rocm-smi`, and the amdgpu driver's
files in /sys/class/drm. It never raises: a node without GPUs, or whose tools fail, gets a source whose `name`
is None and whose `note` says why, so the report still shows the CPUs.

Which GPUs are the job's comes from Slurm's GPU ids, else the visible-device variables the task got, else all
of the node's, with a note (envbuild.report.gpusources.jobgpus says how). The `index` of every GPU reported is
its position among the job's GPUs on this node, in the tool's (PCI) order: 0..n-1, the number a program of the
job uses (`cuda:0`), whatever the node's own numbering.

Each source's `sampling` says, in words for the report, how its utilisation covers the time between two reads:
NVML averages its own sample buffer over the whole interval (`util_samples` per reading says how many driver
samples), nvidia-smi its loop's rows; amd-smi, rocm-smi and sysfs give the busy percent at the moment of the read.

Reads never hang the sampler: tools run with a timeout and are killed past it, NVML calls run in a helper thread
that is abandoned past it; a failed read costs that sample and is counted in `note`, and a source that keeps
failing backs off (envbuild.report.gpusources.sourcebase).

Light: importlib at import, and the shared parts of the sources (no typing, no dataclasses: the sampler starts
with `python -S` beside the training); a source's module is imported when it is tried.
"""

from __future__ import annotations

import importlib

from envbuild.report import gpusources
from envbuild.report.gpusources.sourcebase import Absent, GpuSource, ToolFailed

TYPE_CHECKING = False  # mypy reads the block below; at run time the sampler does without typing
if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

_LOOKED_FOR = [named for _, named in gpusources.GPU_SOURCES if named]
NO_GPU_NOTE = f"no {', '.join(_LOOKED_FOR[:-1])} or {_LOOKED_FOR[-1]} GPU on this node"


def open_gpu_source(environ: Mapping[str, str], *, drm_root: Path | None = None) -> GpuSource:
    """The first source in GPU_SOURCES' order that reads this node's GPUs, narrowed to the job's; never raises.
    A source found but failing is skipped and named in the chosen source's `note`; none at all gives name None.
    `drm_root`: where the node's DRM devices are listed (None: /sys/class/drm; tests give a made-up tree)."""
    failures: list[str] = []
    for module_name, _ in gpusources.GPU_SOURCES:
        name = module_name
        try:
            module = importlib.import_module(f"{gpusources.__name__}.{module_name}")
            name = module.NAME
            source: GpuSource = module.open_source(environ, drm_root)
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
