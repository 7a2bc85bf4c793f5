"""What an environment variable's name may be, in every file envbuild and envrun read (a spec's `env:`,
envrun's config, a project's envrun.yaml, a recipe): letters, digits and `_`, not starting with a digit.

A name becomes a word of a shell script (`export NAME=...` in `envrun --dry-run`, an image's environment
script) and a process's environment, so anything else (a `;`, a newline, a `=`) is refused where it is
read, with the file and line, never carried on to where it would be a command. And how a value is written
when it goes into a container as APPTAINERENV_NAME / SINGULARITYENV_NAME (envrun's launch, envbuild's build
steps): the runtime evaluates those values as shell text, so they are escaped to arrive as written.
Light: no `re` (envrun's start-up path checks names read back from its cache).
"""

from __future__ import annotations

# For the schemas (re.fullmatch: `$` would also match before a trailing newline) and JSON schema output.
ENV_NAME_PATTERN = r"[A-Za-z_][A-Za-z0-9_]*"
ENV_NAME_RULE = "letters, digits and _, not starting with a digit"
ENV_NAME_FIX = f"write the name with {ENV_NAME_RULE} (e.g. HF_HOME)"


def is_env_name(name: object) -> bool:
    """Whether `name` matches ENV_NAME_PATTERN in full. For ASCII text, str.isidentifier() is exactly that
    pattern (keywords included), and costs envrun no `re` import."""
    return type(name) is str and name.isascii() and name.isidentifier()


def env_name_problem(name: object) -> str | None:
    """Why `name` is not a variable name (shown with repr, so a newline or an escape is visible), or None."""
    if is_env_name(name):
        return None
    return f"{name!r} is not a valid environment variable name ({ENV_NAME_RULE})"


def shell_evaluated_literally(value: str) -> str:
    """`value` written so that apptainer's evaluation of APPTAINERENV_ values (shell expansion as in a here-
    document: $, ` and \\ are special, quotes are not) gives back exactly `value`."""
    return value.replace("\\", "\\\\").replace("$", "\\$").replace("`", "\\`")
