"""User values in the shell scripts envbuild and envrun write (batch scripts, run wrappers, the `--dry-run`
script, the image's environment script): the one place that decides how a value lands in a script.

- `script_word`: a value as one shell word, quoted (shlex.quote), after `refuse_control` has refused the
  characters that have no business in one (a newline would end the script line in every tool that reads
  the script line by line: sbatch's #SBATCH reader, a comment, `--check`).
- `env_name`: a variable name, checked against the POSIX rule (fullmatch, so "FOO\\n" is refused too).
- `comment`: text for a `#` line, with control characters written as escapes, so no value can end the
  comment and start a live line.

A shared leaf: it imports nothing of envbuild but the other leaves, and nothing heavy (envrun's launch path
writes its `--dry-run` script with it)."""

from __future__ import annotations

import re
from shlex import quote

from envbuild.shared.envnames import ENV_NAME_FIX, is_env_name
from envbuild.shared.errors import UsageError
from envbuild.shared.terminaltext import printable

# C0 controls but tab, DEL, C1 controls, and lone surrogates (argv bytes that were not UTF-8)
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\ud800-\udfff]")
_NAMES = {"\n": "a newline", "\r": "a carriage return", "\x00": "a NUL byte"}


def refuse_control(value: str, where: str) -> str:
    """`value` unchanged, or a UsageError naming `where` (the option or field it came from) and the character."""
    found = _CONTROL.search(value)
    if found is None:
        return value
    char = found.group()
    what = _NAMES.get(char) or ("bytes that are not UTF-8" if "\ud800" <= char <= "\udfff"
                                else f"the control character {printable(char)}")
    raise UsageError(f"{where}: {shown(value)} holds {what} (at character {found.start() + 1})",
                     f"give {where} without it: a generated script takes each value on one line, as written")


def script_word(value: str, where: str) -> str:
    """`value` as one shell word that reaches the program byte for byte."""
    return quote(refuse_control(value, where))


def env_name(name: str, where: str) -> str:
    """`name` unchanged when it is a variable name the shell can export, else a UsageError."""
    if is_env_name(name):
        return name
    raise UsageError(f"{where}: {shown(name)} is not a variable name", ENV_NAME_FIX)


def shown(value: str, limit: int = 120) -> str:
    """A value quoted for a message: escaped, cut after `limit` characters."""
    cut = value if len(value) <= limit else value[:limit] + "..."
    return f"'{printable(cut)}'"


def comment(text: str) -> str:
    """A `# text` line: control characters (a newline above all) written as escapes."""
    return "# " + printable(text, keep_tabs=True) if text else "#"
