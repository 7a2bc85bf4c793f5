"""The container runtime and envbuild's cache directory: the few host facts envrun's launch path needs.

Kept to os/shutil imports on purpose: envrun runs before every job step and must start fast.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from envbuild.errors import UsageError


@dataclass(frozen=True)
class Runtime:
    """The container runtime: apptainer or singularity (SingularityCE), found at run time."""

    path: str
    name: str  # "apptainer" or "singularity"

    @property
    def env_prefix(self) -> str:
        """Variables with this prefix reach the container even under --cleanenv."""
        return "APPTAINERENV_" if self.name == "apptainer" else "SINGULARITYENV_"


def find_runtime(environ: dict[str, str] | None = None, *, probe: bool = True) -> Runtime | None:
    """apptainer, else singularity, on PATH ($ENVBUILD_RUNTIME overrides). `probe` asks the program
    which it is (`singularity` is often apptainer); without it the resolved file name decides, which
    costs no process start (envrun's launch path)."""
    environ = dict(os.environ) if environ is None else environ
    override = environ.get("ENVBUILD_RUNTIME")
    candidates = [override] if override else ["apptainer", "singularity"]
    for candidate in candidates:
        path = shutil.which(candidate)
        if path:
            if probe:
                return Runtime(path=path, name=_runtime_name(path))
            resolved = os.path.basename(os.path.realpath(path))
            return Runtime(path=path, name="apptainer" if "apptainer" in resolved else "singularity")
    return None


def _runtime_name(path: str) -> str:
    # `singularity` is often a symlink to apptainer; what matters is which program answers.
    import subprocess

    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    return "apptainer" if "apptainer" in out.lower() else "singularity"


def require_runtime(*, probe: bool = True) -> Runtime:
    runtime = find_runtime(probe=probe)
    if runtime is None:
        raise UsageError(
            "neither apptainer nor singularity is on PATH",
            "load the site's module (e.g. `module load apptainer`) or run provision/install.sh on a test machine",
        )
    return runtime


def default_cache_dir(environ: dict[str, str] | None = None) -> Path:
    environ = dict(os.environ) if environ is None else environ
    if environ.get("ENVBUILD_CACHE_DIR"):
        return Path(environ["ENVBUILD_CACHE_DIR"])
    base = environ.get("XDG_CACHE_HOME") or str(Path(environ.get("HOME", str(Path.home()))) / ".cache")
    return Path(base) / "envbuild"
