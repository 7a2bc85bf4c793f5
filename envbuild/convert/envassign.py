"""What an imported `NAME=value` assignment (a definition file's %environment, a Dockerfile's ENV) means as a
spec `env:` entry, with the value's shell meaning kept.

A spec value is literal, so `PATH=/opt/conda/bin:$PATH` must not be written as it stands: the assignment
becomes `{prepend: /opt/conda/bin}` (and `X=$X:/a` `{append: /a}`; `${X:-}` reads as `$X`, so
`X=/a:${X:-}` is a prepend too); a reference to a variable set earlier in the same file (an ENV, an ARG with
a value, an earlier %environment line) is replaced by its value; anything else (a variable the file does not
set, `$(...)`, `${X:-y}`) is a problem, which the importer turns into a note for that assignment alone (a Dockerfile's ENV: its
other assignments are carried) or keeps as
shell (a definition file's %environment, envbuild.convert.deffile) instead of writing `$VAR` into a literal
value. Pure: text in, entries or a reason out.
"""

from __future__ import annotations

import re
from collections import ChainMap
from collections.abc import Mapping
from dataclasses import dataclass

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
EnvEntry = str | dict[str, str]
_NOTHING: Mapping[str, str] = {}


@dataclass(frozen=True)
class _Ref:
    """`$NAME` / `${NAME}`, or the guarded joins the exports write: `${NAME:+:$NAME}` (after), `${NAME:+$NAME:}`."""

    name: str
    join: str = ""  # "", "before" (${N:+:$N}: ':' and N's value, if set), "after" (${N:+$N:}: N's value and ':')


class EnvProblem(ValueError):
    """Why an assignment cannot be carried into `env:` with its meaning."""


def split_assignments(text: str) -> list[tuple[str, list[str | _Ref]]]:
    """`A=x B="$A:y"` (shell quoting: single quotes literal, double quotes and bare text expand) as
    (name, parts) pairs; an EnvProblem for what is not plain assignments."""
    pairs: list[tuple[str, list[str | _Ref]]] = []
    position = 0
    while position < len(text):
        if text[position].isspace():
            position += 1
            continue
        if text[position] == "#":
            break  # a comment to the end of the line
        name = _NAME.match(text, position)
        if not name or text[name.end():name.end() + 1] != "=":
            raise EnvProblem("not a NAME=value assignment")
        parts, position = _word(text, name.end() + 1)
        pairs.append((name.group(), parts))
    return pairs


# A run of characters with no meaning to the shell, outside and inside double quotes: taken whole, not a character
# at a time (a 1 MB value of one part per character took quadratic time to join).
_PLAIN_RUN = re.compile(r"""[^\s'"\\$`]+""")
_QUOTED_RUN = re.compile(r"""[^"\\$`]+""")


def _word(text: str, position: int) -> tuple[list[str | _Ref], int]:
    parts: list[str | _Ref] = []
    quoted = False
    while position < len(text):
        run = (_QUOTED_RUN if quoted else _PLAIN_RUN).match(text, position)
        if run:
            parts.append(run.group())
            position = run.end()
            continue
        char = text[position]
        if char.isspace() and not quoted:
            break
        if char == "'" and not quoted:
            end = text.find("'", position + 1)
            if end < 0:
                raise EnvProblem("a ' without its closing quote")
            parts.append(text[position + 1:end])
            position = end + 1
        elif char == '"':
            quoted = not quoted
            position += 1
        elif char == "\\":
            following = text[position + 1:position + 2]
            if quoted and following not in ('"', "\\", "$", "`"):
                parts.append("\\")
            else:
                parts.append(following)
                position += 1
            position += 1
        elif char == "$":
            ref, position = _reference(text, position)
            parts.append(ref)
        elif char == "`":
            raise EnvProblem("a command substitution (`...`) is run at every start; a spec value cannot run commands")
        else:
            parts.append(char)
            position += 1
    if quoted:
        raise EnvProblem('a " without its closing quote')
    return parts, position


def _reference(text: str, position: int) -> tuple[str | _Ref, int]:
    plain = _NAME.match(text, position + 1)
    if plain:
        return _Ref(plain.group()), plain.end()
    if text.startswith("${", position):
        end = text.find("}", position)
        inner = text[position + 2:end] if end > 0 else ""
        if _NAME.fullmatch(inner):
            return _Ref(inner), end + 1
        if re.fullmatch(r"[A-Za-z_]\w*:?-", inner):  # ${NAME:-} and ${NAME-}: the value, or nothing, as $NAME
            return _Ref(inner.rstrip(":-")), end + 1
        guarded = re.fullmatch(r"([A-Za-z_]\w*):\+(:?)\$\{?(\w+)\}?(:?)", inner)
        if guarded and guarded[1] == guarded[3] and bool(guarded[2]) != bool(guarded[4]):
            return _Ref(guarded[1], "before" if guarded[2] else "after"), end + 1
        raise EnvProblem(f"${{{inner}}} (only $NAME, ${{NAME}} and ${{NAME:-}} can be carried)")
    if text.startswith("$(", position):
        raise EnvProblem("a command substitution $(...) is run at every start; a spec value cannot run commands")
    return "$", position + 1  # a lone $ (end of the value, `$ `) is literal to the shell too


def env_entry(name: str, parts: list[str | _Ref], earlier: Mapping[str, EnvEntry], known: Mapping[str, str],
              base: Mapping[str, str] = _NOTHING) -> EnvEntry | None:
    """The `env:` entry for `name=parts` after `earlier` entries of the same file, `known` values (build
    arguments) and `base`, the values the variables have before the file (a Dockerfile's FROM image's Env): a
    literal value, {prepend:, append:}, None when it changes nothing (`PATH=$PATH`); an EnvProblem where a
    part's value is not known here. A reference to `name` itself stays a prepend or append where it can (the
    image keeps the base's value at run time), else the base's value is written in. Only the names the value
    refers to are looked up (a copy of all earlier entries per assignment made a file of many ENV lines take
    quadratic time)."""
    try:
        return _env_entry(name, parts, earlier, known, base)
    except EnvProblem:
        if name not in base or name in earlier or not any(isinstance(p, _Ref) and p.name == name for p in parts):
            raise
    with_base: Mapping[str, EnvEntry] = ChainMap({name: base[name]}, dict(earlier))
    return _env_entry(name, parts, with_base, known, base)  # `FOO=${FOO}bar`: Docker's value, written in


def _env_entry(name: str, parts: list[str | _Ref], earlier: Mapping[str, EnvEntry], known: Mapping[str, str],
               base: Mapping[str, str]) -> EnvEntry | None:
    before = earlier.get(name)
    pieces: list[str | _Ref] = []  # literal text joined, between the references to `name` itself
    literal: list[str] = []
    for part in parts:
        if isinstance(part, _Ref) and part.name != name:
            value = _value_of(part.name, earlier, known, base)
            if value is None:
                why = "is added to, not set, in this file" if part.name in earlier else "is not set earlier in this file"
                raise EnvProblem(f"${part.name} {why}, so its value is not known here; write the value in its place")
            part = value
        elif isinstance(part, _Ref) and isinstance(before, str):  # this file set it: its value is known
            part = {"": before, "before": ":" + before if before else "", "after": before + ":" if before else ""}[part.join]
        if isinstance(part, str):
            literal.append(part)
            continue
        if literal:
            pieces.append("".join(literal))
            literal = []
        pieces.append(part)
    if literal:
        pieces.append("".join(literal))
    selves = [(index, part) for index, part in enumerate(pieces) if isinstance(part, _Ref)]
    if not selves:
        return "".join(p for p in pieces if isinstance(p, str))
    if len(selves) > 1:
        raise EnvProblem(f"${name} appears more than once; write it as prepend: and/or append:")
    at, self_ref = selves[0]
    head = "".join(p for p in pieces[:at] if isinstance(p, str))
    tail = "".join(p for p in pieces[at + 1:] if isinstance(p, str))
    edit = _edit(name, self_ref, head, tail)
    return _combined(before, edit)


def _value_of(name: str, earlier: Mapping[str, EnvEntry], known: Mapping[str, str],
              base: Mapping[str, str] = _NOTHING) -> str | None:
    """The value `name` has here: set earlier in the file (a literal value, or an edit of the base's value), else
    a known build argument, else the base's value."""
    entry = earlier.get(name)
    if isinstance(entry, str):
        return entry
    if entry is not None:
        return edited_value(entry, base[name]) if name in base else None
    return known.get(name, base.get(name))


def edited_value(edit: dict[str, str], value: str) -> str:
    """What {prepend:, append:} makes of `value`, as the environment script makes it (no empty entry)."""
    return ":".join(part for part in (edit.get("prepend"), value, edit.get("append")) if part)


def _edit(name: str, self_ref: _Ref, head: str, tail: str) -> dict[str, str]:
    if self_ref.join == "before" and not tail:
        prepend, append = head, ""
    elif self_ref.join == "after" and not head:
        prepend, append = "", tail
    elif not self_ref.join and (not head or head.endswith(":")) and (not tail or tail.startswith(":")):
        prepend, append = head[:-1], tail[1:]
    else:
        raise EnvProblem(f"${name} is joined to its value without ':'; only NAME=a:${name} (prepend) and "
                         f"NAME=${name}:b (append) can be carried")
    for what, value in (("prepend", prepend), ("append", append)):
        if value.startswith(":") or value.endswith(":"):
            raise EnvProblem(f"{what} {value!r} adds an empty entry (the current directory)")
    return {key: value for key, value in (("prepend", prepend), ("append", append)) if value}


def _combined(before: EnvEntry | None, edit: dict[str, str]) -> EnvEntry | None:
    """A second edit of the same variable after a first one: the newer prepend goes in front, the newer
    append behind, as the two lines would have done."""
    if not isinstance(before, dict):
        return edit or None
    prepend = ":".join(p for p in (edit.get("prepend"), before.get("prepend")) if p)
    append = ":".join(p for p in (before.get("append"), edit.get("append")) if p)
    return {key: value for key, value in (("prepend", prepend), ("append", append)) if value} or None


def apply_assignments(text: str, env: dict[str, EnvEntry], known: dict[str, str]) -> None:
    """Every assignment of `text` into `env` (the importer's entries so far), in order, a name set earlier on the
    same line seen, as the shell's `A=1 B=$A` does; an EnvProblem before any is made, so a line is carried whole
    or not at all."""
    changes: dict[str, EnvEntry] = {}
    after: Mapping[str, EnvEntry] = ChainMap(changes, env)  # the line's own assignments over the earlier ones
    for name, parts in split_assignments(text):
        entry = env_entry(name, parts, after, known)
        if entry is not None:
            changes[name] = entry
    env.update(changes)


def carry_assignments(env: dict[str, EnvEntry], text: str, known: dict[str, str]) -> str | None:
    """`apply_assignments` for an importer: None when the line was carried, else why not (for its note)."""
    try:
        apply_assignments(text, env, known)
    except EnvProblem as problem:
        return str(problem)
    return None


def carry_each_assignment(env: dict[str, EnvEntry], text: str, known: dict[str, str],
                          base: Mapping[str, str] = _NOTHING) -> list[tuple[str, str]]:
    """A Dockerfile ENV line into `env`, one assignment at a time, every `$NAME` taking its value from before the
    line (Docker's rule; `base`: the FROM image's Env, where it was read): those that can be carried are, and
    (name, why not) is returned for each of the others.
    One not carried leaves no older value of its name behind (the image's value is not that one any more). A line
    that is not NAME=value pairs at all is one ("", why)."""
    try:
        pairs = split_assignments(text)
    except EnvProblem as problem:
        return [("", str(problem))]
    changes: dict[str, EnvEntry | None] = {}
    left: list[tuple[str, str]] = []
    for name, parts in pairs:
        try:
            changes[name] = env_entry(name, parts, env, known, base)
        except EnvProblem as problem:
            changes[name] = None
            left.append((name, str(problem)))
            continue
        if changes[name] is None and name in env:  # NAME=$NAME: unchanged
            changes[name] = env[name]
    for name, entry in changes.items():
        if entry is None:
            env.pop(name, None)
        else:
            env[name] = entry
    return left

