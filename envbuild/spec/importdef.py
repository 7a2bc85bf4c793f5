"""Apptainer/Singularity definition files -> specs (`envbuild import`); see envbuild.spec.recipefiles."""

from __future__ import annotations

import re
import shlex

from envbuild.errors import UsageError
from envbuild.spec.recipefiles import (
    ImportResult,
    SpecBuilder,
    add_file,
    add_label,
    logical_lines,
)

# --- definition files --------------------------------------------------------------------------------

_DEF_NOT_EXPRESSIBLE = {
    "runscript": "envbuild images have no runscript: run commands with envrun IMAGE.sif COMMAND",
    "startscript": "envbuild images are not run as instances",
    "setup": "commands on the build host are not part of a spec",
    "help": "a spec has no help text; a label or a comment in the spec can carry it",
    "arguments": "a spec has no build arguments",
}


def import_def(text: str, name: str, *, src_prefix: str = "") -> ImportResult:
    builder = SpecBuilder(name)
    header: dict[str, tuple[int, str]] = {}
    sections: list[tuple[str, str, int, list[str]]] = []  # (name, rest of the % line, line, body lines)
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if stripped.startswith("%"):
            word, _, rest = stripped[1:].partition(" ")
            sections.append((word.lower(), rest.strip(), number, []))
        elif sections:
            sections[-1][3].append(raw)
        elif stripped and not stripped.startswith("#"):
            key, sep, value = stripped.partition(":")
            if not sep:
                builder.note(number, f"not a header line: {stripped}")
                continue
            key = key.strip().lower()
            if key in header and key == "bootstrap":
                builder.note(number, "a second Bootstrap (multi-stage definition): only the first stage was imported")
                break
            header[key] = (number, value.split("#", 1)[0].strip())
    _def_base(builder, header)
    for section, rest, number, body in sections:
        _def_section(builder, section, rest, number, body, src_prefix)
    return builder.result()


def _def_base(builder: SpecBuilder, header: dict[str, tuple[int, str]]) -> None:
    bootstrap = header.pop("bootstrap", (0, ""))[1].lower()
    source = header.pop("from", (0, ""))[1]
    if bootstrap in ("docker", "docker-daemon") and source:
        builder.base = "docker://" + source.removeprefix("docker://")
    elif bootstrap == "oras" and source:
        builder.base = "oras://" + source.removeprefix("oras://")
    elif bootstrap == "localimage" and source:
        builder.base = "localimage:" + source
    elif bootstrap == "debootstrap":
        builder.base = "debootstrap:" + header.pop("osversion", (0, "bookworm"))[1]
        if "mirrorurl" in header:
            builder.base_extra["mirror"] = header.pop("mirrorurl")[1]
        if "include" in header:
            builder.base_extra["include"] = header.pop("include")[1].replace(",", " ").split()
    elif bootstrap:
        raise UsageError(f"Bootstrap: {bootstrap} has no envbuild base",
                         "envbuild bases are docker, oras, localimage and debootstrap; pull the image "
                         "(apptainer pull base.sif ...) and use Bootstrap: localimage")
    for key, (number, value) in header.items():
        builder.note(number, f"{key}: {value} (no spec field for this header)")


def _def_section(builder: SpecBuilder, section: str, rest: str, number: int, body: list[str], src_prefix: str) -> None:
    script = "\n".join(_dedent(body)).strip("\n")
    if section in ("post", "test") and script.startswith("set -e\n"):
        script = script[len("set -e\n"):]  # envbuild runs post and tests with sh -e anyway
    if not script.strip():
        return
    if rest and section in ("files", "post", "test", "environment", "labels"):
        builder.note(number, f"%{section} {rest} (section options and stages are not imported)")
        if section == "files":
            return
    if section == "post":
        builder.shell(number + 1, script)
    elif section == "test":
        builder.tests.append(script)
    elif section == "environment":
        for offset, line in enumerate(logical_lines(script), number + 1):
            _def_env_line(builder, offset, line)
    elif section == "labels":
        for offset, line in enumerate(script.splitlines(), number + 1):
            key, _, value = line.strip().partition(" ")
            if key and not key.startswith("#"):
                add_label(builder, offset, key, value.strip())
    elif section == "files":
        for offset, line in enumerate(script.splitlines(), number + 1):
            words = shlex.split(line, comments=True)
            if words:
                add_file(builder, offset, words[0], words[1] if len(words) > 1 else words[0], src_prefix)
    else:
        why = _DEF_NOT_EXPRESSIBLE.get(section, "not a section envbuild knows")
        builder.note(number, f"%{section} ({why})")


def _dedent(lines: list[str]) -> list[str]:
    indents = [len(line) - len(line.lstrip()) for line in lines if line.strip()]
    cut = min(indents, default=0)
    return [line[cut:].rstrip() for line in lines]


def _def_env_line(builder: SpecBuilder, number: int, line: str) -> None:
    text = line.strip()
    if not text or text.startswith("#"):
        return
    try:
        words = shlex.split(text.removeprefix("export ").strip(), comments=True)
    except ValueError:
        words = []
    if words and all(re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", w) for w in words):
        for word in words:
            key, _, value = word.partition("=")
            builder.env[key] = value
    elif words and text.startswith("export ") and all(re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", w) for w in words):
        return  # `export A B` after assignments: the spec's env is exported anyway
    else:
        builder.note(number, f"%environment: {text} (env holds NAME=value pairs only)")



