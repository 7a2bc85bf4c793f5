"""The lock file on disk: rendering a Lock to YAML text and reading it back, strictly validated (pydantic)."""

from __future__ import annotations

import shlex
from typing import Annotated, Any, Literal

import yaml
from packaging.utils import canonicalize_name
from pydantic import AfterValidator, ConfigDict, Field, ValidationError, field_validator

from envbuild import __version__
from envbuild.envspec.specmodel import NAME_PATTERN
from envbuild.lock.lockmodel import DIGEST_PATTERN, HASH_PATTERN, LOCK_FORMAT_VERSION, Lock, LockedPackage, LockInputs, LockTarget
from envbuild.shared.errors import EnvbuildError
from envbuild.shared.strictmodel import StrictModel, check_version

_REGENERATE_HINT = "lock files are written by envbuild, not by hand: run `envbuild lock SPEC` again to rewrite it"


def render_lock(lock: Lock, *, spec_path_for_comment: str) -> str:
    """The lock file's text: the same Lock always gives the same bytes (sorted, no timestamps)."""
    spec = shlex.quote(" ".join(spec_path_for_comment.splitlines()))
    header = [
        f"# envbuild lock file for {spec}: every Python package of the environment pinned to one",
        f"# version, with the hashes of its files, for Python {lock.target.python} on {lock.target.platform}.",
        "# Written by envbuild; change the spec, not this file.",
        "#",
        f"# After editing the spec (keeps locked versions where it can):  envbuild lock {spec}",
        f"# Upgrade every package:                                        envbuild lock --upgrade {spec}",
        f"# Upgrade one package:                                          envbuild lock --upgrade-package NAME {spec}",
        f"# Build with exactly these versions:                            envbuild build {spec} --locked",
    ]
    document = {
        "lock-format": LOCK_FORMAT_VERSION,
        "spec": lock.spec_name,
        "inputs": {
            "requirements": list(lock.inputs.requirements),
            "base": lock.inputs.base,
            "system": lock.inputs.system,
            "torch-index": lock.inputs.torch_index,
            "interpreter": lock.inputs.interpreter,
            # Only where it is not envbuild's own venv: the locks written before the field read the same.
            **({"python-target": lock.inputs.python_target} if lock.inputs.python_target != "envbuild-venv" else {}),
        },
        "target": {"python": lock.target.python, "platform": lock.target.platform},
        "base-digest": lock.base_digest,
        "recipe-digest": lock.recipe_digest,
        "resolver": lock.resolver,
        "packages": {
            package.name: {"version": package.version, "hashes": sorted(package.hashes)}
            for package in sorted(lock.packages, key=lambda package: package.name)
        },
        # The base's distributions kept as they are (its torch): not installed by the lock, checked by verify.
        **({"kept-from-base": dict(pin.split("==", 1) for pin in lock.kept)} if lock.kept else {}),
    }
    # safe_dump quotes every string that would read back as another type (1.10, 2.0, null, yes), so
    # versions stay strings; a wide line keeps long requirement strings on one line.
    body = yaml.safe_dump(document, sort_keys=False, default_flow_style=False, allow_unicode=True, width=1 << 16)
    return "\n".join(header) + "\n" + body


def _canonical_name(name: str) -> str:
    if canonicalize_name(name) != name:
        raise ValueError(f"{name!r} is not a normalised package name (envbuild writes {canonicalize_name(name)!r})")
    return name


class _LockModel(StrictModel):
    # strict: a version that YAML read as a number (hand-edited `version: 1.10`) is an error, not 1.1.
    model_config = ConfigDict(strict=True)


class _PackageEntry(_LockModel):
    version: str
    hashes: list[Annotated[str, Field(pattern=HASH_PATTERN)]] = Field(min_length=1)

    @field_validator("version")
    @classmethod
    def _pep440(cls, value: str) -> str:
        return check_version(value)


class _InputsEntry(_LockModel):
    requirements: list[str]
    base: str
    system: str
    torch_index: str | None = Field(alias="torch-index")
    interpreter: str
    python_target: Literal["envbuild-venv", "venv-over-base", "base"] = Field(default="envbuild-venv", alias="python-target")


class _TargetEntry(_LockModel):
    python: str
    platform: str = Field(pattern=r"^\S+$")

    @field_validator("python")
    @classmethod
    def _python_version(cls, value: str) -> str:
        return check_version(value, "a Python version")


class _LockDocument(_LockModel):
    lock_format: int = Field(alias="lock-format")
    spec: str = Field(pattern=NAME_PATTERN)
    inputs: _InputsEntry
    target: _TargetEntry
    # null: resolved for another architecture from the spec's python.lock_target, the base not fetched
    base_digest: str | None = Field(alias="base-digest", pattern=DIGEST_PATTERN)
    recipe_digest: str = Field(alias="recipe-digest", pattern=DIGEST_PATTERN)
    resolver: str = Field(min_length=1)
    packages: dict[Annotated[str, AfterValidator(_canonical_name)], _PackageEntry]
    kept_from_base: dict[str, str] = Field(default_factory=dict, alias="kept-from-base")


# libyaml's loader where PyYAML has it: the pure-Python one is several times slower on a lock of a few
# thousand YAML nodes, which every no-op build reads.
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_lock(text: str, source: str) -> Lock:
    """Parse and check a lock file's text; `source` (its path) starts every error message. A command reads
    and parses its lock once (envbuild.builder.sessions.lockdecision)."""
    try:
        data = yaml.load(text, Loader=_SAFE_LOADER)  # noqa: S506 - a safe loader (libyaml's or PyYAML's)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise EnvbuildError(f"{source}: not valid YAML{where}: {problem}", _REGENERATE_HINT) from None
    if not isinstance(data, dict):
        raise EnvbuildError(f"{source}: not an envbuild lock file (expected a mapping with lock-format: {LOCK_FORMAT_VERSION})",
                            _REGENERATE_HINT)
    _check_format(data.get("lock-format"), source)
    try:
        document = _LockDocument.model_validate(data)
    except ValidationError as exc:
        problems = [f"{source}: {_describe_error(error)}" for error in exc.errors()]
        raise EnvbuildError("\n".join(problems), _REGENERATE_HINT) from None
    return Lock(
        inputs=LockInputs(
            requirements=tuple(document.inputs.requirements),
            base=document.inputs.base,
            system=document.inputs.system,
            torch_index=document.inputs.torch_index,
            interpreter=document.inputs.interpreter,
            python_target=document.inputs.python_target,
        ),
        target=LockTarget(python=document.target.python, platform=document.target.platform),
        base_digest=document.base_digest,
        recipe_digest=document.recipe_digest,
        resolver=document.resolver,
        packages=tuple(LockedPackage(name, entry.version, tuple(entry.hashes)) for name, entry in document.packages.items()),
        spec_name=document.spec,
        kept=tuple(f"{name}=={version}" for name, version in document.kept_from_base.items()),
    )


def _check_format(value: Any, source: str) -> None:
    # Checked before the keys: a newer format may have other keys, and the useful message is "upgrade".
    if isinstance(value, int) and not isinstance(value, bool) and value != LOCK_FORMAT_VERSION:
        if value > LOCK_FORMAT_VERSION:
            raise EnvbuildError(
                f"{source}: lock-format {value} was written by a newer envbuild; envbuild {__version__} reads lock-format "
                f"{LOCK_FORMAT_VERSION} only",
                "upgrade envbuild to the version that wrote this lock, or run `envbuild lock SPEC` with this one to rewrite it",
            )
        raise EnvbuildError(f"{source}: lock-format {value} is not a format any envbuild wrote", _REGENERATE_HINT)


def _describe_error(error: Any) -> str:
    # pydantic marks a bad mapping key with a "[key]" step; the message names the key already.
    where = ".".join(str(part) for part in error["loc"] if part != "[key]") or "(top level)"
    if error["type"] == "missing":
        return f"{where}: missing"
    if error["type"] == "extra_forbidden":
        return f"{where}: unknown key"
    if error["type"] == "value_error":
        return f"{where}: {str(error['msg']).removeprefix('Value error, ')}"  # our own messages quote the value
    value = error.get("input")
    shown = repr(value) if isinstance(value, (str, int, float, bool)) or value is None else f"a {type(value).__name__}"
    return f"{where}: {error['msg']} (got {shown})"
