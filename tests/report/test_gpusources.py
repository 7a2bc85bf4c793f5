"""The GPU sources of the job report are slots: one module per source in envbuild/report/gpusources, each
registered by one line of GPU_SOURCES, each defining the same names; and, like the rest of the sampler, light."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

from envbuild.report import gpus, gpusources

REPO = Path(__file__).resolve().parents[2]
FOLDER = Path(gpusources.__file__).parent


def test_every_module_is_a_registered_source_or_shared_and_every_line_has_its_module() -> None:
    modules = sorted(path.stem for path in FOLDER.glob("*.py") if path.stem != "__init__")
    registered = [module for module, _ in gpusources.GPU_SOURCES]
    assert len(set(registered)) == len(registered), f"a source registered twice: {registered}"
    assert not set(registered) & set(gpusources.SHARED_MODULES), "a module is both a source and shared"
    unregistered = sorted(set(modules) - set(registered) - set(gpusources.SHARED_MODULES))
    assert unregistered == [], (f"modules of envbuild/report/gpusources that are neither in GPU_SOURCES nor in "
                                f"SHARED_MODULES: {unregistered}; fix: add a line for each to GPU_SOURCES")
    missing = sorted((set(registered) | set(gpusources.SHARED_MODULES)) - set(modules))
    assert missing == [], f"GPU_SOURCES or SHARED_MODULES name modules that do not exist: {missing}"


def test_every_source_defines_its_name_and_opener_and_the_shared_modules_none() -> None:
    names = []
    for module_name, looked_for in gpusources.GPU_SOURCES:
        module = importlib.import_module(f"envbuild.report.gpusources.{module_name}")
        assert isinstance(module.NAME, str) and module.NAME, module_name
        assert callable(module.open_source), module_name
        assert isinstance(looked_for, str), module_name
        names.append(module.NAME)
    assert len(set(names)) == len(names), f"two sources with one NAME: {names}"
    for module_name in gpusources.SHARED_MODULES:
        module = importlib.import_module(f"envbuild.report.gpusources.{module_name}")
        assert not hasattr(module, "open_source") and not hasattr(module, "NAME"), module_name


def test_the_sources_are_tried_in_the_documented_order() -> None:
    """docs/concepts/report.md: NVML, nvidia-smi, amd-smi, rocm-smi or sysfs, whichever answers first."""
    names = [importlib.import_module(f"envbuild.report.gpusources.{module}").NAME for module, _ in gpusources.GPU_SOURCES]
    assert names == ["nvml", "nvidia-smi", "amd-smi", "rocm-smi", "sysfs"]
    assert gpus.NO_GPU_NOTE == "no nvidia-smi, amd-smi, rocm-smi or /sys/class/drm GPU on this node"


LOAD_ALL = """
import importlib, json, sys
import envbuild.report.gpus
from envbuild.report import gpusources
for module, _ in gpusources.GPU_SOURCES:
    importlib.import_module("envbuild.report.gpusources." + module)
print(json.dumps(sorted(name for name in ("typing", "dataclasses") if name in sys.modules)))
"""


def test_the_gpu_reader_and_every_source_load_without_typing_or_dataclasses() -> None:
    """The sampler starts with `python -S` beside the training: its GPU reader imports no typing nor dataclasses."""
    done = subprocess.run([sys.executable, "-S", "-c", LOAD_ALL], capture_output=True, text=True, check=True,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, timeout=60)
    assert json.loads(done.stdout) == []
