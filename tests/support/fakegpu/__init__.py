"""Stand-in GPU tools (nvidia-smi, amd-smi, rocm-smi) that replay traces in the output formats the real tools
document: see replay.py for the formats, the trace file and the environment variables (ENVBUILD_FAKEGPU_TRACE,
ENVBUILD_FAKEGPU_STATE, ENVBUILD_FAKEGPU_PYTHON). traces/ holds the scenarios; recorded/ fixed outputs for
the parsers' tests: the real tools' output quoted in public (public-*, each with its source in
recorded/README.md) and the stand-ins' own (standin-*), kept for the shapes no public output was found for.

Put FAKEGPU first on PATH for all three tools, or `fake_bin(dir, tools)` for a node that has only some of them.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

FAKEGPU = Path(__file__).resolve().parent
TRACES = FAKEGPU / "traces"
RECORDED = FAKEGPU / "recorded"
TOOLS = ("nvidia-smi", "amd-smi", "rocm-smi")


def fake_bin(directory: Path, tools: Iterable[str] = TOOLS) -> Path:
    """A folder holding links to the chosen stand-ins only (a node with rocm-smi but no amd-smi, ...)."""
    directory.mkdir(parents=True, exist_ok=True)
    for tool in tools:
        link = directory / tool
        if not link.exists():
            link.symlink_to(FAKEGPU / tool)
    return directory


def fake_env(bin_dir: Path, trace: str | Path, *, state: Path | None = None,
             extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """An environment whose PATH finds the stand-ins in `bin_dir` first (then only /usr/bin:/bin, so no real
    GPU tool of the machine joins in), replaying `trace` (a name in traces/ or a path); `extra`: more variables
    (SLURM_STEP_GPUS, CUDA_VISIBLE_DEVICES ...)."""
    trace_path = Path(trace) if Path(trace).is_absolute() else TRACES / trace
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "ENVBUILD_FAKEGPU_TRACE": str(trace_path),
           "ENVBUILD_FAKEGPU_PYTHON": sys.executable, **(extra or {})}
    if state is not None:
        env["ENVBUILD_FAKEGPU_STATE"] = str(state)
    return env
