"""`python.lock_target` in a spec: the base's Python and glibc, for a lock made where the base cannot run."""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, field_validator

from envbuild.strictmodel import StrictModel


class LockTargetFacts(StrictModel):
    """The base image's Python and C library, so that `envbuild lock` can resolve for a system of another
    architecture (aarch64 on an x86_64 machine) without running the base; the architecture is the recipe's."""

    python: str = Field(description="the base's Python version, e.g. 3.12 or 3.12.3 (python3 --version in the base)")
    glibc: str = Field(description="the base's glibc version, e.g. 2.39 (ldd --version in the base)")

    @field_validator("python", "glibc", mode="before")
    @classmethod
    def _numbers_as_text(cls, value: Any) -> Any:
        # YAML reads `python: 3.12` as a float; keep what the user meant (an unquoted 3.10 reads as 3.1).
        if isinstance(value, float):
            raise ValueError(f"{value} reads as a number in YAML; quote it, e.g. '{value}'")
        return value

    @field_validator("python")
    @classmethod
    def _valid_python(cls, value: str) -> str:
        if not re.match(r"^3\.\d+(\.\d+)?$", value):
            raise ValueError(f"{value!r} is not a Python 3 version (write e.g. '3.12')")
        return value

    @field_validator("glibc")
    @classmethod
    def _valid_glibc(cls, value: str) -> str:
        if not re.match(r"^2\.\d+$", value):
            raise ValueError(f"{value!r} is not a glibc version (write e.g. '2.39')")
        return value
