"""Apptainer/Singularity definition files: read into a spec (`envbuild import`), written from one (`envbuild export`).

One format of the table in envbuild.convert.formats; what every format shares is in envbuild.convert.specbuilder
(import) and envbuild.convert.specexport (export)."""

from __future__ import annotations

import itertools
import posixpath
import re
import shlex
from typing import TYPE_CHECKING

from envbuild.convert.buildargs import (
    build_file_error,
    check_image_reference,
    def_build_arguments,
    placeholder_names,
    refuse_unknown_build_args,
    substitute_def_placeholders,
)
from envbuild.convert.envassign import carry_assignments
from envbuild.convert.shellscript import HEREDOC, script_lines, split_words
from envbuild.convert.specbuilder import (
    ImportResult,
    SpecBuilder,
    add_file,
    add_label,
)
from envbuild.convert.specexport import ExportInput, header_lines, install_lines, venv_on_path
from envbuild.envspec.specmodel import VENV_PREFIX, env_assignments
from envbuild.shared.errors import UsageError

if TYPE_CHECKING:
    from envbuild.inventory.registryconfig import ConfigReader

# --- import -------------------------------------------------------------------------------------------------

_DEF_NOT_EXPRESSIBLE = {
    "runscript": "envbuild images have no runscript: run commands with envrun IMAGE.sif COMMAND",
    "startscript": "envbuild images are not run as instances",
    "setup": "commands on the build host are not part of a spec",
    "help": "a spec has no help text; a label or a comment in the spec can carry it",
}


def import_def(text: str, name: str, *, src_prefix: str = "", build_args: dict[str, str] | None = None,
               source: str = "<definition file>", read_base: ConfigReader | None = None) -> ImportResult:
    """The definition file `text` as the spec `name`; `read_base` (the base image's config, which a Dockerfile's
    commands start from) is not used: the table of formats gives every importer the same arguments."""
    builder = SpecBuilder(name)
    refuse_unknown_build_args(build_args or {}, def_build_arguments(text), source, kind="build argument")
    written = text.splitlines()  # as written, before the build arguments: what an empty value came from
    text = substitute_def_placeholders(text, build_args or {}, source)
    header: dict[str, tuple[int, str]] = {}
    sections: list[tuple[str, str, int, list[str]]] = []  # (name, rest of the % line, line, body lines)
    for number, raw in _final_stage(builder, text, source):
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
            header[key.strip().lower()] = (number, value.split("#", 1)[0].strip())
    header.pop("stage", None)  # the stage's name: only other stages refer to it
    _def_base(builder, header, source, written)
    for section, rest, number, body in sections:
        if section in _SCIF_SECTIONS:
            raise build_file_error(source, number, f"%{section} {rest}: SCIF apps cannot be expressed in a spec "
                                   "(envbuild images have one environment and no apps)",
                                   "move the app's install commands into %post, its files into %files and its "
                                   "environment into %environment, and run it with envrun IMAGE.sif COMMAND")
        _def_section(builder, section, rest, number, body, src_prefix, source)
    return builder.result()


_SCIF_SECTIONS = {"appinstall", "appfiles", "appenv", "apprun", "applabels", "apphelp", "apptest", "appstart"}
_STAGE_START = re.compile(r"^bootstrap\s*:", re.I)
_FILES_FROM = re.compile(r"^from\s+(\S+)", re.I)


def _final_stage(builder: SpecBuilder, text: str, source: str) -> list[tuple[int, str]]:
    """(line, text) of the last stage of a multi-stage file (each stage starts at a `Bootstrap:` line); its
    image is built from its own base, as Apptainer builds it. `%files from STAGE` would need an earlier stage
    built first, which a spec cannot say: refused."""
    stages: list[list[tuple[int, str]]] = [[]]
    in_section = False
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if _STAGE_START.match(stripped) and (not in_section or raw == stripped) and any(
                line.strip().lower().startswith("bootstrap") for _, line in stages[-1]):
            stages.append([])
            in_section = False
        in_section = in_section or stripped.startswith("%")
        stages[-1].append((number, raw))
    if len(stages) == 1:
        return stages[0]
    names: dict[str, int] = {}  # an earlier stage's name -> the line it starts on
    for previous in stages[:-1]:
        start = next(number for number, line in previous if _STAGE_START.match(line.strip()))
        header = itertools.takewhile(lambda numbered: not numbered[1].strip().startswith("%"), previous)
        named = [line.split(":", 1)[1].strip() for _, line in header if re.match(r"^\s*stage\s*:", line, re.I)]
        names[named[0] if named else str(len(names))] = start
    section = ""
    for number, raw in stages[-1]:
        stripped = raw.strip()
        if stripped.startswith("%"):
            section, _, rest = stripped[1:].partition(" ")
            files_from = _FILES_FROM.match(rest.strip())
            if section.lower() == "files" and files_from:
                stage = files_from[1]
                where = f" (line {names[stage]})" if stage in names else ""
                raise build_file_error(source, number, f"%files from {stage} copies files out of the build stage "
                                       f"{stage}{where}; a spec builds one image from one base and cannot stage copies",
                                       f"build stage {stage} as its own image (its Bootstrap: header and sections in a "
                                       f"file of their own: apptainer build {stage}.sif {stage}.def), then use it: "
                                       f"base: localimage:{stage}.sif in the spec, or copy the files out of it and list "
                                       "them under files:")
    earlier = ", ".join(f"{stage} (line {start})" for stage, start in names.items())
    builder.note(stages[-1][0][0], f"multi-stage definition: the image is the last stage, built from its own base "
                                   f"and taking no files from the earlier stage(s) {earlier}, which were not imported")
    return stages[-1]


# What From: names for each Bootstrap: agent envbuild reads, as an example for a fix.
_FROM_EXAMPLES = {"docker": "ubuntu:24.04", "docker-daemon": "ubuntu:24.04", "oras": "ghcr.io/org/image:tag",
                  "localimage": "/path/to/base.sif"}


def _def_base(builder: SpecBuilder, header: dict[str, tuple[int, str]], build_file: str, written: list[str]) -> None:
    bootstrap_line, bootstrap = header.pop("bootstrap", (0, ""))
    bootstrap = bootstrap.lower()
    from_line, source = header.pop("from", (0, ""))
    if bootstrap in _FROM_EXAMPLES and not source.strip("/:"):  # `{{ REGISTRY }}/{{ IMAGE }}` with both empty: '/'
        example = _FROM_EXAMPLES[bootstrap]
        if not from_line:
            raise build_file_error(build_file, bootstrap_line, f"Bootstrap: {bootstrap} without a From: line naming "
                                   "the image to start from", f"add one after it, e.g. From: {example}")
        names = sorted(placeholder_names(written[from_line - 1]))
        if names:
            arguments = " and ".join(names)
            raise build_file_error(build_file, from_line, f"From: is empty: the build argument{'s' * (len(names) > 1)} "
                                   f"{arguments} it is made of {'are' if len(names) > 1 else 'is'} empty",
                                   "give the image: envbuild import " + " ".join(f"--build-arg {name}=..." for name in names)
                                   + f" (e.g. {example})")
        raise build_file_error(build_file, from_line, " ".join(("From:", *source.split(), "names no image")),
                               f"write the image after it, e.g. From: {example}")
    if bootstrap in ("docker", "docker-daemon", "oras") and from_line:
        check_image_reference(source.split("://", 1)[-1], build_file, from_line, f"From: {source}")
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


def _def_section(builder: SpecBuilder, section: str, rest: str, number: int, body: list[str], src_prefix: str,
                 source: str) -> None:
    if section == "arguments":
        return  # its values were substituted into the file (importargs)
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
        _def_post(builder, number, body)
    elif section == "test":
        _def_test(builder, body)
    elif section == "environment":
        _def_environment(builder, number, body)
    elif section == "labels":
        for offset, line in enumerate(body, number + 1):
            key, _, value = line.strip().partition(" ")
            if key and not key.startswith("#"):
                add_label(builder, offset, key, value.strip())
    elif section == "files":
        for offset, line in enumerate(body, number + 1):
            words = split_words(line, comments=True)
            if words:
                add_file(builder, offset, words[0], _files_dest(words), src_prefix, build_file=source,
                         context=f"the directory of {source}", written=f"%files {line.strip()}")
    else:
        why = _DEF_NOT_EXPRESSIBLE.get(section, "not a section envbuild knows")
        builder.note(number, f"%{section} ({why})")


def _files_dest(words: list[str]) -> str:
    """A %files line's destination: as Apptainer copies, a destination ending in / is the directory the source
    goes into (`data.txt /opt/tools/` is /opt/tools/data.txt), none is the source's own path."""
    dest = words[1] if len(words) > 1 else words[0]
    return dest + posixpath.basename(words[0].rstrip("/")) if dest.endswith("/") else dest


def _def_post(builder: SpecBuilder, number: int, body: list[str]) -> None:
    """%post as written (here-document bodies keep their indentation), each line noted at its own number. A
    `(` ... `)` block (what export writes for each post entry) is a post entry of its own while nothing kept in
    post comes before it in the section: a subshell then starts from the state a post command of its own starts
    from. From the first command kept in post on, the rest of the section is one post entry with it, as before
    (its cd, exports and variables may reach what follows)."""
    first = next(index for index, line in enumerate(body) if line.strip())
    lines = body[first:]
    if lines[0].strip() == "set -e":  # envbuild runs post with sh -e anyway
        lines, first = lines[1:], first + 1
    joined_from: int | None = None  # the entry the rest of the section belongs to, once a command is kept
    for offset, segment, entry in _subshell_segments(lines):
        before = len(builder.post)
        if entry is not None and joined_from is None:
            builder.post.append(entry)
            builder.post_started = True
            continue
        builder.shell(number + 1 + first + offset, "\n".join(segment).rstrip("\n"))
        if len(builder.post) > before and joined_from is None:
            joined_from = before
        if joined_from is not None and len(builder.post) > joined_from + 1:
            builder.post[joined_from:] = ["\n".join(builder.post[joined_from:])]


def _def_test(builder: SpecBuilder, body: list[str]) -> None:
    """%test: its leading `(` ... `)` blocks (what export writes for each test) are tests of their own; the rest
    of the section is one test, as written."""
    lines = _dedent(body)
    while lines and not lines[0].strip():
        lines = lines[1:]
    if lines and lines[0].strip() == "set -e":  # envbuild runs tests with sh -e anyway
        lines = lines[1:]
    segments = _subshell_segments(lines)
    while segments and segments[0][2] is not None:
        builder.tests.append(str(segments.pop(0)[2]))
    rest = "\n".join(line for _, segment, _ in segments for line in segment).strip("\n")
    if rest.strip():
        builder.tests.append(rest)


def _subshell_segments(lines: list[str]) -> list[tuple[int, list[str], str | None]]:
    """`lines` cut into (offset of its first line, its lines, the block's script or None): runs of other lines,
    and blocks of a `(` line, the script, and a `)` line indented as the `(` (here-document bodies read as
    data). A block's script loses the indentation export gives it (the `(` line's and four more), its
    here-document bodies none."""
    segments: list[tuple[int, list[str], str | None]] = []
    open_heredocs: list[tuple[bool, str]] = []
    block: tuple[int, str] | None = None  # (offset of the `(` line, its indentation)
    start = 0
    for index, line in enumerate(lines):
        if open_heredocs:
            strips_tabs, marker = open_heredocs[0]
            if (line.lstrip("\t") if strips_tabs else line).strip() == marker:
                open_heredocs.pop(0)
            continue
        indent = line[:len(line) - len(line.lstrip())]
        if block is None and line.strip() == "(":
            if index > start:
                segments.append((start, lines[start:index], None))
            block, start = (index, indent), index
        elif block is not None and line.strip() == ")" and indent == block[1]:
            segments.append((start, lines[start:index + 1], _block_script(lines[start + 1:index], len(indent) + 4)))
            block, start = None, index + 1
        else:
            open_heredocs = [(match[1] == "-", match[3]) for match in HEREDOC.finditer(line)]
    if start < len(lines):  # lines after the last block (or a `(` never closed): not a block
        segments.append((start, lines[start:], None))
    return segments


def _block_script(lines: list[str], cut: int) -> str:
    """A block's lines as the script they were: the block's indentation taken off (at most `cut`, the same from
    every line), here-document bodies and end markers as written."""
    body_lines: set[int] = set()
    open_heredocs: list[tuple[bool, str]] = []
    for index, line in enumerate(lines):
        if open_heredocs:
            body_lines.add(index)
            strips_tabs, marker = open_heredocs[0]
            if (line.lstrip("\t") if strips_tabs else line) == marker:
                open_heredocs.pop(0)
            continue
        open_heredocs = [(match[1] == "-", match[3]) for match in HEREDOC.finditer(line)]
    indents = [len(line) - len(line.lstrip(" ")) for index, line in enumerate(lines)
               if index not in body_lines and line.strip()]
    cut = min([cut, *indents])
    return "\n".join(line if index in body_lines else line[cut:].rstrip() if line.strip() else ""
                     for index, line in enumerate(lines))


def _dedent(lines: list[str]) -> list[str]:
    indents = [len(line) - len(line.lstrip()) for line in lines if line.strip()]
    cut = min(indents, default=0)
    return [line[cut:].rstrip() for line in lines]


# The line an exported definition file puts envbuild's venv first on PATH with (export_def): what the spec's
# python.target does anyway.
_VENV_PATH_LINE = f'case ":$PATH:" in *":{VENV_PREFIX}/bin:"*) ;; *) export PATH="{VENV_PREFIX}/bin:$PATH" ;; esac'


def _def_environment(builder: SpecBuilder, number: int, body: list[str]) -> None:
    """%environment: its leading lines that are plain exported assignments go into env (as data, their values'
    shell meaning kept); from the first line that is not (an `if`, a `NAME=value` without export, which the
    shell does not export, a value computed at start), the rest of the section stays shell, as written and in
    its order, in env_shell, which the image's environment script runs after env. Nothing is moved past shell
    that may read or change it, and nothing conditional becomes unconditional."""
    raw = _dedent(body)
    for offset, line, _verbatim in script_lines("\n".join(body), number + 1):  # each line at its own number
        text = line.strip()
        if not text or text.startswith("#") or text == _VENV_PATH_LINE:
            continue
        why = _not_data(builder, text)
        if why is None:
            continue
        builder.env_shell.append("\n".join(raw[offset - number - 1:]).strip("\n"))
        builder.note(offset, f"%environment from here on kept as shell in env_shell, in its order after env "
                             f"({text.splitlines()[0]}: {why.split(';')[0]})")
        return


def _not_data(builder: SpecBuilder, text: str) -> str | None:
    """None when `text` went into env (or says nothing env does not say), else why it stays shell."""
    try:
        words = split_words(text.removeprefix("export ").strip(), comments=True)
    except ValueError:
        words = []
    if not text.startswith("export "):
        if words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
            return "without export, the shell exports it only where the variable is exported already"
        return "not an exported assignment"
    if words and all(re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", w) for w in words):
        return None  # `export A B` after assignments: the spec's env is exported anyway
    return carry_assignments(builder.env, text.removeprefix("export ").strip(), {}) if words else "not NAME=value pairs"


# --- export -------------------------------------------------------------------------------------------------


def export_def(data: ExportInput) -> str:
    """The spec as a definition file for `apptainer build --fakeroot`: post and tests in their sections, the venv's
    bin first on PATH in %environment."""
    spec = data.spec
    out = header_lines(data, f"build with: apptainer build --fakeroot {spec.name}.sif {spec.name}.def")
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
    if venv_on_path(spec):
        out.append(f"    {_VENV_PATH_LINE}")
    out += [f"    {line}" if line.strip() else "" for line in spec.env_shell.splitlines()]
    if spec.labels:
        out += ["", "%labels"] + [f"    {key} {value}" for key, value in spec.labels.items()]
    out += ["", "%post", "    set -e"] + [f"    {line}" for line in install_lines(data)]
    out += [f"    chmod {f.mode} {shlex.quote(f.dest)}" for f in spec.files if f.mode]
    for command in spec.post:
        out += _subshell_lines(command)
    if spec.tests:
        out += ["", "%test", "    set -e"]
        for command in spec.tests:
            out += _subshell_lines(command)
    return "\n".join(out) + "\n"


def _subshell_lines(command: str) -> list[str]:
    """A post command or test in a subshell of its own: its cd, exports and variables end with it, as they end
    with the separate shell envbuild runs each one in (import reads each block back as one)."""
    return ["    (", *_section_lines(command, "        "), "    )"]


def _section_lines(command: str, indent: str = "    ") -> list[str]:
    """A script's lines indented for a def section, except a here-document's body and end marker: those are
    data the shell reads as written (an indented `EOF` would never close it)."""
    lines: list[str] = []
    open_heredocs: list[tuple[bool, str]] = []  # (<<- strips leading tabs, end marker), first to close first
    for line in command.split("\n"):  # not splitlines: a trailing newline is part of the command
        if open_heredocs:
            lines.append(line)
            strips_tabs, marker = open_heredocs[0]
            if (line.lstrip("\t") if strips_tabs else line) == marker:
                open_heredocs.pop(0)
            continue
        lines.append(indent + line if line else "")
        open_heredocs = [(match[1] == "-", match[3]) for match in HEREDOC.finditer(line)]
    return lines
