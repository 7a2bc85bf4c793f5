"""What the exporters of every format share: their input (the spec, its lock's pins, the wheel index) and the
lines that make envbuild's venv and install the spec's Python packages into it, pinned to the lock."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from packaging.requirements import Requirement

from envbuild.envspec.specmodel import VENV_PREFIX, Spec


@dataclass(frozen=True)
class ExportInput:
    """What an exporter writes: the spec, and what the command found for it."""

    spec: Spec
    source: str  # the spec's path, for the header comment
    torch_index: str | None = None  # the variant's wheel index (spec's, else the system recipe's)
    pins: dict[str, str] | None = None  # name -> version from the lock, when there is one
    lock_source: str | None = None


def _pinned(requirement: str, pins: dict[str, str] | None) -> str:
    if not pins:
        return requirement
    req = Requirement(requirement)
    version = pins.get(_canonical(req.name))
    if version is None:
        return requirement
    extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
    return f"{req.name}{extras}=={version}"


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def install_lines(data: ExportInput) -> list[str]:
    """The shell lines that make envbuild's venv (as python.target says: none for the base's own Python) and install
    the spec's Python packages, pinned to the lock when there is one (its other packages too); torch from the
    variant's wheel index, marked for import to read back."""
    python = data.spec.python
    pins = {_canonical(name): version for name, version in data.pins.items()} if data.pins else None
    if python.target == "base":  # the base's own Python, as the spec installs into it: no venv
        pip = f"{python.interpreter} -m pip install --no-cache-dir"
        lines = ["# envbuild python.target: base (no venv: the packages go into the base's own Python)"]
    else:
        pip = f"{VENV_PREFIX}/bin/python -m pip install --no-cache-dir"
        over_base = " --system-site-packages" if python.target == "venv-over-base" else ""
        lines = [f"{python.interpreter} -m venv{over_base} {VENV_PREFIX}"]
    named: set[str] = set()
    if python.pytorch is not None:
        torch = [f"torch=={python.pytorch.version}", *python.pytorch.extras]
        named |= {_canonical(Requirement(r).name) for r in torch}
        index = f" --extra-index-url {shlex.quote(data.torch_index)}" if data.torch_index else ""
        words = " ".join(shlex.quote(_pinned(r, pins)) for r in torch)
        lines.append(f"{pip}{index} {words}  # pytorch variant {python.pytorch.variant}")
    rest = python.requirements()[1 + len(python.pytorch.extras):] if python.pytorch else python.requirements()
    named |= {_canonical(Requirement(r).name) for r in rest}
    requirements = [_pinned(r, pins) for r in rest]
    if pins:  # the lock pins the whole environment: its other packages too
        requirements += [f"{name}=={version}" for name, version in sorted(pins.items()) if name not in named]
    if requirements:
        lines.append(f"{pip} " + " ".join(shlex.quote(r) for r in requirements))
    return lines


def venv_on_path(spec: Spec) -> bool:
    """Whether the exported file puts envbuild's venv first on PATH (every python.target but the base's own)."""
    return spec.python.target != "base"


def header_lines(data: ExportInput, build: str) -> list[str]:
    """The comment lines at the top of an exported file: where it comes from and `build`, how to build it."""
    lines = [f"# Written by envbuild export from {data.source} (spec {data.spec.name}); {build}"]
    if data.lock_source:
        lines.append(f"# Python packages pinned by {data.lock_source}")
    if data.spec.system != "local":
        lines.append(f"# spec system {data.spec.system}: its site settings (binds, modules, launch) are not part of this file")
    return lines
