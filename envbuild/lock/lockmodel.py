"""Lock files: every Python package of a spec pinned to one version, with hashes, for the spec's target.

This module holds the lock's data types and what the build needs from one (the requirements.txt
text for `uv pip install --require-hashes --no-deps`). uv does the resolution (lock/uv.py plans that
call); lock/fileformat.py writes and reads the file; lock/staleness.py says whether a lock still
matches its spec. Nothing in lock/ runs a program or touches the filesystem.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from packaging.utils import canonicalize_name

from envbuild.host.secrets import redact

if TYPE_CHECKING:
    from envbuild.envspec.specmodel import Spec

LOCK_FORMAT_VERSION = 1
LOCK_SUFFIX = ".lock"
_SPEC_SUFFIXES = (".yaml", ".yml")

# The algorithms pip and uv accept with --require-hashes; uv writes sha256 unless an index only offers a stronger one.
HASH_PATTERN = r"^(sha256:[0-9a-f]{64}|sha384:[0-9a-f]{96}|sha512:[0-9a-f]{128})$"
DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"


@dataclass(frozen=True)
class LockTarget:
    """What the packages are resolved for: the base image's Python and platform."""

    python: str  # full version of the base image's python3, e.g. "3.11.2"
    platform: str  # uv --python-platform value, e.g. "x86_64-manylinux_2_36"

    @property
    def arch(self) -> str:
        """The architecture the packages are for: "x86_64-manylinux_2_36" -> "x86_64"."""
        return self.platform.split("-", 1)[0]


@dataclass(frozen=True)
class LockInputs:
    """What in the spec shapes the resolution: when any of it changes, the lock is stale."""

    requirements: tuple[str, ...]  # spec.python.requirements(), in order
    base: str  # spec.base.describe(), plus include=/mirror= for debootstrap
    system: str  # recipe name
    torch_index: str | None  # the PyTorch variant's wheel index (None: the host's configuration only)
    interpreter: str  # spec.python.interpreter
    python_target: str = "envbuild-venv"  # spec.python.target: where the packages go


@dataclass(frozen=True)
class LockedPackage:
    name: str
    version: str
    hashes: tuple[str, ...]

    def __post_init__(self) -> None:
        # Normalised here so that two locks of the same resolution compare equal and render identically.
        object.__setattr__(self, "name", canonicalize_name(self.name))
        object.__setattr__(self, "hashes", tuple(sorted(set(self.hashes))))


@dataclass(frozen=True)
class Lock:
    inputs: LockInputs
    target: LockTarget
    # "sha256:..."; None for a lock resolved for another architecture, whose base was not fetched or run here
    base_digest: str | None
    recipe_digest: str  # "sha256:..."
    resolver: str  # e.g. "uv 0.13.9"
    packages: tuple[LockedPackage, ...]
    spec_name: str
    # "name==version" of the base's distributions the environment keeps as they are (python.target base or
    # venv-over-base: its torch family, and what already satisfies a requirement); the lock never replaces them.
    kept: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "kept", tuple(sorted(set(self.kept), key=str.lower)))
        ordered = tuple(sorted(self.packages, key=lambda package: package.name))
        twice = [name for name, count in Counter(p.name for p in ordered).items() if count > 1]
        if twice:
            raise ValueError(f"a lock pins each package once; listed more than once: {', '.join(twice)}")
        object.__setattr__(self, "packages", ordered)


class LoadedLock(NamedTuple):
    """A lock as a build installs it: parsed, its text (recorded in the image), its file."""

    lock: Lock
    text: str
    path: Path


# --- the inputs ----------------------------------------------------------------------------------


def lock_inputs(spec: Spec, torch_index: str | None) -> LockInputs:
    """What the lock records of the spec; URLs without their credentials (a lock file is committed and shared)."""
    base = spec.base.describe()
    if spec.base.kind == "debootstrap":
        # The included Debian packages and the mirror decide what is in the base (its python3 among them).
        if spec.base.include:
            base += " include=" + ",".join(sorted(set(spec.base.include)))
        if spec.base.mirror:
            base += f" mirror={spec.base.mirror}"
    return LockInputs(
        requirements=tuple(map(redact, spec.python.requirements())),
        base=redact(base),
        system=spec.system,
        torch_index=redact(torch_index) if torch_index else None,
        interpreter=spec.python.interpreter,
        python_target=spec.python.target,
    )


# --- using a lock ---------------------------------------------------------------------------------


def requirements_with_hashes(lock: Lock) -> str:
    """requirements.txt for `uv pip install --require-hashes --no-deps -r`: one pinned package per line."""
    lines = [
        " ".join([f"{package.name}=={package.version}", *(f"--hash={digest}" for digest in sorted(package.hashes))])
        for package in sorted(lock.packages, key=lambda package: package.name)
    ]
    return "".join(line + "\n" for line in lines)


def lock_path_for(spec_path: Path) -> Path:
    """The lock sits next to its spec: envs/foo.yaml -> envs/foo.lock."""
    if spec_path.suffix in _SPEC_SUFFIXES:
        return spec_path.with_suffix(LOCK_SUFFIX)
    # Appended rather than substituted, so that no spec name can map onto the spec file itself.
    return spec_path.with_name(spec_path.name + LOCK_SUFFIX)


def lock_sha256(text: str) -> str:
    """Hex sha256 of a lock file's text, like the spec's sha256 in image labels."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
