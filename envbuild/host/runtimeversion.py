"""Which container runtime versions envbuild supports, and the version of the one found, cached for envrun.

`apptainer --version` prints "apptainer version 1.4.5" and SingularityCE's "singularity-ce version 4.1.2"
(both: "<PACKAGE_NAME> version <Version>", cmd/internal/cli/apptainer.go and singularity.go); a `singularity`
that is apptainer's symlink prints apptainer's line. The Singularity before the split (hpcng, up to 3.8.7)
prints "singularity version 3.8.7".

Minimum versions, from what envbuild runs:
- `exec --no-mount bind-paths` (envbuild packages --via-runtime): "The --no-mount flag now accepts the value
  bind-paths" is in Apptainer 1.2.0 (CHANGELOG.md, v1.2.0 - 2023-07-18) and SingularityCE 3.11.0 (CHANGELOG.md,
  3.11.0 - 2023-02-10). Older versions refuse the value.
- `exec --no-mount home,cwd,tmp` for builds and probes: SingularityCE 3.7.0 / Apptainer 1.0.0;
  `--bind FILE.sqsh:DIR:image-src=/,ro` for venv overlays: Singularity 3.6.0 ("The --bind flag can now bind
  directories from a SIF or ext3 image"). Both are older than the above.
- Without setuid, SIF files are mounted with squashfuse since Apptainer 1.1.0 (CHANGELOG.md v1.1.0), which
  Apptainer 1.2.0 includes.

envrun's launch path does not start `apptainer --version` each time: the answer is kept in the user's own
cache (envbuild.host.usercache), keyed by the runtime file's path, inode, size and modification time, so an
upgrade is noticed (one probe per new runtime file). Light: os and zlib only until a probe is needed.
"""

from __future__ import annotations

import os
import zlib

from envbuild.shared.errors import UsageError
from envbuild.shared.versionnumbers import release_numbers

MINIMUM = {"apptainer": (1, 2, 0), "singularity-ce": (3, 11, 0)}
LABELS = {"apptainer": "Apptainer", "singularity-ce": "SingularityCE", "singularity": "Singularity"}
SUPPORTED = "Apptainer >= 1.2.0 or SingularityCE >= 3.11.0"
WHY = "envbuild runs `exec --no-mount bind-paths`, which older versions refuse"


def parse_version_line(line: str) -> tuple[str, tuple[int, int, int]] | None:
    """'apptainer version 1.4.5-1.el9' -> ('apptainer', (1, 4, 5)); None when the line says no version."""
    words = line.strip().split()
    if len(words) < 3 or words[1] != "version" or words[0] not in LABELS:
        return None
    numbers = release_numbers(words[2])
    if numbers is None:
        return None
    major, minor, patch = [*numbers, 0, 0][:3]
    return words[0], (major, minor, patch)


def check_supported(path: str, line: str) -> None:
    """Raise a UsageError when `line` (the runtime's --version) names a version envbuild does not support.
    A line that names no version is let through: a new output format must not stop every launch."""
    parsed = parse_version_line(line)
    if parsed is None:
        return
    flavour, version = parsed
    minimum = MINIMUM.get(flavour, MINIMUM["singularity-ce"])  # hpcng Singularity: SingularityCE's numbering
    if version >= minimum:
        return
    found = f"{LABELS[flavour]} {'.'.join(map(str, version))}"
    if flavour == "singularity":
        found += " (the Singularity from before the Apptainer/SingularityCE split)"
    raise UsageError(
        f"{path} is {found}; envbuild needs {SUPPORTED} ({WHY})",
        "load a newer one (`module avail apptainer singularity` lists them, e.g. `module load apptainer`), "
        "or set ENVBUILD_RUNTIME to the path of a newer apptainer or singularity",
    )


def cached_version_line(path: str) -> str:
    """The first line of `path --version`, from envrun's per-user cache (envbuild.host.usercache) while the
    file is unchanged: a shared store is never read for it, and what is read back must be text."""
    from envbuild.host.usercache import MISS, read_cached, write_cached

    try:
        info = os.stat(path)
    except OSError:
        return ""
    key = f"{os.path.realpath(path)}|{info.st_ino}|{info.st_size}|{info.st_mtime_ns}"
    name = f"version-{zlib.crc32(key.encode()):08x}-{len(key):x}"
    cached = read_cached(name, key, lambda value: type(value) is str and "\n" not in value)
    if cached is not MISS:
        checked: str = cached  # one line of text, as the check says
        return checked
    line = probe_version_line(path)
    if line:
        write_cached(name, key, line)  # an unwritable cache: probe again next time
    return line


def probe_version_line(path: str) -> str:
    """First line of `path --version` ("" when it cannot run)."""
    import subprocess

    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    text = (out.stdout or out.stderr).strip()
    return text.splitlines()[0] if text else ""
