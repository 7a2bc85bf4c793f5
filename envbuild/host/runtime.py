"""The container runtime and envbuild's cache directory: the few host facts envrun's launch path needs.

Kept to os/shutil imports on purpose (no dataclasses, pathlib or typing): envrun runs before every job
step, and each of those imports costs it milliseconds.
"""

from __future__ import annotations

import os

from envbuild.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path


class Runtime:
    """The container runtime: apptainer or singularity (SingularityCE), found at run time."""

    __slots__ = ("name", "path")

    def __init__(self, path: str, name: str) -> None:
        self.path = path
        self.name = name  # "apptainer" or "singularity"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Runtime) and (self.path, self.name) == (other.path, other.name)

    def __hash__(self) -> int:
        return hash((self.path, self.name))

    def __repr__(self) -> str:
        return f"Runtime(path={self.path!r}, name={self.name!r})"

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
        path = which(candidate, environ.get("PATH", os.defpath))
        if path:
            if probe:
                return Runtime(path=path, name=_runtime_name(path))
            resolved = os.path.basename(os.path.realpath(path))
            return Runtime(path=path, name="apptainer" if "apptainer" in resolved else "singularity")
    return None


def which(program: str, search_path: str) -> str | None:
    """shutil.which without shutil, whose import (fnmatch, re) costs envrun ~9 ms."""
    if "/" in program:
        return program if os.access(program, os.X_OK) and not os.path.isdir(program) else None
    for directory in search_path.split(os.pathsep):
        candidate = os.path.join(directory or ".", program)
        if os.access(candidate, os.X_OK) and not os.path.isdir(candidate):
            return candidate
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
    from pathlib import Path

    return Path(cache_dir_path(environ))


def cache_dir_path(environ: dict[str, str] | None = None) -> str:
    """$ENVBUILD_CACHE_DIR, else $XDG_CACHE_HOME/envbuild, else ~/.cache/envbuild (as a string)."""
    environ = os.environ if environ is None else environ
    if environ.get("ENVBUILD_CACHE_DIR"):
        return environ["ENVBUILD_CACHE_DIR"]
    base = environ.get("XDG_CACHE_HOME") or os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".cache")
    return os.path.join(base, "envbuild")
