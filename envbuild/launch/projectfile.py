"""Writing a project's envrun.yaml after `envbuild build` made an image or an overlay in it, so that
`envrun COMMAND` there runs in what was just built (envbuild.launch.project reads the file).

The file is the user's as much as envbuild's, so it is edited line by line, never re-dumped: comments,
other keys and their order stay as they are. Each line envbuild writes records the value it wrote:

    image: build/env.sif  # set by envbuild build envs/env.yaml: build/env.sif

A key is updated only when it is absent or still holds what envbuild last wrote there; a value changed
by hand is kept, and the returned messages say so. A file envrun would not obey (another user's, or one
others may write: envbuild.launch.trust) is left alone: rewriting it would make it the user's own, and
envrun would then obey what someone else wrote in it.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envbuild.launch.project import PROJECT_FILE
from envbuild.shared.errors import SpecError

if TYPE_CHECKING:
    from envbuild.launch.trust import Ignored

HEADER = (
    "# envrun's environment for this directory and those below it: `envrun COMMAND` runs COMMAND in it.\n"
    "# `envbuild build` updates the lines marked \"set by envbuild build\"; a value you change by hand is kept.\n"
)
_MARK = re.compile(r"\s#\s*set by envbuild build (?P<spec>.+?): (?P<value>.*?)\s*$")
_PLAIN = re.compile(r"[A-Za-z0-9_./~+@-][A-Za-z0-9_./~+@=-]*")


def update_project_file(directory: Path, *, image: str, overlays: tuple[str, ...], spec: str) -> list[str]:
    """Write or update DIRECTORY/envrun.yaml to name `image` and `overlays` (paths inside `directory` are
    written relative to it). Returns the messages to print: what changed, and each value kept because it
    was set by hand. A file that does not parse is left alone, with a message."""
    from envbuild.shared.yamlsource import parse_yaml_text

    path = directory / PROJECT_FILE
    name = str(path)
    wanted: dict[str, Any] = {"image": _relative(image, directory)}
    if overlays:
        wanted["overlays"] = [_relative(overlay, directory) for overlay in overlays]
    spec_text = _relative(spec, directory)
    if not path.exists():
        lines = [_line(key, value, spec_text) for key, value in wanted.items()]
        _write(directory, HEADER + "".join(line + "\n" for line in lines))
        return [f"wrote {name} ({', '.join(f'{k}: {render(v)}' for k, v in wanted.items())}): `envrun COMMAND` here runs in it"]
    untrusted = _untrusted(path)
    if untrusted:
        return [f"{name}: not updated: {untrusted.why} (envrun ignores it too); {untrusted.fix()}"]
    text = path.read_text(encoding="utf-8")
    try:
        document = parse_yaml_text(text, name)
    except SpecError as exc:
        problem = exc.problems[0]
        return [f"{name}: not updated, it does not parse ({problem.file}:{problem.line}:{problem.column}: {problem.message})"]
    if document.data is not None and not isinstance(document.data, dict):
        return [f"{name}: not updated, it is not a mapping of keys"]
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    messages: list[str] = []
    image_changes = False
    for key, value in wanted.items():
        document = parse_yaml_text("".join(lines), name)  # positions after the previous key's edit
        data = document.data or {}
        where = document.positions.get((key,))
        if where is None:
            _insert(lines, document, key, _line(key, value, spec_text))
            messages.append(f"{name}: added {key}: {render(value)}")
            image_changes |= key == "image"
            continue
        start, end = where.line - 1, _block_end(lines, where.line - 1)
        current = data.get(key)
        if current == value:
            if _written_by_envbuild(lines[start], current) and lines[start:end] != [_line(key, value, spec_text) + "\n"]:
                lines[start:end] = [_line(key, value, spec_text) + "\n"]  # the same value, now from this spec
            continue
        if where.column != 1 or not _written_by_envbuild(lines[start], current):
            messages.append(f"{name}: kept {key}: {render(current)} set by hand (envbuild built {render(value)})")
            continue
        lines[start:end] = [_line(key, value, spec_text) + "\n"]
        messages.append(f"{name}: {key}: {render(current)} -> {render(value)}")
        image_changes |= key == "image"
    if not overlays and image_changes:
        messages += _drop_old_overlays(lines, name)
    new_text = "".join(lines)
    if new_text != text:
        _write(directory, new_text)
    return messages


def _write(directory: Path, text: str) -> None:
    """DIRECTORY/envrun.yaml replaced whole through the directory's descriptor (envbuild.shared.safefiles.write_file:
    a link planted at the name is replaced, never written through), keeping the mode of the file it replaces."""
    import stat

    from envbuild.shared.safefiles import open_dir, write_file

    fd = open_dir(directory)
    try:
        try:
            info = os.stat(PROJECT_FILE, dir_fd=fd, follow_symlinks=False)
            mode = stat.S_IMODE(info.st_mode) if stat.S_ISREG(info.st_mode) else None
        except FileNotFoundError:
            mode = None
        write_file(PROJECT_FILE, text, mode=mode, dir_fd=fd)
    finally:
        os.close(fd)


def _untrusted(path: Path) -> Ignored | None:
    """Why envrun would not obey the existing file, as envbuild.launch.project judges a found one."""
    from envbuild.launch.project import trusted_dirs
    from envbuild.launch.trust import Ignored, untrusted_because

    if trusted_dirs(os.environ).covers(str(path.parent.absolute())):
        return None
    why = untrusted_because(str(path.absolute()))
    return Ignored(str(path), why) if why else None


def render(value: Any) -> str:
    """`value` (a path or a list of paths) as YAML on one line: plain where YAML reads it back unchanged."""
    import yaml

    if isinstance(value, list):
        return "[" + ", ".join(render(item) for item in value) + "]"
    text = str(value)
    if _PLAIN.fullmatch(text) and yaml.safe_load(text) == text:
        return text
    return json.dumps(text)  # a JSON string is a YAML double-quoted scalar


def _line(key: str, value: Any, spec: str) -> str:
    shown = render(value)
    return f"{key}: {shown}  # set by envbuild build {spec}: {shown}"


def _written_by_envbuild(line: str, current: Any) -> bool:
    """Whether `line` carries envbuild's mark and the value it records is still the current one."""
    import yaml

    mark = _MARK.search(line)
    if mark is None:
        return False
    try:
        return bool(yaml.safe_load(mark.group("value")) == current)
    except yaml.YAMLError:
        return False


def _block_end(lines: list[str], start: int) -> int:
    """The index after the last line of the top-level key starting at `start`: its indented lines and
    the items of a block list written at column 0, not the comments and blank lines after it."""
    end = index = start + 1
    while index < len(lines):
        line = lines[index]
        if line.startswith((" ", "\t", "-")) and line.strip():
            end = index + 1
        elif line.strip():
            break
        index += 1
    return end


def _insert(lines: list[str], document: Any, key: str, line: str) -> None:
    """A new key: overlays right after image, image right before overlays, else at the end."""
    neighbour = {"overlays": "image", "image": "overlays"}[key]
    where = document.positions.get((neighbour,))
    if where is not None and where.column == 1:
        index = _block_end(lines, where.line - 1) if key == "overlays" else where.line - 1
        lines.insert(index, line + "\n")
    else:
        lines.append(line + "\n")


def _drop_old_overlays(lines: list[str], name: str) -> list[str]:
    """An image was built in place of the last one: overlays envbuild named were made for the old one."""
    from envbuild.shared.yamlsource import parse_yaml_text

    document = parse_yaml_text("".join(lines), name)
    where = document.positions.get(("overlays",))
    current = (document.data or {}).get("overlays")
    if where is None or where.column != 1 or not _written_by_envbuild(lines[where.line - 1], current):
        return []
    del lines[where.line - 1 : _block_end(lines, where.line - 1)]
    return [f"{name}: removed overlays: {render(current)} (envbuild built them for the previous image)"]


def _relative(path: str, directory: Path) -> str:
    """`path` relative to `directory` when it lies inside it (the project moves as a whole), else absolute
    (a site's image, /appl/local/containers/...)."""
    absolute, base = os.path.abspath(path), os.path.abspath(directory)
    if absolute.startswith(base.rstrip(os.sep) + os.sep):
        return os.path.relpath(absolute, base)
    return absolute
