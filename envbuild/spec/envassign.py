"""The spec's `env:` as shell assignments, `NAME=word`, one per line, in the order written: the image's
environment script, an exported definition file's %environment and an exported Dockerfile's ENV lines all
say the same thing with them (Docker's ENV reads quotes and ${NAME:+word} as the shell does).

Every user value is one quoted word (shlex.quote). An edit adds to the variable's value with the ':' only
when the variable is set and not empty, so an unset variable gains no empty entry (which the shell and the
dynamic loader read as the current directory)."""

from __future__ import annotations

import shlex

from envbuild.spec.model import EnvEdit


def env_assignments(env: dict[str, str | EnvEdit]) -> list[str]:
    """`NAME=word` for every entry: a literal value as one quoted word, an edit as one line per side."""
    lines = []
    for name, value in env.items():
        if not isinstance(value, EnvEdit):
            lines.append(f"{name}={shlex.quote(value)}")
            continue
        if value.prepend is not None:
            lines.append(f'{name}={shlex.quote(value.prepend)}"${{{name}:+:${name}}}"')
        if value.append is not None:
            lines.append(f'{name}="${{{name}:+${name}:}}"{shlex.quote(value.append)}')
    return lines
