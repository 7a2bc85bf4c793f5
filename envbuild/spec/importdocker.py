"""Dockerfiles -> specs (`envbuild import`); see envbuild.spec.recipefiles."""

from __future__ import annotations

import json
import posixpath
import re
import shlex

from envbuild.errors import UsageError
from envbuild.spec.model import VENV_PREFIX
from envbuild.spec.recipefiles import (
    ImportResult,
    SpecBuilder,
    add_file,
    add_label,
)

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

    builder = SpecBuilder(name)
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
                add_label(builder, number, key, value)
        elif word in ("COPY", "ADD"):
            _docker_copy(builder, number, word, rest, src_prefix)
        else:
            why = _DOCKER_NOT_EXPRESSIBLE.get(word, "not an instruction envbuild knows")
            builder.note(number, f"{word} {rest[:80]} ({why})".replace("  ", " "))
    return builder.result()


def _docker_run(builder: SpecBuilder, number: int, rest: str) -> None:
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


def _docker_copy(builder: SpecBuilder, number: int, word: str, rest: str, src_prefix: str) -> None:
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
        add_file(builder, number, src, target, src_prefix, mode)


