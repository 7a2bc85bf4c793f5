"""The base of every validated file envbuild reads (spec, lock, recipe, envrun config), and the version
check they share. A shared leaf: imports pydantic, so only modules that validate import it."""

from __future__ import annotations

from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """Unknown keys are errors: a typo like `pakages:` must not be silently ignored. Frozen: a
    validated document is read, never changed."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def check_version(value: str, what: str = "a version number") -> str:
    """`value` when it is a PEP 440 version; a ValueError that says it is not `what` otherwise."""
    try:
        Version(value)
    except InvalidVersion:
        raise ValueError(f"{value!r} is not {what}") from None
    return value
