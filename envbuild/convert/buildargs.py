"""Build arguments of imported build files: `%arguments` / `{{ NAME }}` in definition files, `ARG` / `${NAME}` in
Dockerfiles, and `envbuild import --build-arg NAME=VALUE` for both.

A spec has no build arguments, so import substitutes them where the file uses them; an argument used without
a value is an error naming it and the option, located at the line that uses it (never a literal placeholder or
an empty image tag in the spec)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from envbuild.shared.errors import UsageError

ARG_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
# $NAME, ${NAME}, ${NAME:-word}, ${NAME-word}; a single-quoted string is matched first so that it is left alone.
_SHELL_VAR = re.compile(r"'[^']*'|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?-)([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def build_file_error(source: str, line: int, message: str, fix: str) -> UsageError:
    """An error located at a line of the definition file or Dockerfile being imported."""
    return UsageError(f"{source}:{line}: {message}", fix)


def parse_build_args(pairs: Iterable[str]) -> dict[str, str]:
    """`--build-arg NAME=VALUE` options -> {NAME: VALUE}."""
    result: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not ARG_NAME.match(name):
            raise UsageError(f"--build-arg {pair}: not NAME=VALUE",
                             "write it as --build-arg NAME=VALUE, e.g. --build-arg PYTHON_VERSION=3.11")
        result[name] = value
    return result


def refuse_unknown_build_args(build_args: Mapping[str, str], known: Mapping[str, int], source: str, *,
                              kind: str) -> None:
    """A `--build-arg` for an argument the file does not have (`known`: its build arguments -> the line that
    declares or first uses each; `kind`: what the file calls one, 'ARG' or 'build argument'). Docker and Apptainer
    warn and build without it; import refuses, since the user meant the value to change something. The value is
    not shown: it may be a secret."""
    unknown = sorted(set(build_args) - set(known))
    if not unknown:
        return
    listed = ", ".join(f"{key} (line {line})" for key, line in sorted(known.items(), key=lambda item: item[1]))
    verb = "declares no ARG" if kind == "ARG" else "uses no build argument"
    raise UsageError(f"{source}: --build-arg {' and --build-arg '.join(unknown)}: the file {verb} "
                     f"{' or '.join(unknown)}, so the value would change nothing; the file's {kind}s: {listed or 'none'}",
                     f"drop --build-arg {unknown[0]}, or correct its name to one of the file's {kind}s")


def placeholder_names(text: str) -> set[str]:
    return set(_PLACEHOLDER.findall(text))


def _missing(source: str, line: int, name: str, where: str) -> UsageError:
    return build_file_error(source, line, f"build argument {name} is used but has no value",
                            f"give it one: envbuild import --build-arg {name}=... ({where})")


def def_argument_defaults(text: str) -> dict[str, str]:
    """NAME=VALUE lines of the `%arguments` sections of a definition file."""
    defaults: dict[str, str] = {}
    inside = False
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped.startswith("%"):
            inside = stripped[1:].split(maxsplit=1)[0].lower() == "arguments" if stripped[1:].strip() else False
            continue
        if inside and stripped and not stripped.startswith("#"):
            name, sep, value = stripped.partition("=")
            if sep and ARG_NAME.match(name.strip()):
                defaults[name.strip()] = value.strip().strip("\"'")
    return defaults


def def_build_arguments(text: str) -> dict[str, int]:
    """Every build argument of a definition file (a `{{ NAME }}` anywhere, a NAME=... line of `%arguments`) ->
    the line that first names it."""
    lines: dict[str, int] = {}
    inside = False
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if stripped.startswith("%") and stripped[1:].strip():
            inside = stripped[1:].split(maxsplit=1)[0].lower() == "arguments"
            continue
        names = list(_PLACEHOLDER.findall(raw))
        if inside and stripped and not stripped.startswith("#"):
            name = stripped.partition("=")[0].strip()
            if ARG_NAME.match(name):
                names.append(name)
        for name in names:
            lines.setdefault(name, number)
    return lines


def substitute_def_placeholders(text: str, build_args: Mapping[str, str], source: str) -> str:
    """The definition file with every `{{ NAME }}` replaced (build args over `%arguments` defaults), as Apptainer
    does before it reads the file; `%arguments` sections are left as they are."""
    values = {**def_argument_defaults(text), **build_args}
    lines = text.splitlines(keepends=True)
    inside = False
    for index, raw in enumerate(lines):
        stripped = raw.strip()
        if stripped.startswith("%") and stripped[1:].strip():
            inside = stripped[1:].split(maxsplit=1)[0].lower() == "arguments"
        if inside:
            continue

        def value_of(match: re.Match[str], line: int = index + 1, comment: bool = stripped.startswith("#")) -> str:
            if match[1] in values:
                return values[match[1]]
            if comment:
                return match[0]  # a commented-out line is not read: no error for it
            raise _missing(source, line, match[1], f"or a default in the %arguments section: {match[1]}=...")

        lines[index] = _PLACEHOLDER.sub(value_of, raw)
    return "".join(lines)


def substitute_docker_args(text: str, scope: Mapping[str, str | None], source: str, line: int, *,
                           shell_script: bool = False, undeclared: tuple[str, str] | None = None) -> str:
    """`text` with the build arguments in `scope` (name -> value, None when declared without one) replaced.
    Other `$NAME`s are left for the shell or the environment; with `shell_script`, single-quoted strings are left
    alone too, as the shell would. With `undeclared` (why, fix; `{name}` in them is the argument's name) every
    `$NAME` is a build argument (a FROM line): one not in `scope` is unset, and an error with that reason where
    it has no default."""

    def replace(match: re.Match[str]) -> str:
        if match[0].startswith("'"):
            return match[0] if shell_script else _SHELL_VAR.sub(replace, match[0][1:-1]).join("''")
        name = match[1] or match[4]
        if name not in scope and undeclared is None:
            return match[0]
        value = scope.get(name)
        if value is None and not match[2] and name not in scope and undeclared is not None:
            why, fix = (part.format(name=name) for part in undeclared)
            raise build_file_error(source, line, f"build argument {name} has no value: it {why}", fix)
        if match[2]:  # ${NAME:-word} / ${NAME-word}
            if value is None or (match[2] == ":-" and not value):
                return match[3]
            return value
        if value is None:
            raise _missing(source, line, name, f"or a default: ARG {name}=...")
        return value

    return _SHELL_VAR.sub(replace, text)


def check_image_reference(image: str, source: str, line: int, written: str) -> None:
    """An image reference with an empty name or tag (`FROM image:` after substitution) is always an error."""
    name_part = image.rsplit("/", 1)[-1]
    if not image or image.endswith(":") or ":@" in name_part or name_part.startswith(":"):
        raise build_file_error(source, line, f"{written} gives the image reference '{image}', whose name or tag is empty",
                               "give the build argument a value (envbuild import --build-arg NAME=...) or write the tag")
