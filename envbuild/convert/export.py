"""Specs -> definition files and Dockerfiles (`envbuild export`); see envbuild.convert.formats."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass

from packaging.requirements import Requirement

from envbuild.convert.formats import (
    RecipeFormat,
)
from envbuild.convert.shellscript import HEREDOC
from envbuild.envspec.specmodel import VENV_PREFIX, Spec, env_assignments
from envbuild.shared.errors import UsageError

# --- export --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExportInput:
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


def _install_lines(data: ExportInput) -> list[str]:
    python = data.spec.python
    pins = {_canonical(name): version for name, version in data.pins.items()} if data.pins else None
    pip = f"{VENV_PREFIX}/bin/python -m pip install --no-cache-dir"
    lines = [f"{python.interpreter} -m venv {VENV_PREFIX}"]
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


def _header(data: ExportInput, build: str) -> list[str]:
    lines = [f"# Written by envbuild export from {data.source} (spec {data.spec.name}); {build}"]
    if data.lock_source:
        lines.append(f"# Python packages pinned by {data.lock_source}")
    if data.spec.system != "local":
        lines.append(f"# spec system {data.spec.system}: its site settings (binds, modules, launch) are not part of this recipe")
    return lines


def export_def(data: ExportInput) -> str:
    spec = data.spec
    out = _header(data, f"build with: apptainer build --fakeroot {spec.name}.sif {spec.name}.def")
    base = spec.base
    if base.kind == "debootstrap":
        out += ["Bootstrap: debootstrap", f"OSVersion: {base.ref}", f"MirrorURL: {base.mirror or 'http://deb.debian.org/debian'}"]
        include = ["python3", "python3-venv", *base.include]
        out.append("Include: " + " ".join(dict.fromkeys(include)))
    elif base.kind == "localimage":
        out += ["Bootstrap: localimage", f"From: {base.ref}"]
    else:
        out += [f"Bootstrap: {base.kind}", f"From: {base.ref.split('://', 1)[1]}"]
    if spec.files:
        out += ["", "%files"] + [f"    {shlex.quote(f.src)} {shlex.quote(f.dest)}" for f in spec.files]
    out += ["", "%environment"]
    out += [f"    export {assignment}" for assignment in env_assignments(spec.env)]
    out.append(f'    case ":$PATH:" in *":{VENV_PREFIX}/bin:"*) ;; *) export PATH="{VENV_PREFIX}/bin:$PATH" ;; esac')
    if spec.labels:
        out += ["", "%labels"] + [f"    {key} {value}" for key, value in spec.labels.items()]
    out += ["", "%post", "    set -e"] + [f"    {line}" for line in _install_lines(data)]
    out += [f"    chmod {f.mode} {shlex.quote(f.dest)}" for f in spec.files if f.mode]
    for command in spec.post:
        out += _section_lines(command)
    if spec.tests:
        out += ["", "%test", "    set -e"]
        for command in spec.tests:
            out += _section_lines(command)
    return "\n".join(out) + "\n"


def _section_lines(command: str) -> list[str]:
    """A script's lines indented for a def section, except a here-document's body and end marker: those are
    data the shell reads as written (an indented `EOF` would never close it)."""
    lines: list[str] = []
    open_heredocs: list[tuple[bool, str]] = []  # (<<- strips leading tabs, end marker), first to close first
    for line in command.splitlines():
        if open_heredocs:
            lines.append(line)
            strips_tabs, marker = open_heredocs[0]
            if (line.lstrip("\t") if strips_tabs else line) == marker:
                open_heredocs.pop(0)
            continue
        lines.append("    " + line if line else "")
        open_heredocs = [(match[1] == "-", match[3]) for match in HEREDOC.finditer(line)]
    return lines


def export_dockerfile(data: ExportInput) -> str:
    spec = data.spec
    out = _header(data, f"build with: docker build -t {spec.name} -f {spec.name}.Dockerfile .")
    base = spec.base
    if base.kind == "docker":
        out.append(f"FROM {base.ref.removeprefix('docker://')}")
    elif base.kind == "debootstrap":
        out.append(f"# base debootstrap:{base.ref}: the Debian image of the same suite")
        out.append(f"FROM debian:{base.ref}")
        packages = " ".join(dict.fromkeys(["python3", "python3-venv", *base.include]))
        out.append(f"RUN apt-get update && apt-get install -y --no-install-recommends {packages} && rm -rf /var/lib/apt/lists/*")
    else:
        raise UsageError(f"a Dockerfile cannot start from {base.describe()}",
                         "export a definition file instead (--format def), or use a docker:// base")
    out += [f"ENV {assignment}" for assignment in env_assignments(spec.env)]
    out.append(f"ENV PATH={VENV_PREFIX}/bin:$PATH")
    out += [f"LABEL {json.dumps(key)}={json.dumps(value)}" for key, value in spec.labels.items()]
    out += [f"COPY {json.dumps([f.src, f.dest])}" for f in spec.files]
    out += [f"RUN chmod {f.mode} {shlex.quote(f.dest)}" for f in spec.files if f.mode]
    out += ["RUN " + line for line in _install_lines(data)]
    out += [_docker_run_text(command) for command in spec.post]
    if spec.tests:
        out.append("# tests: envbuild runs these in the finished image; here they fail the build instead")
        out += [_docker_run_text(command) for command in spec.tests]
    return "\n".join(out) + "\n"


def _docker_run_text(command: str) -> str:
    if "\n" not in command:
        return f"RUN {command}"
    return "RUN " + json.dumps(["/bin/sh", "-ec", command])


def render_export(data: ExportInput, fmt: RecipeFormat) -> str:
    if data.spec.overlay is not None:
        raise UsageError("an overlay spec makes a venv overlay on an existing image, not an image a recipe can build",
                         "export a spec without overlay:")
    return export_def(data) if fmt == "def" else export_dockerfile(data)
