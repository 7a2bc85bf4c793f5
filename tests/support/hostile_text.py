"""Hostile strings for the script-injection property tests (issue 28), and the stand-in programs that
record what a generated script ran.

A seeded generator over a hostile alphabet rather than hypothesis: the cases are the same on every run and
every machine (a failure names its string, and `HOSTILE_SEED=N` replays another draw), no test dependency is
added for CI's fresh machines, and shrinking buys little when each atom is already one shell feature.

Every string that could run a command runs `touch PWNED` (relative: the tests run scripts in a scratch
directory and look for a file of that name anywhere under it)."""

from __future__ import annotations

import os
import random
import stat
from pathlib import Path

MARKER = "PWNED"

# One shell feature each: expansions, quotes, operators, globs, redirections, option-like words, text that
# is not ASCII (a right-to-left override among it), Slurm's % patterns.
ATOMS = (
    f"$(touch {MARKER})", f"`touch {MARKER}`", f"; touch {MARKER}", f"&& touch {MARKER}", f"| touch {MARKER}",
    f"$(touch${{IFS}}{MARKER})", f"<(touch {MARKER})", f">{MARKER}", f"\\`touch {MARKER}\\`",
    "'", '"', "\\", "\\'", "'\\''", '"$(', "*", "?", "[a-z]", "**/", "~", "~root", "${IFS}", "$IFS", "$HOME",
    "$0", "$@", "$$", "$((1+1))", "${x:-y}", "!", "!!", "#", "# ", " ", "  ", "\t", "-", "--", "-n", "-e",
    "--help", "%j", "%x", "%%", "{", "}", "{a,b}", "=", ":", ",", "&", ";", "|", "(", ")", "<", ">", "é",
    "日本語", "\U0001f4a5", "\u202e", "\u00a0", "\\n", "x", "data", "/", "..", ".",
)

# Whole values worth a case of their own.
SPECIAL = ("", "-", "--", "-rf", "--bind=/", "~", "*", f"$(touch {MARKER})", f"`touch {MARKER}`", "'", '"',
           "\\", "${IFS}", "x" * 4000, "é\u202edata", " leading and trailing ", "a'b\"c\\d$e`f")

NEWLINES = ("a\nb", "\n", f"x\n touch {MARKER}", "trailing\n", "cr\rlf")


def hostile_strings(count: int = 60) -> list[str]:
    """SPECIAL, then `count` seeded random strings of 1-6 atoms."""
    draw = random.Random(int(os.environ.get("HOSTILE_SEED", "28")))
    made = [("".join(draw.choice(ATOMS) for _ in range(draw.randint(1, 6)))) for _ in range(count)]
    return list(dict.fromkeys([*SPECIAL, *made]))


def file_name(text: str, fallback: str = "name") -> str:
    """`text` as one path component (no `/`, not empty, `.` or `..`), for names that must be files."""
    name = text.replace("/", "_")[:200]
    return fallback if name in ("", ".", "..") else name


# A stand-in for srun, apptainer, envrun: appends its name, argv (NUL-separated) and the variables named in
# $RECORD_ENV to $RECORD (one record per call, each ended by a record separator), then for srun runs its
# command (the options dropped) so that staging and cleanup really happen.
STUB = r"""#!/bin/sh
{
  printf '%s\0' "${0##*/}" "$@"
  for name in $RECORD_ENV; do eval "printf '%s=%s\0' \"\$name\" \"\${$name-<unset>}\""; done
  printf '\036'
} >> "$RECORD"
if [ "${0##*/}" = srun ]; then
  while [ $# -gt 0 ]; do case $1 in --*) shift ;; *) break ;; esac; done
  exec "$@"
fi
"""


def install_stubs(directory: Path, names: tuple[str, ...]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        path = directory / name
        path.write_text(STUB)
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return directory


def read_records(path: Path) -> list[list[str]]:
    """The stand-ins' calls in order: [program, *argv, NAME=value...] each (surrogateescape: bytes kept)."""
    if not path.exists():
        return []
    raw = path.read_bytes()
    return [[field.decode("utf-8", "surrogateescape") for field in record.split(b"\0")[:-1]]
            for record in raw.split(b"\x1e") if record]


def marker_files(root: Path) -> list[Path]:
    return [path for path in root.rglob("*") if path.name == MARKER]
