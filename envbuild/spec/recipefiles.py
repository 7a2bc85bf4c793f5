"""Apptainer/Singularity definition files and Dockerfiles <-> specs (`envbuild import` / `envbuild export`).

Import reads the recipe instruction by instruction, keeping line numbers, and maps what a spec can say
(base, pip installs, other commands, environment, labels, files, tests); everything else is returned as
a note, written as a comment list at the top of the spec, never dropped silently. spython's parsers
are not used for the reading itself: its SingularityParser accepts only `Bootstrap: docker` and turns
%test into echo lines, its DockerParser sends USER/SHELL and continuation lines to the install list, and
neither keeps line numbers. spython's ENV splitter is used for Dockerfile ENV lines, and the tests parse
every exported recipe back with spython. Export renders the text itself for the same reason (spython's
SingularityWriter writes `Bootstrap: docker` only and always adds a runscript).
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Literal

import yaml
from packaging.requirements import InvalidRequirement, Requirement

from envbuild.errors import UsageError
from envbuild.spec.model import NAME_PATTERN, VENV_PREFIX, Spec

RecipeFormat = Literal["def", "dockerfile"]

# pip install options that change nothing a spec records: dropped without a note.
_HARMLESS_FLAGS = {"--no-cache-dir", "-U", "--upgrade", "-q", "--quiet", "-v", "--verbose", "--no-input",
                   "--disable-pip-version-check", "--break-system-packages", "--no-warn-script-location", "--compile"}
_HARMLESS_WITH_VALUE = {"--progress-bar", "--root-user-action", "--upgrade-strategy"}
_PIP = re.compile(r"^(?:sudo\s+)?(?:(?P<py>\S*python[0-9.]*)\s+-m\s+pip|\S*pip[0-9.]*)\s+install\s+(?P<args>.*)$", re.S)
_VENV = re.compile(r"^(?P<py>\S+)\s+-m\s+venv\s+" + re.escape(VENV_PREFIX) + r"/?$")
_VARIANT_COMMENT = re.compile(r"\s+#\s*pytorch variant (?P<variant>\S+)\s*$")
_SHORTHANDS = ("transformers", "lightning")


@dataclass
class ImportResult:
    """The spec read from a recipe (as a YAML-ready mapping) and what could not be carried into it."""

    spec: dict[str, Any]
    notes: list[str] = field(default_factory=list)

    def render(self, source: str) -> str:
        head = [f"# Imported by envbuild import from {source}; review it, then: envbuild build <this file>"]
        if self.notes:
            head.append("# not imported, or kept in post as written (a spec cannot express these; rewrite them by hand if you need them):")
            head += [f"#   {note}" for note in self.notes]
        return "\n".join(head) + "\n" + yaml.dump(self.spec, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=1000)


class _Dumper(yaml.SafeDumper):
    pass


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str_representer)


class _Builder:
    """What both readers collect, in recipe order."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.base: str | None = None
        self.base_extra: dict[str, Any] = {}
        self.interpreter: str | None = None
        self.requirements: list[str] = []
        self.pytorch: dict[str, Any] | None = None
        self.post: list[str] = []
        self.env: dict[str, str] = {}
        self.labels: dict[str, str] = {}
        self.files: list[dict[str, str]] = []
        self.tests: list[str] = []
        self.notes: list[str] = []

    def note(self, line: int | None, text: str) -> None:
        self.notes.append(f"line {line}: {text}" if line else text)

    def shell(self, line: int, script: str) -> None:
        """A shell script (a %post block, a RUN): its pip installs become packages, the rest post."""
        kept: list[str] = []
        for logical in _logical_lines(script):
            rest = self._take_pip(line, logical)
            if rest:
                kept.append(rest)
        if kept:
            self.post.append("\n".join(kept))

    def _take_pip(self, line: int, logical: str) -> str:
        venv = _VENV.match(logical.strip())
        if venv:  # envbuild's own venv (an exported recipe): implied by the spec
            if venv["py"] != "python3":
                self.interpreter = venv["py"]
            return ""
        variant = _VARIANT_COMMENT.search(logical)
        if variant:
            logical = logical[: variant.start()]
        segments = [s.strip() for s in re.split(r"\s*&&\s*", logical)]
        kept = []
        for segment in segments:
            if not self._pip_segment(line, segment, variant["variant"] if variant else None):
                kept.append(segment)
        if len(kept) == len(segments):
            return logical
        return " && ".join(s for s in kept if s)

    def _pip_segment(self, line: int, segment: str, variant: str | None) -> bool:
        """True when `segment` is a pip install taken into python.packages."""
        match = _PIP.match(segment)
        if not match:
            return False
        try:
            words = shlex.split(match["args"], comments=True)
        except ValueError:
            return False
        requirements, index_url, unknown = [], None, []
        it = iter(words)
        for word in it:
            if word in _HARMLESS_FLAGS:
                continue
            if word in _HARMLESS_WITH_VALUE:
                next(it, None)
                continue
            if word.split("=", 1)[0] in _HARMLESS_WITH_VALUE:
                continue
            if word in ("--index-url", "--extra-index-url", "-i") and variant:
                index_url = next(it, None)
                continue
            if word.startswith("-") or "$" in word or "/" in word:
                unknown.append(word)
                continue
            try:
                Requirement(word)
            except InvalidRequirement:
                unknown.append(word)
                continue
            requirements.append(word)
        if unknown or not requirements:
            self.note(line, f"kept in post: {segment[:100]} (pip options or arguments a spec cannot express: "
                            f"{' '.join(unknown) or 'no requirement'}; list the packages under python.packages)")
            return False
        if variant:
            torch = [r for r in requirements if Requirement(r).name == "torch"]
            version = str(Requirement(torch[0]).specifier).removeprefix("==") if torch else ""
            if torch and re.match(r"^\d[\w.+]*$", version):
                self.pytorch = {"version": version, "variant": variant}
                if index_url and not _is_official_index(index_url, variant):
                    self.pytorch["index_url"] = index_url
                extras = [r for r in requirements if r is not torch[0]]
                if extras:
                    self.pytorch["extras"] = extras
                return True
        self.requirements += requirements
        return True

    def result(self) -> ImportResult:
        if self.base is None:
            raise UsageError("the recipe names no base image (no Bootstrap/From header, no FROM line)",
                             "a spec needs a base; add one to the recipe or write the spec by hand")
        spec: dict[str, Any] = {"name": self.name, "system": "local"}
        spec["base"] = {**_base_mapping(self.base), **self.base_extra} if self.base_extra else self.base
        python: dict[str, Any] = {}
        if self.interpreter:
            python["interpreter"] = self.interpreter
        if self.pytorch:
            python["pytorch"] = self.pytorch
        packages = []
        for text in self.requirements:
            req = Requirement(text)
            if req.name in _SHORTHANDS and req.name not in python and not req.extras and not req.marker:
                spec_text = text.strip()[len(req.name):].strip()
                python[req.name] = spec_text.removeprefix("==") if re.match(r"^==[\w.]+$", spec_text) else spec_text or True
            else:
                packages.append(text)
        if packages:
            python["packages"] = packages
        order = ["interpreter", "pytorch", *_SHORTHANDS, "packages"]
        if python:
            spec["python"] = {key: python[key] for key in order if key in python}
        for key, value in (("env", self.env), ("labels", self.labels), ("files", self.files), ("post", self.post),
                           ("tests", self.tests)):
            if value:
                spec[key] = value
        return ImportResult(spec, self.notes)


def _is_official_index(url: str, variant: str) -> bool:
    tag = "cu" + variant[4:] if variant.startswith("cuda") else variant
    return url.rstrip("/") == f"https://download.pytorch.org/whl/{tag}"


def _base_mapping(base: str) -> dict[str, Any]:
    kind, ref = base.split(":", 1)
    return {kind: ref}


def _logical_lines(script: str) -> list[str]:
    """Lines with their backslash continuations joined."""
    lines: list[str] = []
    current = ""
    for raw in script.splitlines():
        if raw.rstrip().endswith("\\"):
            current += raw.rstrip()[:-1].rstrip() + " "
            continue
        current += raw.strip() if current else raw.rstrip()
        if current.strip():
            lines.append(current.strip() if current.startswith(" ") else current)
        current = ""
    if current.strip():
        lines.append(current.strip())
    return lines


def spec_name_for(stem: str) -> str:
    """A valid spec name from a file name: 'Singularity.def' -> 'Singularity', 'my env' -> 'my-env'."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-._") or "imported"
    return name if re.match(NAME_PATTERN, name) else "imported"


def detect_format(text: str, filename: str) -> RecipeFormat:
    lower = filename.lower()
    if "dockerfile" in lower or lower.endswith(".dockerfile") or lower.startswith("containerfile"):
        return "dockerfile"
    if lower.endswith((".def", ".singularity")) or lower.startswith("singularity"):
        return "def"
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if re.match(r"^bootstrap\s*:", stripped, re.I):
            return "def"
        if re.match(r"^(from|arg)\s", stripped, re.I):
            return "dockerfile"
        break
    raise UsageError(f"cannot tell whether {filename} is a definition file or a Dockerfile",
                     "pass --format def or --format dockerfile")


# --- definition files --------------------------------------------------------------------------------

_DEF_NOT_EXPRESSIBLE = {
    "runscript": "envbuild images have no runscript: run commands with envrun IMAGE.sif COMMAND",
    "startscript": "envbuild images are not run as instances",
    "setup": "commands on the build host are not part of a spec",
    "help": "a spec has no help text; a label or a comment in the spec can carry it",
    "arguments": "a spec has no build arguments",
}


def import_def(text: str, name: str, *, src_prefix: str = "") -> ImportResult:
    builder = _Builder(name)
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


def _def_base(builder: _Builder, header: dict[str, tuple[int, str]]) -> None:
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


def _def_section(builder: _Builder, section: str, rest: str, number: int, body: list[str], src_prefix: str) -> None:
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
        for offset, line in enumerate(_logical_lines(script), number + 1):
            _def_env_line(builder, offset, line)
    elif section == "labels":
        for offset, line in enumerate(script.splitlines(), number + 1):
            key, _, value = line.strip().partition(" ")
            if key and not key.startswith("#"):
                _add_label(builder, offset, key, value.strip())
    elif section == "files":
        for offset, line in enumerate(script.splitlines(), number + 1):
            words = shlex.split(line, comments=True)
            if words:
                _add_file(builder, offset, words[0], words[1] if len(words) > 1 else words[0], src_prefix)
    else:
        why = _DEF_NOT_EXPRESSIBLE.get(section, "not a section envbuild knows")
        builder.note(number, f"%{section} ({why})")


def _dedent(lines: list[str]) -> list[str]:
    indents = [len(line) - len(line.lstrip()) for line in lines if line.strip()]
    cut = min(indents, default=0)
    return [line[cut:].rstrip() for line in lines]


def _def_env_line(builder: _Builder, number: int, line: str) -> None:
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


def _add_label(builder: _Builder, number: int, key: str, value: str) -> None:
    if key.startswith("org.envbuild."):
        builder.note(number, f"label {key} (envbuild writes org.envbuild.* labels itself)")
    else:
        builder.labels[key] = value


def _add_file(builder: _Builder, number: int, src: str, dest: str, src_prefix: str, mode: str | None = None) -> None:
    if not dest.startswith("/"):
        builder.note(number, f"file {src} -> {dest} (the destination must be an absolute path)")
        return
    if src.startswith(("http://", "https://")) or any(ch in src for ch in "*?["):
        builder.note(number, f"file {src} -> {dest} (files[].src is one local path: no URLs or wildcards)")
        return
    entry = {"src": src if src.startswith("/") or not src_prefix else posixpath.normpath(posixpath.join(src_prefix, src)),
             "dest": dest}
    if mode:
        entry["mode"] = mode
    builder.files.append(entry)


# --- Dockerfiles --------------------------------------------------------------------------------------

_DOCKER_NOT_EXPRESSIBLE = {
    "CMD": "envbuild images have no default command: run commands with envrun IMAGE.sif COMMAND",
    "ENTRYPOINT": "envbuild images have no entrypoint: run commands with envrun IMAGE.sif COMMAND",
    "USER": "Apptainer runs as the calling user; post commands run as root",
    "EXPOSE": "Apptainer shares the host's network",
    "VOLUME": "bind directories at run time (envrun --bind)",
    "WORKDIR": "post commands start in /; add a cd to them if they need another directory",
    "STOPSIGNAL": "not an Apptainer setting",
    "HEALTHCHECK": "a spec's tests run once after the build (tests:), not as a health check",
    "SHELL": "post commands run with /bin/sh",
    "ONBUILD": "no spec field for triggers",
    "ARG": "a spec has no build arguments (a default used in FROM was substituted)",
}


def _docker_instructions(text: str) -> list[tuple[int, str, str]]:
    """(line, INSTRUCTION, arguments) with continuation lines joined and comments left out."""
    result: list[tuple[int, str, str]] = []
    pending: tuple[int, list[str]] | None = None
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if pending is None and (not stripped or stripped.startswith("#")):
            continue
        if pending is not None and stripped.startswith("#"):
            continue
        start, parts = pending if pending else (number, [])
        if stripped.endswith("\\"):
            parts.append(stripped[:-1].rstrip())
            pending = (start, parts)
            continue
        parts.append(stripped)
        pending = None
        joined = " ".join(p for p in parts if p)
        word, _, rest = joined.partition(" ")
        result.append((start, word.upper(), rest.strip()))
    if pending:
        joined = " ".join(pending[1])
        word, _, rest = joined.partition(" ")
        result.append((pending[0], word.upper(), rest.strip()))
    return result


def import_dockerfile(text: str, name: str, *, src_prefix: str = "") -> ImportResult:
    from spython.main.parse.parsers.docker import DockerParser

    builder = _Builder(name)
    instructions = _docker_instructions(text)
    froms = [i for i, (_, word, _) in enumerate(instructions) if word == "FROM"]
    args: dict[str, str] = {}
    if len(froms) > 1:
        first, last = instructions[froms[0]][0], instructions[froms[-1]][0]
        builder.note(first, f"build stages before line {last} (multi-stage build: only the final stage, "
                            f"line {last}, was imported; build the earlier stages' results into the base or files)")
    start = froms[-1] if froms else 0
    for _line, word, rest in instructions[: froms[0] if froms else 0]:
        if word == "ARG":
            key, _, value = rest.partition("=")
            args[key.strip()] = value.strip().strip("\"'")
    env_parser = DockerParser(filename=None, load=False)
    for number, word, rest in instructions[start:]:
        if word == "FROM":
            words = [w for w in rest.split() if not w.startswith("--platform")]
            if len(words) != len(rest.split()):
                builder.note(number, "FROM --platform (the base is pulled for the build host's platform)")
            image = re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m[1], m[0]), words[0] if words else "")
            if "$" in image:
                raise UsageError(f"line {number}: FROM {rest} uses a build argument without a default",
                                 "write the image name into the FROM line")
            builder.base = "docker://" + image.removeprefix("docker://")
        elif word == "RUN":
            _docker_run(builder, number, rest)
        elif word == "ENV":
            for pair in env_parser.parse_env(rest):
                key, _, value = pair.partition("=")
                if (key, value) != ("PATH", f"{VENV_PREFIX}/bin:$PATH"):  # envbuild's venv (an exported recipe): implied
                    builder.env[key] = value.strip("\"'")
        elif word in ("LABEL", "MAINTAINER"):
            pairs = [("maintainer", rest.strip("\"'"))] if word == "MAINTAINER" else \
                [tuple(w.partition("=")[::2]) for w in shlex.split(rest)]
            for key, value in pairs:
                _add_label(builder, number, key, value)
        elif word in ("COPY", "ADD"):
            _docker_copy(builder, number, word, rest, src_prefix)
        else:
            why = _DOCKER_NOT_EXPRESSIBLE.get(word, "not an instruction envbuild knows")
            builder.note(number, f"{word} {rest[:80]} ({why})".replace("  ", " "))
    return builder.result()


def _docker_run(builder: _Builder, number: int, rest: str) -> None:
    if rest.startswith("["):
        try:
            words = json.loads(rest)
            rest = words[2] if words[:2] == ["/bin/sh", "-ec"] and len(words) == 3 else shlex.join(words)
        except (ValueError, TypeError):
            pass
    while rest.startswith("--"):
        option, _, rest = rest.partition(" ")
        builder.note(number, f"RUN {option} (BuildKit options are not carried)")
    if "<<" in rest:
        builder.note(number, "RUN with a here-document: kept in post as written; check it")
    builder.shell(number, rest)


def _docker_copy(builder: _Builder, number: int, word: str, rest: str, src_prefix: str) -> None:
    words = json.loads(rest) if rest.startswith("[") else shlex.split(rest)
    mode = None
    options = [w for w in words if w.startswith("--")]
    words = [w for w in words if not w.startswith("--")]
    for option in options:
        if option.startswith("--chmod="):
            mode = option.split("=", 1)[1]
        elif option.startswith("--from"):
            builder.note(number, f"{word} {rest} (files from another build stage or image cannot be copied by a spec)")
            return
        else:
            builder.note(number, f"{word} {option} (not carried; files are copied as root)")
    if len(words) < 2:
        builder.note(number, f"{word} {rest} (needs a source and a destination)")
        return
    *sources, dest = words
    for src in sources:
        target = dest
        if len(sources) > 1 or (dest.endswith("/") and not src.endswith("/")):
            target = dest.rstrip("/") + "/" + posixpath.basename(src.rstrip("/"))
        if word == "ADD" and re.search(r"\.(tar|tgz|gz|bz2|xz|zst)$", src):
            builder.note(number, f"ADD {src} (ADD unpacks archives; files[] copies them as they are)")
            continue
        _add_file(builder, number, src, target, src_prefix, mode)


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
    out += [f"    export {key}={shlex.quote(value)}" for key, value in spec.env.items()]
    out.append(f'    case ":$PATH:" in *":{VENV_PREFIX}/bin:"*) ;; *) export PATH="{VENV_PREFIX}/bin:$PATH" ;; esac')
    if spec.labels:
        out += ["", "%labels"] + [f"    {key} {value}" for key, value in spec.labels.items()]
    out += ["", "%post", "    set -e"] + [f"    {line}" for line in _install_lines(data)]
    out += [f"    chmod {f.mode} {shlex.quote(f.dest)}" for f in spec.files if f.mode]
    for command in spec.post:
        out += ["    " + line if line else "" for line in command.splitlines()]
    if spec.tests:
        out += ["", "%test", "    set -e"]
        for command in spec.tests:
            out += ["    " + line if line else "" for line in command.splitlines()]
    return "\n".join(out) + "\n"


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
    out += [f"ENV {key}={shlex.quote(value)}" for key, value in spec.env.items()]
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
