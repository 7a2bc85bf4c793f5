"""Environment variables that an image's start scripts (/.singularity.d/env/*.sh) set, read without
running them: `NAME=value` and `export NAME=value` lines, in the order the runtime sources the scripts.
Values are kept as written (`$PATH` is not expanded), which is what comparing two images needs."""

from __future__ import annotations

import re
import shlex

_ASSIGNMENT = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*?)\s*$")
# The scripts apptainer writes into every image; `inspect` lists them without printing their text.
STOCK_SCRIPTS = frozenset({"01-base.sh", "94-appsbase.sh", "95-apps.sh", "99-base.sh", "99-runtimevars.sh"})


def _unquote(value: str) -> str:
    try:
        words = shlex.split(value, comments=True)
    except ValueError:
        return value
    return words[0] if len(words) == 1 else value


def exported_variables(scripts: list[tuple[str, str]]) -> dict[str, str]:
    """NAME -> value from (script name, text) pairs; a later script overrides an earlier one, as at run
    time. apptainer's own scripts are left out: they set the runtime's plumbing (PS1, SCIF_*, the
    user's PATH), the same in every image of an apptainer version, and would only blur a comparison."""
    variables: dict[str, str] = {}
    for name, text in sorted(scripts):
        if name in STOCK_SCRIPTS:
            continue
        for line in text.splitlines():
            match = _ASSIGNMENT.match(line)
            if match:
                variables[match.group(1)] = _unquote(match.group(2))
    return variables
