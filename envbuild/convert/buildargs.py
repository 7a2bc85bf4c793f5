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
    """Every build argument of a definition file (a NAME=... line of `%arguments`, a `{{ NAME }}` anywhere) ->
    the line that first names it."""
    lines: dict[str, int] = {}
    section = re.compile(r"^[ \t]*%arguments\b(.*?)(?=^[ \t]*%\w|\Z)", re.I | re.M | re.S)
    for match in section.finditer(text):
        first = text.count("\n", 0, match.start(1)) + 1
        for offset, raw in enumerate(match[1].split("\n")):
            name = raw.strip().partition("=")[0].strip()
            if "=" in raw and not raw.strip().startswith("#") and ARG_NAME.match(name):
                lines.setdefault(name, first + offset)
    line, counted = 1, 0
    for match in _PLACEHOLDER.finditer(text):
        line += text.count("\n", counted, match.start())
        counted = match.start()
        lines[match[1]] = min(lines.get(match[1], line), line)
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
                           undeclared: tuple[str, str] | None = None) -> str:
    """`text` (an instruction's arguments: not shell) with the build arguments in `scope` (name -> value, None
    when declared without one) replaced. Other `$NAME`s are left for the environment. With `undeclared` (why,
    fix; `{name}` in them is the argument's name) every `$NAME` is a build argument (a FROM line): one not in
    `scope` is unset, and an error with that reason where it has no default."""

    def replace(match: re.Match[str]) -> str:
        if match[0].startswith("'"):
            return _SHELL_VAR.sub(replace, match[0][1:-1]).join("''")
        name = match[1] or match[4]
        if name not in scope and undeclared is None:
            return match[0]
        if name not in scope and not match[2] and undeclared is not None:
            why, fix = (part.format(name=name) for part in undeclared)
            raise build_file_error(source, line, f"build argument {name} has no value: it {why}", fix)
        return _expansion(match, scope.get(name), source, line, name)

    return _SHELL_VAR.sub(replace, text)


def _expansion(match: re.Match[str], value: str | None, source: str, line: int, name: str) -> str:
    """What the shell gives `match` ($NAME, ${NAME}, ${NAME:-word}, ${NAME-word}) for a build argument of
    `value` (None: declared without one, an error where no default word stands in)."""
    if match[2]:  # ${NAME:-word} / ${NAME-word}
        if value is None or (match[2] == ":-" and not value):
            return match[3]
        return value
    if value is None:
        raise _missing(source, line, name, f"or a default: ARG {name}=...")
    return value


# A value written in place of its $NAME means what the shell's expansion means in any context of a script (bare
# word, double quotes, a here-document): no blanks (an assignment's value is not split), quotes, globs, `=`
# (a first word that becomes an assignment), `~`, `$`, `\\` or `#`. Another value is left to the shell, which has
# it in the RUN's environment.
_INERT = re.compile(r"^[A-Za-z0-9_./:+,@%-]*$")
_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?-)([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")
_SCRIPT_HEREDOC = re.compile(r"<<(-?)[ \t]*(\\?)(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\3")
_WORD_START = " \t\n;&|()"
_ESCAPED_OR_REFERENCE = re.compile(r"\\.|" + _REFERENCE.pattern, re.DOTALL)
_PLAIN = re.compile(r"[^\\$`\"'#()<\n]+")  # nothing in it starts a quote, an expansion or a here-document


def substitute_run_args(script: str, scope: Mapping[str, str | None], source: str, line: int) -> str:
    """A RUN's shell script with its build arguments written in where the shell expands them: not in single
    quotes, a comment, after a backslash or in the body of a quoted here-document (`<<'EOF'`, `<<"EOF"`,
    `<<\\EOF`), which the shell leaves as written; and only where the value means the same written in
    (see _INERT), since the RUN has the arguments in its environment anyway. An argument without a value
    used where the shell expands it is an error naming it, as in substitute_docker_args."""
    if not scope:
        return script
    out: list[str] = []
    nesting: list[str] = []  # open '"', '`' and '(' (of $( or a ( inside one), innermost last
    heredocs: list[tuple[str, bool, bool]] = []  # (delimiter, quoted, <<-) read after the next newline
    position, end = 0, len(script)
    while position < end:
        plain = _PLAIN.match(script, position)
        if plain:
            out.append(plain.group())
            position = plain.end()
            continue
        char = script[position]
        quoted = bool(nesting) and nesting[-1] == '"'
        if char == "\\":
            out.append(script[position:position + 2])
            position += 2
        elif char == "$":
            reference = _REFERENCE.match(script, position)
            if reference:
                out.append(_written_in(reference, scope, source, line))
                position = reference.end()
            else:  # $( opens a command substitution; $$, $?, $1 ... are not build arguments
                opens = script.startswith("$(", position)
                nesting += ["("] if opens else []
                out.append(script[position:position + 1 + opens])
                position += 1 + opens
        elif char == "`":
            if nesting and nesting[-1] == "`":
                nesting.pop()
            else:
                nesting.append("`")
            out.append(char)
            position += 1
        elif char == '"':
            if quoted:
                nesting.pop()
            else:
                nesting.append('"')
            out.append(char)
            position += 1
        elif quoted:
            out.append(char)
            position += 1
        elif char == "'":
            close = script.find("'", position + 1)
            stop = end if close < 0 else close + 1
            out.append(script[position:stop])
            position = stop
        elif char == "#" and (position == 0 or script[position - 1] in _WORD_START):
            stop = script.find("\n", position)
            stop = end if stop < 0 else stop
            out.append(script[position:stop])
            position = stop
        elif char == "(" or (char == ")" and nesting and nesting[-1] == "("):
            if char == "(" and nesting and nesting[-1] == "(":
                nesting.append("(")
            elif char == ")":
                nesting.pop()
            out.append(char)
            position += 1
        elif script.startswith("<<<", position):  # a here-string: a word, read as any other
            out.append("<<<")
            position += 3
        elif script.startswith("<<", position):
            heredoc = _SCRIPT_HEREDOC.match(script, position)
            if heredoc:
                heredocs.append((heredoc[4], bool(heredoc[2] or heredoc[3]), heredoc[1] == "-"))
                out.append(heredoc.group())
                position = heredoc.end()
            else:
                out.append("<<")
                position += 2
        elif char == "\n" and heredocs:
            out.append(char)
            position = _heredoc_bodies(script, position + 1, heredocs, out, scope, source, line)
            heredocs = []
        else:
            out.append(char)
            position += 1
    return "".join(out)


def _heredoc_bodies(script: str, position: int, heredocs: list[tuple[str, bool, bool]], out: list[str],
                    scope: Mapping[str, str | None], source: str, line: int) -> int:
    """The bodies of `heredocs`, from `position` on, into `out`: a quoted one as written, another with its build
    arguments written in where the shell expands them (not after a backslash); the position after them."""
    for delimiter, quoted, strips_tabs in heredocs:
        start = position
        while position < len(script):
            stop = script.find("\n", position)
            stop = len(script) if stop < 0 else stop + 1
            text = script[position:stop].rstrip("\n")
            if (text.lstrip("\t") if strips_tabs else text) == delimiter:
                break
            position = stop
        body = script[start:position]
        out.append(body if quoted else _ESCAPED_OR_REFERENCE.sub(
            lambda match: match[0] if match[0].startswith("\\") else _written_in(match, scope, source, line), body))
        if position < len(script):  # the delimiter's line
            stop = script.find("\n", position)
            stop = len(script) if stop < 0 else stop + 1
            out.append(script[position:stop])
            position = stop
    return position


def _written_in(reference: re.Match[str], scope: Mapping[str, str | None], source: str, line: int) -> str:
    """A `$NAME` the shell expands: the build argument's value where writing it in means the same, else as it is."""
    name = reference[1] or reference[4]
    if name not in scope:
        return reference[0]
    value = _expansion(reference, scope[name], source, line, name)
    return value if _INERT.match(value) else reference[0]


def check_image_reference(image: str, source: str, line: int, written: str) -> None:
    """An image reference with an empty name or tag (`FROM image:` after substitution) is always an error."""
    name_part = image.rsplit("/", 1)[-1]
    if not image or image.endswith(":") or ":@" in name_part or name_part.startswith(":"):
        raise build_file_error(source, line, f"{written} gives the image reference '{image}', whose name or tag is empty",
                               "give the build argument a value (envbuild import --build-arg NAME=...) or write the tag")
