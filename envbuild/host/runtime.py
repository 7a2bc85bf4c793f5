"""The container runtime and envbuild's cache directory: the few host facts envrun's launch path needs.

Kept to os/shutil imports on purpose (no dataclasses, pathlib or typing): envrun runs before every job
step, and each of those imports costs it milliseconds.
"""

from __future__ import annotations

import os

from envbuild.shared.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path


class Runtime:
    """The container runtime: apptainer or singularity (SingularityCE), found at run time."""

    __slots__ = ("name", "path", "version")

    def __init__(self, path: str, name: str, version: str = "") -> None:
        self.path = path
        self.name = name  # "apptainer" or "singularity"
        self.version = version  # its `--version` line when it was asked ("apptainer version 1.4.5"), else ""

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


def find_runtime(environ: Mapping[str, str] | None = None, *, probe: bool = True) -> Runtime | None:
    """apptainer, else singularity, on PATH ($ENVBUILD_RUNTIME overrides). `probe` asks the program
    which it is (`singularity` is often apptainer); without it the resolved file name decides, which
    costs no process start (envrun's launch path)."""
    environ = os.environ if environ is None else environ  # read, not copied: envrun records what it reads
    override = environ.get("ENVBUILD_RUNTIME")
    candidates = [override] if override else ["apptainer", "singularity"]
    for candidate in candidates:
        path = which(candidate, environ.get("PATH", os.defpath))
        if path:
            if probe:
                from envbuild.host.runtimeversion import probe_version_line

                line = probe_version_line(path)
                return Runtime(path=path, name=_runtime_name(line), version=line)
            resolved = os.path.basename(os.path.realpath(path))
            return Runtime(path=path, name="apptainer" if "apptainer" in resolved else "singularity")
    return None


def which(program: str, search_path: str) -> str | None:
    """shutil.which without shutil, whose import (fnmatch, re) envrun would pay on every launch."""
    if "/" in program:
        return program if os.access(program, os.X_OK) and not os.path.isdir(program) else None
    for directory in search_path.split(os.pathsep):
        candidate = os.path.join(directory or ".", program)
        if os.access(candidate, os.X_OK) and not os.path.isdir(candidate):
            return candidate
    return None


def _runtime_name(version_line: str) -> str:
    # `singularity` is often a symlink to apptainer; what matters is which program answers.
    return "apptainer" if "apptainer" in version_line.lower() else "singularity"


def require_runtime(*, probe: bool = True, environ: Mapping[str, str] | None = None) -> Runtime:
    """The runtime, checked to be a version envbuild supports (envbuild.host.runtimeversion). Without `probe`
    (envrun), its version comes from the cache, so only a new runtime file costs a `--version` run."""
    runtime = find_runtime(environ, probe=probe)
    if runtime is None:
        raise UsageError(
            "neither apptainer nor singularity is on PATH",
            "load the site's module (e.g. `module load apptainer`) or run provision/install.sh on a test machine",
        )
    from envbuild.host.runtimeversion import cached_version_line, check_supported

    if not runtime.version:
        runtime.version = cached_version_line(runtime.path)
        if runtime.version:
            runtime.name = _runtime_name(runtime.version)
    check_supported(runtime.path, runtime.version)
    return runtime


def default_cache_dir(environ: dict[str, str] | None = None) -> Path:
    from pathlib import Path

    return Path(cache_dir_path(environ))


def cache_dir_path(environ: dict[str, str] | None = None) -> str:
    """$ENVBUILD_CACHE_DIR, else $XDG_CACHE_HOME/envbuild, else ~/.cache/envbuild (as a string)."""
    variables = os.environ if environ is None else environ
    if variables.get("ENVBUILD_CACHE_DIR"):
        return variables["ENVBUILD_CACHE_DIR"]
    base = variables.get("XDG_CACHE_HOME") or os.path.join(variables.get("HOME") or os.path.expanduser("~"), ".cache")
    return os.path.join(base, "envbuild")


# A store envbuild creates is open to its owner and group (as the umask allows) and closed to everyone else:
# its layers hold root file systems with world-writable directories (/tmp, /var/tmp, /run/lock) whose
# content goes into every image built on them, and installers' lock files that uv makes world-writable.
STORE_ROOT_MODE = 0o770


def ensure_store_root(path: str) -> None:
    """Create the store's root (and missing parents, as the umask says) when it does not exist, with
    STORE_ROOT_MODE less the umask. An existing directory keeps its mode: a project directory set up for
    a group is the user's (or the site's) decision. Errors are left to the first write into the store, but
    for a link another member planted on the way in a directory others may write (`--cache-dir
    /project/stores/team` with `stores` made a link to the user's files): the parents are made through
    safefiles.open_dir, which refuses it (UnsafePlaceError) instead of making the store in the link's target."""
    from envbuild.shared.safefiles import make_dir_at, open_dir

    if os.path.isdir(path):
        return
    parent, name = os.path.split(os.path.abspath(path))
    try:
        parent_fd = open_dir(parent, create=True)
    except OSError:
        return  # not ours to make: the store's first write says why
    try:
        make_dir_at(parent_fd, name, STORE_ROOT_MODE)  # less the umask, like every mkdir
    except OSError:
        pass  # made meanwhile by another build, or not ours to make: the store's first write says why
    finally:
        os.close(parent_fd)
