"""Warnings for secrets a spec would bake into its image: every value of `env:` is written into the image's
environment script, and the whole spec text into /.envbuild/spec.yaml, readable by everyone who can read the
image file. A warning, not an error: the value may be a placeholder, and the user decides."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from envbuild.errors import SpecProblem
from envbuild.host.secrets import secret_reason
from envbuild.yamlsource import FieldPath, LocatedDocument

_ENV_FIX = ("leave it out of the spec and set it where the job runs: apptainer passes the host's environment "
            "into the container (export {name}=... before envrun, or in the job script, from a file only you can read)")
_VALUE_FIX = ("leave the credentials out of the spec: an index that needs them goes into the host's pip configuration "
              "(pip.conf, PIP_EXTRA_INDEX_URL), which builds use without writing it into the image, its log or a lock file")


def secret_warnings(document: LocatedDocument) -> list[SpecProblem]:
    """One located warning per value of the spec that looks like a secret (see envbuild.host.secrets)."""
    warnings = []
    for loc, name, value in _values(document.data, ()):
        reason = secret_reason(name, value)
        if reason is None:
            continue
        pos = document.position_of(loc)
        field = "".join(f"[{part}]" if isinstance(part, int) else (f".{part}" if i else str(part)) for i, part in enumerate(loc))
        baked = "the image's environment script and /.envbuild/spec.yaml" if loc[:1] == ("env",) else "/.envbuild/spec.yaml"
        fix = _ENV_FIX.format(name=name) if loc[:1] == ("env",) and name else _VALUE_FIX
        warnings.append(SpecProblem(document.file, pos.line, pos.column, field,
                                    f"this value {reason}: it would be written into {baked}, readable by anyone "
                                    "who can read the image", fix))
    return warnings


def _values(data: Any, loc: FieldPath) -> Iterator[tuple[FieldPath, str | None, str]]:
    """(where, variable name or None, text) of every scalar in the document; `env:` and `labels:` entries
    carry their key as the name."""
    if isinstance(data, dict):
        for key, value in data.items():
            named = len(loc) == 1 and loc[0] in ("env", "labels") and isinstance(key, str)
            if named and not isinstance(value, (dict, list)):
                yield (*loc, key), key, "" if value is None else str(value)
            else:
                yield from _values(value, (*loc, key))
    elif isinstance(data, list):
        for index, item in enumerate(data):
            yield from _values(item, (*loc, index))
    elif isinstance(data, str):
        yield loc, None, data
