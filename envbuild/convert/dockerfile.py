"""Dockerfiles: read into a spec (`envbuild import`), written from one (`envbuild export`).

One format of the table in envbuild.convert.formats; what every format shares is in envbuild.convert.specbuilder
(import) and envbuild.convert.specexport (export)."""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from envbuild.convert.buildargs import (
    build_file_error,
    check_image_reference,
    refuse_unknown_build_args,
    substitute_docker_args,
    substitute_run_args,
)
from envbuild.convert.envassign import carry_each_assignment, edited_value, split_assignments
from envbuild.convert.shellscript import HEREDOC, heredoc_delimiters, split_words
from envbuild.convert.specbuilder import (
    ImportResult,
    SpecBuilder,
    add_file,
    add_label,
)
from envbuild.convert.specexport import ExportInput, header_lines, install_lines, venv_on_path
from envbuild.envspec.specmodel import VENV_PREFIX, env_assignments
from envbuild.inventory.registryconfig import ConfigNotRead, ImageConfig
from envbuild.shared.errors import UsageError

if TYPE_CHECKING:
    from envbuild.inventory.registryconfig import ConfigReader

# --- import -------------------------------------------------------------------------------------------------

_DOCKER_NOT_EXPRESSIBLE = {
    "CMD": "envbuild images have no default command: run commands with envrun IMAGE.sif COMMAND",
    "ENTRYPOINT": "envbuild images have no entrypoint: run commands with envrun IMAGE.sif COMMAND",
    "USER": "Apptainer runs as the calling user; post commands run as root",
    "EXPOSE": "Apptainer shares the host's network",
    "VOLUME": "bind directories at run time (envrun --bind)",
    "STOPSIGNAL": "not an Apptainer setting",
    "HEALTHCHECK": "a spec's tests run once after the build (tests:), not as a health check",
    "SHELL": "post commands run with /bin/sh",
    "ONBUILD": "no spec field for triggers",
}


def _docker_instructions(text: str) -> list[tuple[int, str, str]]:
    """(line, INSTRUCTION, arguments) with continuation lines joined and comments left out; a here-document
    (`RUN <<EOF` ... `EOF`) is kept in the arguments byte for byte, comment-like lines included."""
    result: list[tuple[int, str, str]] = []
    pending: tuple[int, list[str]] | None = None
    heredoc: list[str] = []  # delimiters still to be read for the last instruction
    body: list[str] = []  # its here-document lines, joined once at the end (adding each to the string was quadratic)
    for number, raw in enumerate(text.splitlines(), 1):
        if heredoc:
            body.append(raw)
            if raw.strip() == heredoc[0]:
                heredoc.pop(0)
                if not heredoc:
                    _append_body(result, body)
            continue
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
        if word.upper() in ("RUN", "COPY", "ADD") and not rest.lstrip().startswith("["):  # exec form: no here-documents
            heredoc = heredoc_delimiters(rest)
    if heredoc:  # the file ended inside a here-document
        _append_body(result, body)
    if pending:
        joined = " ".join(pending[1])
        word, _, rest = joined.partition(" ")
        result.append((pending[0], word.upper(), rest.strip()))
    return result


def _append_body(result: list[tuple[int, str, str]], body: list[str]) -> None:
    """The here-document lines read for the last instruction, added to its arguments; `body` is emptied."""
    line, word, rest = result[-1]
    result[-1] = (line, word, "\n".join([rest, *body]))
    body.clear()


# The LUMI AI Factory build scripts write their ARG lines (BASE_IMAGE, BASE_IMAGE_TAG and the recipe's values)
# in place of this line of a containerfile template; the --build-args given to import stand for them.
LAIF_BUILD_ARGS = "@@ BUILD_ARGS @@"
# Variables that change what a pip install does: a RUN's pip install that sees one of them set by an ARG stays
# a post command (python.packages would be installed without it).
_PIP_SETTINGS = ("PIP_", "UV_", "PYTHON")


def import_dockerfile(text: str, name: str, *, src_prefix: str = "", build_args: dict[str, str] | None = None,
                      source: str = "Dockerfile", read_base: ConfigReader | None = None) -> ImportResult:
    """The Dockerfile `text` as the spec `name`. `read_base` reads the FROM image's config (the command hands
    in envbuild.inventory.registryconfig.read_image_config; the importer does no I/O), whose WorkingDir is
    where the RUN, COPY and ADD before the file's own WORKDIR run and whose Env gives `$NAME` its value, as in
    Docker; None (envbuild import --offline): not read, which a note says."""
    builder = SpecBuilder(name)
    build_args = build_args or {}
    instructions = _docker_instructions(text)
    froms = [i for i, (_, word, _) in enumerate(instructions) if word == "FROM"]
    global_args: dict[str, str | None] = {}
    declared: dict[str, int] = {}  # every ARG of the file -> the line that declares it first
    template_line = None  # the line of LAIF_BUILD_ARGS, where the build scripts write their ARGs
    for line, word, rest in instructions[: froms[0] if froms else 0]:
        if word == "ARG":
            global_args.update(_declared_args(rest, build_args, {}, source, line))
        elif f"{word} {rest}" == LAIF_BUILD_ARGS:
            global_args.update(build_args)
            declared.update({key: line for key in build_args})
            template_line = line
            builder.note(line, f"{LAIF_BUILD_ARGS} (the LUMI AI Factory build scripts put their ARG lines here; the "
                               "--build-args given to envbuild import stand for them)")
    start = froms[-1] if froms else 0
    for line, word, rest in instructions:
        if word == "ARG":
            for key in _arg_names(rest):
                declared.setdefault(key, line)
    refuse_unknown_build_args(build_args, declared, source, kind="ARG")
    in_stage = {key for _, word, rest in instructions[start:] if word == "ARG" for key in _arg_names(rest)}
    for key in sorted(set(build_args) - in_stage - set(global_args)):
        builder.note(declared[key], f"--build-arg {key}: ARG {key} is declared only in an earlier build stage, which "
                                    "is not imported (ignored)")
    _check_stages(builder, instructions, froms, source)
    scope: dict[str, str | None] = {}  # an ARG before FROM is seen in FROM only, unless declared again in the stage
    workdir = "/"
    base_env: dict[str, str] = {}  # the FROM image's Env, where it was read
    base_read = False
    for number, word, rest in instructions[start:]:
        if word == "ARG":
            scope.update(_declared_args(rest, build_args, global_args, source, number))
            continue
        arguments = _arguments_seen(scope, builder, base_env)
        if word not in ("FROM", "RUN") and "\n" not in rest:  # a COPY here-document is data, not expanded here
            rest = substitute_docker_args(rest, arguments, source, number)
            if word != "ENV" and "$" in rest:  # an ENV line reads the environment itself (a reference to its own
                rest = substitute_docker_args(rest, _EnvValues(builder, base_env), source, number)  # name is kept)
        if word == "FROM":
            _docker_from(builder, number, rest, global_args, source, template_line)
            base_env, workdir, base_read = _base_config(builder, number, read_base, instructions[start + 1:])
        elif word == "RUN":
            _docker_run(builder, number, rest, workdir, arguments, source,
                        {key: value for key, value in scope.items()
                         if value is not None and key not in builder.env and key not in base_env})
        elif word == "WORKDIR":
            workdir = _docker_workdir(builder, number, rest, workdir, source)
        elif word == "ENV":
            _docker_env(builder, number, rest, base_env, base_read)
        elif word == "MAINTAINER":
            add_label(builder, number, "maintainer", rest.strip("\"'"))
        elif word == "LABEL":
            for key, value in _label_pairs(builder, number, rest, source):
                add_label(builder, number, key, value)
        elif word in ("COPY", "ADD") and "\n" in rest:
            _docker_copy_heredoc(builder, number, word, rest, workdir, source)
        elif word in ("COPY", "ADD"):
            if "$" in rest:
                raise build_file_error(source, number, f"{word} {rest} uses a variable that import cannot resolve "
                                       f"({_SUBSTITUTED})", f"write the paths into the {word} line")
            _docker_copy(builder, number, word, rest, src_prefix, workdir, source)
        else:
            why = _DOCKER_NOT_EXPRESSIBLE.get(word, "not an instruction envbuild knows")
            builder.note(number, f"{word} {rest[:80]} ({why})".replace("  ", " "))
    return builder.result()


# What import writes in place of a `$NAME` outside RUN, as Docker expands it.
_SUBSTITUTED = "only build arguments, the file's ENV values and the base image's ENV, where it was read, are substituted"


def _base_config(builder: SpecBuilder, number: int, read_base: ConfigReader | None,
                 stage: list[tuple[int, str, str]]) -> tuple[dict[str, str], str, bool]:
    """The FROM image's Env, the directory its commands start in ("/" where it sets none) and whether they were
    read, as `read_base` reads them; what was read, and from where, is a note; so is why not and what that changes."""
    image = (builder.base or "").removeprefix("docker://")
    if image in ("", "scratch"):
        return {}, "/", True
    config = read_base(image) if read_base else ConfigNotRead(
        "not asked for: envbuild import --offline", "import without --offline where the registry is reachable")
    if isinstance(config, ImageConfig):
        names = ", ".join(name for name, _ in config.env) or "none"
        where = f"{config.reference.registry}/{config.reference.repository}@{config.digest}"
        workdir = posixpath.normpath(posixpath.join("/", config.working_dir)) if config.working_dir else "/"
        builder.note(number, f"FROM {image}: the base's config was read from {where} ({config.platform}): WORKDIR "
                             f"{config.working_dir or '(none: /)'}, ENV {names}; RUN, COPY and ADD before the file's "
                             f"own WORKDIR run in {workdir} and $NAME of the base's ENV reads its value, as in Docker")
        return dict(config.env), workdir, True
    if _runs_before_a_workdir(stage) or any(word == "ENV" and "$" in text for _, word, text in stage):
        builder.note(number, f"FROM {image}: the base's WORKDIR and ENV were not read ({config.why}): RUN, COPY and "
                             "ADD before the file's own WORKDIR run in /, where Docker runs them in the base's WORKDIR, "
                             f"and $NAME of the base's ENV has no value here; fix: {config.fix}, or add WORKDIR <the "
                             "base's directory> before them if the base sets one")
    return {}, "/", False


class _EnvValues(Mapping[str, "str | None"]):
    """The values of the environment an instruction other than RUN and ENV expands, as far as import knows them:
    the file's ENV over the base's; a name the file adds to without the base's value known is not in it. Looked
    up one name at a time (a copy per instruction made a file of many ENV lines take quadratic time)."""

    def __init__(self, builder: SpecBuilder, base_env: dict[str, str]) -> None:
        self.env, self.base_env = builder.env, base_env

    def __getitem__(self, key: str) -> str | None:
        entry = self.env.get(key)
        if isinstance(entry, str):
            return entry
        if key in self.base_env:
            return self.base_env[key] if entry is None else edited_value(entry, self.base_env[key])
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(key for key in {**self.base_env, **self.env} if key in self)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def _runs_before_a_workdir(stage: list[tuple[int, str, str]]) -> bool:
    """Whether a RUN, COPY or ADD of the stage comes before its first WORKDIR: Docker runs it in the base's."""
    for _, word, _ in stage:
        if word == "WORKDIR":
            return False
        if word in ("RUN", "COPY", "ADD"):
            return True
    return False


# The transports Podman and Buildah read a FROM through besides a registry (containers-transports(5)).
_OTHER_TRANSPORT = re.compile(r"^(oci|oci-archive|docker-archive|docker-daemon|containers-storage|dir):")


def _docker_from(builder: SpecBuilder, number: int, rest: str, global_args: dict[str, str | None], source: str,
                 template_line: int | None) -> None:
    """FROM: its build arguments substituted (an ARG before the first FROM, or a --build-arg; in a LUMI AI Factory
    template, whose ARGs the build scripts write at `template_line`, the --build-args), never written into the
    spec as `$NAME`."""
    words = [w for w in rest.split() if not w.startswith("--platform")]
    if len(words) != len(rest.split()):
        builder.note(number, "FROM --platform (the base is pulled for the build host's platform)")
    written = words[0] if words else ""
    undeclared = (f"is one of the ARGs the LUMI AI Factory build scripts write at line {template_line} "
                  f"({LAIF_BUILD_ARGS}), and no --build-arg gives it", "give it: envbuild import --build-arg {name}=...") \
        if template_line else ("is not declared before the first FROM, where FROM sees it",
                               "declare it before FROM (ARG {name}) and give it: envbuild import --build-arg {name}=...")
    image = substitute_docker_args(written, global_args, source, number, undeclared=undeclared)
    transport = _OTHER_TRANSPORT.match(image)
    if transport:
        raise build_file_error(source, number, f"FROM {rest}: the base is read through {transport[1]}:, which a "
                               "spec cannot name (its bases are docker://, oras:// and local .sif images)",
                               f"make it a .sif (apptainer build base.sif {image}); import the file with a "
                               "registry image in FROM and write base: localimage:base.sif into the spec it gives")
    check_image_reference(image.removeprefix("docker://"), source, number, f"FROM {rest}")
    if "$" in image:
        raise build_file_error(source, number, f"FROM {rest} gives the image reference '{image}', which holds a "
                               "variable import cannot expand", "write the image reference into the FROM line")
    builder.base = "docker://" + image.removeprefix("docker://")


def _arguments_seen(scope: dict[str, str | None], builder: SpecBuilder,
                    base_env: dict[str, str]) -> dict[str, str | None]:
    """The stage's ARGs as the next instruction sees them: an ENV of the same name, the file's set earlier or
    the base image's, wins (Docker's rule), with its value where import knows it, else the name is left to the
    environment."""
    seen: dict[str, str | None] = {}
    for key, value in scope.items():
        env = builder.env.get(key)
        if env is None:
            seen[key] = base_env.get(key, value)
        elif isinstance(env, str):
            seen[key] = env
        elif key in base_env:
            seen[key] = edited_value(env, base_env[key])
    return seen


def _label_pairs(builder: SpecBuilder, number: int, rest: str, source: str) -> list[tuple[str, str]]:
    """LABEL read with Docker's grammar: `key=value ...` pairs (quotes and escapes as in the shell), or, when the
    first word has no `=`, the legacy `LABEL key value` form, whose value is the rest of the line."""
    try:
        words = split_words(rest)
    except ValueError as problem:
        raise build_file_error(source, number, f"LABEL {rest[:80]}: {problem}",
                               "close the quote, or escape the character") from None
    if not words:
        raise build_file_error(source, number, "LABEL without a label", "write LABEL key=value, or remove the line")
    if "=" not in words[0]:  # the legacy form: `LABEL key value`
        key, value = [*re.split(r"\s+", rest.strip(), maxsplit=1), ""][:2]  # at the first blank, as Docker splits it
        key, value = _dequoted(key), _dequoted(value)
        if value.startswith("="):
            builder.note(number, f"LABEL {rest[:80]}: the legacy form LABEL key value (no = after the key), so "
                                 f"Docker gives the label {key} the value {value!r} and so does the spec; write "
                                 f"LABEL {key}={value[1:].strip()!r} if that was meant")
        pairs = [(key, value)]
    else:
        pairs = []
        for word in words:
            key, sep, value = word.partition("=")
            if not sep:
                raise build_file_error(source, number, f"LABEL {rest[:80]}: {word!r} is not key=value (Docker refuses "
                                       "the line too)", f"write {word}=<value>, or quote the value it belongs to")
            pairs.append((key, value))
    for key, _ in pairs:
        if not key.strip():
            raise build_file_error(source, number, f"LABEL {rest[:80]}: a label with an empty key",
                                   "write the key before the =, e.g. LABEL org.opencontainers.image.version=1.0")
    return pairs


_QUOTED_PART = re.compile(r"""'([^']*)'|"((?:[^"\\]|\\.)*)"|\\(.)|([^'"\\]+)""", re.DOTALL)


def _dequoted(text: str) -> str:
    """`text` with its quotes and escapes taken away and its blanks kept, as Docker reads a legacy LABEL's value."""
    parts = []
    for match in _QUOTED_PART.finditer(text):
        single, double, escaped, plain = match.groups()
        if double is not None:
            parts.append(re.sub(r'\\(["\\])', r"\1", double))
        else:
            parts.append(next(part for part in (single, escaped, plain) if part is not None))
    return "".join(parts)


def _arg_names(rest: str) -> list[str]:
    return [word.partition("=")[0] for word in split_words(rest)]


def _declared_args(rest: str, build_args: dict[str, str], inherited: dict[str, str | None], source: str,
                   line: int) -> dict[str, str | None]:
    """`ARG NAME[=default] ...` -> {NAME: value}: the --build-arg, else the default, else the value of the
    same ARG before FROM (Docker's rule for declaring it again in a stage), else None (no value)."""
    declared: dict[str, str | None] = {}
    for word in split_words(rest):
        key, sep, default = word.partition("=")
        if key in build_args:
            declared[key] = build_args[key]
        elif sep:
            declared[key] = substitute_docker_args(default, {**inherited, **declared}, source, line)
        else:
            declared[key] = inherited.get(key)
    return declared


def _check_stages(builder: SpecBuilder, instructions: list[tuple[int, str, str]], froms: list[int],
                  source: str) -> None:
    """A multi-stage Dockerfile: the image is its last stage, built from its own base. A last stage that
    starts FROM an earlier stage or copies from one (COPY --from) needs that stage built first: refused."""
    if len(froms) < 2:
        return
    stages = {}
    for index, position in enumerate(froms[:-1]):
        line, _, rest = instructions[position]
        words = rest.split()
        stages[str(index)] = line
        if len(words) >= 3 and words[-2].lower() == "as":
            stages[words[-1].lower()] = line
    last_line, _, last_rest = instructions[froms[-1]]
    image = next((w for w in last_rest.split() if not w.startswith("--")), "")
    used = [(last_line, image)] if image.lower() in stages else []
    for line, word, rest in instructions[froms[-1] + 1:]:
        if word in ("COPY", "ADD"):
            used += [(line, option.split("=", 1)[1]) for option in rest.split() if option.startswith("--from=")]
    for line, stage in used:
        where = f"the build stage {stage} (line {stages[stage.lower()]})" if stage.lower() in stages \
            else f"the image {stage}"
        raise build_file_error(source, line, f"the last stage builds on {where}; a spec builds one image from one "
                               "base and cannot stage copies from another build",
                               f"build {stage} as its own image (apptainer build {stage}.sif with that stage's part of "
                               "the file), then use it: base: localimage:... in the spec, or copy the files out of it "
                               "and list them under files:")
    builder.note(instructions[froms[0]][0], f"multi-stage build: the image is the last stage (line {last_line}), "
                 "built from its own base and taking nothing from the earlier stages, which were not imported")


def _docker_workdir(builder: SpecBuilder, number: int, rest: str, workdir: str, source: str) -> str:
    """WORKDIR: the directory is created (as Docker does) and later RUNs start there (a cd before them)."""
    if "$" in rest:
        raise build_file_error(source, number, f"WORKDIR {rest} uses a variable that import cannot resolve "
                               f"({_SUBSTITUTED})", "write the directory into the WORKDIR line")
    path = posixpath.normpath(posixpath.join(workdir, rest.strip().strip("\"'")))
    builder.post.append(f"mkdir -p {shlex.quote(path)}")
    builder.note(number, f"WORKDIR {rest}: post steps after it run there; envrun runs commands in the caller's "
                         "directory (cd in the command if it needs this one)")
    return path


def _docker_env(builder: SpecBuilder, number: int, rest: str, base_env: dict[str, str], base_read: bool) -> None:
    """ENV A=x B=$A:y (or the old `ENV NAME value with spaces`), with the values' shell meaning kept
    (envbuild.convert.envassign; build arguments are substituted before, the base image's Env where it was read)."""
    if rest.strip() == f"PATH={VENV_PREFIX}/bin:$PATH":
        return  # envbuild's venv (an exported Dockerfile): implied by the spec
    name, _, value = rest.strip().partition(" ")
    if "=" not in name and value.strip() and '"' not in value:
        rest = f'{name}="{value.strip()}"'  # the old form: the rest of the line is the value
    for name, problem in carry_each_assignment(builder.env, rest, {}, base_env):  # Docker: every $NAME from before
        if not name:
            builder.note(number, f"ENV {rest[:80]} (not imported: {problem})")
            continue
        names = [assigned for assigned, _ in split_assignments(rest)]
        read = re.match(r"^\$(\w+) ", problem)
        base_value = "it sets none: empty" if base_read else "empty where it sets none; not read: see the note at FROM"
        if read and read[1] in names:
            problem = (f"${read[1]} is read from before this line, as Docker reads it, not from the {read[1]}= beside "
                       f"it: the base's value ({base_value}); write the value in its place")
        elif read and problem.startswith(f"${read[1]} is not set earlier in this file"):
            problem = f"${read[1]} is not set earlier in this file; Docker gives it the base's value ({base_value}); " \
                      "write the value in its place"
        others = "; the line's other assignments are" if len(names) > 1 else ""
        builder.note(number, f"ENV {rest[:80]}: {name} not imported ({problem}){others}")


def _docker_run(builder: SpecBuilder, number: int, rest: str, workdir: str, seen: dict[str, str | None], source: str,
                arguments: dict[str, str]) -> None:
    """RUN: its script in post, started in the WORKDIR and with the stage's ARGs in its environment (`arguments`),
    as Docker runs it; neither reaches the image's environment. The ARGs (`seen`: as the RUN sees them) are also
    written into the script where the shell expands them and the value reads the same written in (pip installs
    become python.packages only with their versions written); in a here-document script with its own #!
    interpreter, none is (the shell does not read it)."""
    if rest.startswith("["):
        try:
            words = json.loads(rest)
            rest = words[2] if words[:2] == ["/bin/sh", "-ec"] and len(words) == 3 else shlex.join(words)
        except (ValueError, TypeError):
            pass
    while rest.startswith("--"):
        option, _, rest = rest.partition(" ")
        builder.note(number, f"RUN {option} (BuildKit options are not carried)")
    cd = f"cd {shlex.quote(workdir)}\n" if workdir != "/" else ""
    exports = f"export {' '.join(f'{key}={shlex.quote(value)}' for key, value in arguments.items())}\n" \
        if arguments else ""
    if any(key.startswith(_PIP_SETTINGS) for key in arguments):
        cd, exports = exports + cd, ""  # a pip install after them stays in post, where it sees them
    script_only = re.match(r"^<<-?\s*['\"]?(\w+)['\"]?\s*\n", rest)
    if script_only:  # RUN <<EOF: the body is the script, run as written
        body = rest.split("\n", 1)[1].rsplit("\n", 1)[0]
        if body.startswith("#!"):  # Docker runs it with its #! interpreter: so does post, body kept as it is
            delimiter = script_only[1]
            body = f"{body.splitlines()[0][2:].strip()} <<'{delimiter}'\n{body}\n{delimiter}"
        else:  # the body is the shell script, whatever the quotes around its delimiter
            body = substitute_run_args(body, seen, source, number + 1)
        builder.post.append(exports + cd + body)
        return
    rest = substitute_run_args(rest, seen, source, number)
    before = len(builder.post)
    builder.shell(number - cd.count("\n"), cd + rest)  # the cd line stands before the RUN's own line
    if exports and len(builder.post) > before:  # what is left of the RUN after its pip installs were taken out
        builder.post[-1] = exports + builder.post[-1]


def _docker_copy_heredoc(builder: SpecBuilder, number: int, word: str, rest: str, workdir: str, source: str) -> None:
    """`COPY <<EOF /path` ... `EOF`: the file is written in post, its content byte for byte."""
    first, _, body = rest.partition("\n")
    heredocs = list(HEREDOC.finditer(first))
    words = split_words(HEREDOC.sub("", first))
    modes = [w.split("=", 1)[1] for w in words if w.startswith("--chmod=")]
    dests = [w for w in words if not w.startswith("--")]
    content = body.rsplit("\n", 1)[0]
    if len(heredocs) != 1 or len(dests) != 1 or len(modes) != len([w for w in words if w.startswith("--")]) \
            or (not heredocs[0][2] and "$" in content):
        raise build_file_error(source, number, f"{word} {first}: only a here-document with one destination, a quoted "
                               "delimiter or no $ in it, and no option but --chmod can be imported",
                               "write the file beside the Dockerfile and COPY it, or write it in a RUN step")
    delimiter = heredocs[0][3]
    dest = posixpath.normpath(posixpath.join(workdir, dests[0]))
    if dests[0].endswith("/"):
        dest = posixpath.join(dest, delimiter)  # Docker names the file after the delimiter
    lines = [f"mkdir -p {shlex.quote(posixpath.dirname(dest))}",
             f"cat > {shlex.quote(dest)} <<'{delimiter}'\n{content}\n{delimiter}"]
    lines += [f"chmod {shlex.quote(mode)} {shlex.quote(dest)}" for mode in modes]
    builder.post.append("\n".join(lines))


def _docker_copy(builder: SpecBuilder, number: int, word: str, rest: str, src_prefix: str, workdir: str,
                 source: str) -> None:
    words = json.loads(rest) if rest.startswith("[") else split_words(rest)
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
    is_dir = dest.endswith("/") or posixpath.basename(dest) in (".", "..")
    dest = posixpath.normpath(posixpath.join(workdir, dest)).replace("//", "/")  # relative to WORKDIR, as in Docker
    dest += "/" if is_dir and dest != "/" else ""
    for src in sources:
        target = dest
        if len(sources) > 1 or (dest.endswith("/") and not src.endswith("/")):
            target = dest.rstrip("/") + "/" + posixpath.basename(src.rstrip("/"))
        if word == "ADD" and re.search(r"\.(tar|tgz|gz|bz2|xz|zst)$", src):
            builder.note(number, f"ADD {src} (ADD unpacks archives; files[] copies them as they are)")
            continue
        add_file(builder, number, src, target, src_prefix, mode, build_file=source,
                 context=f"the directory of {source}", written=f"{word} {rest}")


# --- export -------------------------------------------------------------------------------------------------


def export_dockerfile(data: ExportInput) -> str:
    """The spec as a Dockerfile: a docker:// base as FROM (debootstrap: the Debian image of its suite; other bases
    are refused), each post command and test a RUN step."""
    spec = data.spec
    out = header_lines(data, f"build with: docker build -t {spec.name} -f {spec.name}.Dockerfile .")
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
    if spec.env_shell:
        raise UsageError("the spec's env_shell has no Dockerfile form: ENV sets values, nothing runs at a container's "
                         "start", "export a definition file instead (--format def), whose %environment runs it")
    out += [f"ENV {assignment}" for assignment in env_assignments(spec.env)]
    if venv_on_path(spec):
        out.append(f"ENV PATH={VENV_PREFIX}/bin:$PATH")
    out += [f"LABEL {json.dumps(key)}={json.dumps(value)}" for key, value in spec.labels.items()]
    out += [f"COPY {json.dumps([f.src, f.dest])}" for f in spec.files]
    out += [f"RUN chmod {f.mode} {shlex.quote(f.dest)}" for f in spec.files if f.mode]
    out += ["RUN " + line for line in install_lines(data)]
    out += [_docker_run_text(command) for command in spec.post]
    if spec.tests:
        out.append("# tests: envbuild runs these in the finished image; here they fail the build instead")
        out += [_docker_run_text(command) for command in spec.tests]
    return "\n".join(out) + "\n"


def _docker_run_text(command: str) -> str:
    if "\n" not in command:
        return f"RUN {command}"
    return "RUN " + json.dumps(["/bin/sh", "-ec", command])
