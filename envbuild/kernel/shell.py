"""`envrun shell`: the program an interactive shell in the image runs, through envrun's launch path. Pure.

The shell starts after envrun's container shim (envbuild.launch.shims: $WITH_CONDA, the overlays on PATH),
so it has exactly the environment `envrun python` has. It is bash when the image has it, else sh, and like
`apptainer shell` it reads no ~/.bashrc (--norc): the host's rc files load modules and set paths for the
host, not for the image. Its prompt names the image, set by `env` after apptainer's own environment
scripts, which set PROMPT_COMMAND to put back their own PS1 ("Apptainer> "): `env -u` drops it. A terminal in
the container cannot be taken for the host's.
"""

from __future__ import annotations

import os

SHELL_NAME = "envrun-shell"  # $0 of the boot script, shown by ps

# $1: the prompt (bash's escapes; sh, which has none, gets its part up to the first "]"); $2 (optional): a
# command for -c. `exec` throughout: the shell is the container's process.
SHELL_BOOT = (
    'prompt=$1; shift\n'
    'if command -v bash >/dev/null 2>&1; then\n'
    '    if [ $# -gt 0 ]; then exec bash -c "$1"; fi\n'
    '    exec env -u PROMPT_COMMAND PS1="$prompt" bash --norc -i\n'
    'fi\n'
    'if [ $# -gt 0 ]; then exec sh -c "$1"; fi\n'
    'exec env -u PROMPT_COMMAND PS1="${prompt%%]*}] \\$ " sh -i\n'
)


def prompt_for(image: str) -> str:
    """`[envrun IMAGE] user@host:dir$ ` in bash's prompt escapes; backslashes, `$` and backquotes in the image's
    name are taken literally."""
    stem = os.path.basename(image)
    stem = stem[: -len(".sif")] if stem.endswith(".sif") else stem
    literal = stem.replace("\\", "\\\\").replace("$", "\\$").replace("`", "\\`")
    return f"[envrun {literal}] \\u@\\h:\\w\\$ "


def shell_command(image: str, command: str | None) -> list[str]:
    """The command envrun runs in the image: an interactive shell, or `bash -c COMMAND` (sh -c without bash)."""
    return ["sh", "-c", SHELL_BOOT, SHELL_NAME, prompt_for(image), *((command,) if command is not None else ())]
