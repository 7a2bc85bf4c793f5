"""The kernels envrun installed, found where Jupyter finds kernelspecs.

Jupyter looks in the `kernels/` directory of each entry of its data path (jupyter_core.paths.jupyter_path:
$JUPYTER_PATH, the user's data directory, the environment's and the system's share/jupyter); `--prefix DIR`
adds DIR/share/jupyter/kernels, where a kernel installed with that prefix lies even when Jupyter is not
told about it. A kernel is envrun's when its kernel.json has metadata.envrun (envbuild.kernel.kernelspec).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from envbuild.kernel.kernelspec import KERNEL_FILE, KernelEntry, is_envrun_kernel, kernels_dir, read_entry
from envbuild.shared.errors import EnvbuildError

if TYPE_CHECKING:
    from collections.abc import Sequence


@dataclass(frozen=True)
class InstalledKernel:
    name: str
    directory: str
    ours: bool  # installed by envrun (metadata.envrun)
    entry: KernelEntry | None  # None: not ours, or its metadata is unreadable (then `problem` says why)
    problem: str = ""


def user_data_dir() -> str:
    """The user's Jupyter data directory ($JUPYTER_DATA_DIR, else ~/.local/share/jupyter on Linux)."""
    from jupyter_core.paths import jupyter_data_dir

    return str(jupyter_data_dir())


def search_dirs(prefixes: Sequence[str] = ()) -> list[str]:
    """The kernelspec directories looked at, in Jupyter's order after the `prefixes` given; each once."""
    from jupyter_core.paths import jupyter_path

    found = [kernels_dir(prefix=prefix, data_dir="") for prefix in prefixes] + [str(p) for p in jupyter_path("kernels")]
    return list(dict.fromkeys(os.path.abspath(path) for path in found))


def installed_kernels(prefixes: Sequence[str] = ()) -> list[InstalledKernel]:
    """Every kernelspec in the search directories (a name shadowed by an earlier directory included)."""
    kernels = []
    for directory in search_dirs(prefixes):
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        for name in names:
            path = os.path.join(directory, name, KERNEL_FILE)
            if os.path.isfile(path):
                kernels.append(_read(name, os.path.join(directory, name), path))
    return kernels


def _read(name: str, directory: str, path: str) -> InstalledKernel:
    try:
        with open(path, encoding="utf-8") as handle:
            kernel_json = json.load(handle)
    except (OSError, ValueError) as exc:
        return InstalledKernel(name, directory, False, None, f"unreadable {path}: {exc}")
    if not isinstance(kernel_json, dict) or not is_envrun_kernel(kernel_json):
        return InstalledKernel(name, directory, False, None)
    try:
        return InstalledKernel(name, directory, True, read_entry(kernel_json, path))
    except EnvbuildError as exc:
        return InstalledKernel(name, directory, True, None, exc.message)
