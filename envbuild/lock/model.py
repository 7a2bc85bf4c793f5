"""Lock files: every Python package of a spec pinned to one version, with hashes, for the spec's target.

uv does the resolution (`uv pip compile`, run on the host by the CLI). This module plans that call,
turns uv's requirements.txt output into envbuild's lock file, reads lock files back, says whether a
lock still matches its spec, and writes what `uv pip install --require-hashes --no-deps` needs.
Nothing here runs a program or touches the filesystem.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import yaml
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator

from envbuild import __version__
from envbuild.errors import EnvbuildError
from envbuild.spec.model import NAME_PATTERN

if TYPE_CHECKING:
    from envbuild.spec.model import Spec

LOCK_FORMAT_VERSION = 1
LOCK_SUFFIX = ".lock"
_SPEC_SUFFIXES = (".yaml", ".yml")

# The algorithms pip and uv accept with --require-hashes; uv writes sha256 unless an index only offers a stronger one.
HASH_PATTERN = r"^(sha256:[0-9a-f]{64}|sha384:[0-9a-f]{96}|sha512:[0-9a-f]{128})$"
DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"

# The manylinux levels uv 0.13.9's --python-platform accepts for x86_64 and aarch64 (see `uv pip compile --help`).
_UV_MANYLINUX_MINORS = (17, 28, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40)
_UV_ARCHES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}

_REGENERATE_HINT = "lock files are written by envbuild, not by hand: run `envbuild lock SPEC` again to rewrite it"
_UV_OUTPUT = "uv pip compile output"


@dataclass(frozen=True)
class LockTarget:
    """What the packages are resolved for: the base image's Python and platform."""

    python: str  # full version of the base image's python3, e.g. "3.11.2"
    platform: str  # uv --python-platform value, e.g. "x86_64-manylinux_2_36"


@dataclass(frozen=True)
class LockInputs:
    """What in the spec shapes the resolution: when any of it changes, the lock is stale."""

    requirements: tuple[str, ...]  # spec.python.requirements(), in order
    base: str  # spec.base.describe(), plus include=/mirror= for debootstrap
    system: str  # recipe name
    torch_index: str | None  # the PyTorch variant's wheel index (None: the host's configuration only)
    interpreter: str  # spec.python.interpreter


@dataclass(frozen=True)
class LockedPackage:
    name: str
    version: str
    hashes: tuple[str, ...]

    def __post_init__(self) -> None:
        # Normalised here so that two locks of the same resolution compare equal and render identically.
        object.__setattr__(self, "name", canonicalize_name(self.name))
        object.__setattr__(self, "hashes", tuple(sorted(set(self.hashes))))


@dataclass(frozen=True)
class Lock:
    inputs: LockInputs
    target: LockTarget
    base_digest: str  # "sha256:..."
    recipe_digest: str  # "sha256:..."
    resolver: str  # e.g. "uv 0.13.9"
    packages: tuple[LockedPackage, ...]
    spec_name: str

    def __post_init__(self) -> None:
        ordered = tuple(sorted(self.packages, key=lambda package: package.name))
        twice = [name for name, count in Counter(p.name for p in ordered).items() if count > 1]
        if twice:
            raise ValueError(f"a lock pins each package once; listed more than once: {', '.join(twice)}")
        object.__setattr__(self, "packages", ordered)


# --- inputs and the uv call -----------------------------------------------------------------------


def lock_inputs(spec: Spec, torch_index: str | None) -> LockInputs:
    base = spec.base.describe()
    if spec.base.kind == "debootstrap":
        # The included Debian packages and the mirror decide what is in the base (its python3 among them).
        if spec.base.include:
            base += " include=" + ",".join(sorted(set(spec.base.include)))
        if spec.base.mirror:
            base += f" mirror={spec.base.mirror}"
    return LockInputs(
        requirements=tuple(spec.python.requirements()),
        base=base,
        system=spec.system,
        torch_index=torch_index,
        interpreter=spec.python.interpreter,
    )


def uv_python_platform(machine: str, glibc_version: str) -> str:
    """The --python-platform value for a base image: its architecture (`uname -m`) and glibc version.

    A glibc between or above the levels uv knows is rounded down: every wheel chosen then still runs on
    the image (manylinux wheels run on any newer glibc); at worst a wheel tagged for the exact newer
    level is passed over, which for glibc above 2.40 is rare."""
    arch = _UV_ARCHES.get(machine)
    if arch is None:
        known = ", ".join(sorted(set(_UV_ARCHES.values())))
        raise EnvbuildError(f"cannot lock for the {machine} architecture", f"uv resolves Linux wheels for {known}")
    match = re.match(r"^2\.(\d+)", glibc_version.strip())
    if match is None:
        raise EnvbuildError(f"{glibc_version!r} is not a glibc version (expected e.g. 2.36)")
    minor = int(match.group(1))
    usable = [level for level in _UV_MANYLINUX_MINORS if level <= minor]
    if not usable:
        raise EnvbuildError(f"glibc {glibc_version} is older than manylinux_2_17, the oldest level uv resolves for",
                            "use a newer base image")
    return f"{arch}-manylinux_2_{usable[-1]}"


def uv_compile_argv(uv: str, inputs_file: str, output_file: str, target: LockTarget, *, index_args: list[str],
                    cache_dir: str, upgrade: bool = False, upgrade_packages: tuple[str, ...] = ()) -> list[str]:
    """`uv pip compile` resolving inputs_file for the target into output_file.

    uv reads an existing output_file as preferences: write the previous lock there first
    (`requirements_with_hashes`) and re-locking keeps every version the inputs still allow, except
    with `upgrade` (all packages) or `upgrade_packages` (those named)."""
    argv = [
        uv, "pip", "compile", inputs_file,
        # Explicit, so that the output file's extension does not switch uv to pylock.toml.
        "--format", "requirements.txt", "--output-file", output_file,
        "--python-version", target.python, "--python-platform", target.platform,
        "--generate-hashes",
        # No header and no `# via` comments: the output is only pins and hashes (the parser skips comments anyway).
        "--no-header", "--no-annotate",
        # The lock must use the sources the build uses (index_args, from the host's pip configuration),
        # not whatever a uv.toml or pyproject.toml in the current directory or the user's home says.
        "--no-config",
        # Resolution only needs the target version's number; never download an interpreter for it.
        "--no-python-downloads",
        # uv would print the whole result to stdout as well as to output_file; errors still go to stderr.
        "--quiet",
        *index_args,
        "--cache-dir", cache_dir,
    ]
    if upgrade:
        argv.append("--upgrade")
    # The = form, so that a name can never be read as another option.
    argv += [f"--upgrade-package={name}" for name in upgrade_packages]
    return argv


# --- uv's output ----------------------------------------------------------------------------------


def parse_uv_requirements(text: str) -> tuple[LockedPackage, ...]:
    """The packages in uv's requirements.txt output; anything but `name==version` with hashes is refused."""
    packages: dict[str, LockedPackage] = {}
    for line_number, line in _logical_lines(text):
        package = _parse_pin(line_number, line)
        if package.name in packages:
            raise EnvbuildError(f"{_UV_OUTPUT}, line {line_number}: {package.name} is listed twice")
        packages[package.name] = package
    return tuple(sorted(packages.values(), key=lambda package: package.name))


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """requirements.txt lines with continuations joined and comments removed, each with its first line's number."""
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        if not pending:
            start = number
        stripped = raw.rstrip()
        if stripped.endswith("\\"):
            pending.append(stripped[:-1])
            continue
        pending.append(stripped)
        line = _strip_comment(" ".join(pending)).strip()
        pending = []
        if line:
            yield start, line
    line = _strip_comment(" ".join(pending)).strip()
    if line:
        yield start, line


def _strip_comment(line: str) -> str:
    # As in pip: a comment starts with # at the start of the line or after whitespace (not in a URL's #fragment).
    return re.sub(r"(^|\s)#.*$", "", line)


def _parse_pin(line_number: int, line: str) -> LockedPackage:
    where = f"{_UV_OUTPUT}, line {line_number}"
    tokens = line.split()
    if tokens[0] in ("-e", "--editable") or tokens[0].startswith("--editable="):
        target = tokens[1] if len(tokens) > 1 and tokens[0] in ("-e", "--editable") else tokens[0].partition("=")[2]
        raise EnvbuildError(f"{where}: {target} is an editable requirement; a lock pins released packages only",
                            "install local projects with post: commands, or build a wheel and put it in a find-links directory")
    if tokens[0].startswith("-"):
        raise EnvbuildError(f"{where}: unexpected option {tokens[0]}; a lock holds pinned packages only",
                            "call uv with the arguments of envbuild.lock.model.uv_compile_argv")
    first_option = next((i for i, token in enumerate(tokens) if token.startswith("--")), len(tokens))
    requirement_text = " ".join(tokens[:first_option])
    hashes = _hash_options(where, tokens[first_option:])
    try:
        requirement = Requirement(requirement_text)
    except InvalidRequirement as exc:
        raise EnvbuildError(f"{where}: {requirement_text!r} is not a requirement: {str(exc).splitlines()[0]}") from None
    name = canonicalize_name(requirement.name)
    if requirement.url:
        raise EnvbuildError(f"{where}: {name} is a URL requirement ({requirement.url}); a lock pins packages from indexes only",
                            "name the package and version in the spec, or put the wheel in a find-links directory")
    if requirement.marker is not None or requirement.extras:
        raise EnvbuildError(f"{where}: {name} carries extras or environment markers ({requirement_text}); "
                            "a lock for one target pins plain name==version",
                            "call uv with the arguments of envbuild.lock.model.uv_compile_argv (no --universal, --no-strip-*)")
    specifiers = list(requirement.specifier)
    if len(specifiers) != 1 or specifiers[0].operator != "==" or "*" in specifiers[0].version:
        raise EnvbuildError(f"{where}: {name} is not pinned to one version ({requirement_text}); expected {name}==VERSION")
    version = specifiers[0].version
    if not hashes:
        raise EnvbuildError(f"{where}: {name}=={version} has no hash; a lock needs the hash of every file it may install",
                            "call uv with --generate-hashes (envbuild.lock.model.uv_compile_argv does)")
    return LockedPackage(name, version, tuple(hashes))


def _hash_options(where: str, tokens: list[str]) -> list[str]:
    hashes: list[str] = []
    options = iter(tokens)
    for option in options:
        if option == "--hash":
            value = next(options, "")
        elif option.startswith("--hash="):
            value = option[len("--hash="):]
        else:
            raise EnvbuildError(f"{where}: unexpected option {option}; only --hash may follow a pinned package")
        if not re.match(HASH_PATTERN, value):
            raise EnvbuildError(f"{where}: {value!r} is not a sha256, sha384 or sha512 hash in hex")
        hashes.append(value)
    return hashes


# --- the lock file --------------------------------------------------------------------------------


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
        },
        "target": {"python": lock.target.python, "platform": lock.target.platform},
        "base-digest": lock.base_digest,
        "recipe-digest": lock.recipe_digest,
        "resolver": lock.resolver,
        "packages": {
            package.name: {"version": package.version, "hashes": sorted(package.hashes)}
            for package in sorted(lock.packages, key=lambda package: package.name)
        },
    }
    # safe_dump quotes every string that would read back as another type (1.10, 2.0, null, yes), so
    # versions stay strings; a wide line keeps long requirement strings on one line.
    body = yaml.safe_dump(document, sort_keys=False, default_flow_style=False, allow_unicode=True, width=1 << 16)
    return "\n".join(header) + "\n" + body


def _canonical_name(name: str) -> str:
    if canonicalize_name(name) != name:
        raise ValueError(f"{name!r} is not a normalised package name (envbuild writes {canonicalize_name(name)!r})")
    return name


class _LockModel(BaseModel):
    # strict: a version that YAML read as a number (hand-edited `version: 1.10`) is an error, not 1.1.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class _PackageEntry(_LockModel):
    version: str
    hashes: list[Annotated[str, Field(pattern=HASH_PATTERN)]] = Field(min_length=1)

    @field_validator("version")
    @classmethod
    def _pep440(cls, value: str) -> str:
        try:
            Version(value)
        except InvalidVersion:
            raise ValueError(f"{value!r} is not a version number") from None
        return value


class _InputsEntry(_LockModel):
    requirements: list[str]
    base: str
    system: str
    torch_index: str | None = Field(alias="torch-index")
    interpreter: str


class _TargetEntry(_LockModel):
    python: str
    platform: str = Field(pattern=r"^\S+$")

    @field_validator("python")
    @classmethod
    def _python_version(cls, value: str) -> str:
        try:
            Version(value)
        except InvalidVersion:
            raise ValueError(f"{value!r} is not a Python version") from None
        return value


class _LockDocument(_LockModel):
    lock_format: int = Field(alias="lock-format")
    spec: str = Field(pattern=NAME_PATTERN)
    inputs: _InputsEntry
    target: _TargetEntry
    base_digest: str = Field(alias="base-digest", pattern=DIGEST_PATTERN)
    recipe_digest: str = Field(alias="recipe-digest", pattern=DIGEST_PATTERN)
    resolver: str = Field(min_length=1)
    packages: dict[Annotated[str, AfterValidator(_canonical_name)], _PackageEntry]


def read_lock(text: str, source: str) -> Lock:
    """Parse and check a lock file's text; `source` (its path) starts every error message."""
    try:
        data = yaml.safe_load(text)
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
        ),
        target=LockTarget(python=document.target.python, platform=document.target.platform),
        base_digest=document.base_digest,
        recipe_digest=document.recipe_digest,
        resolver=document.resolver,
        packages=tuple(LockedPackage(name, entry.version, tuple(entry.hashes)) for name, entry in document.packages.items()),
        spec_name=document.spec,
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


# --- using a lock ---------------------------------------------------------------------------------


def stale_reasons(lock: Lock, current: LockInputs) -> list[str]:
    """Why the lock no longer matches the spec, one line per change; empty when it still does."""
    reasons: list[str] = []
    locked = _by_project(lock.inputs.requirements)
    wanted = _by_project(current.requirements)
    for project, texts in wanted.items():
        if project not in locked:
            reasons += [f"requirement added: {text}" for text in texts]
        elif not _same_requirements(locked[project], texts):
            reasons.append(f"requirement changed: {', '.join(locked[project])} -> {', '.join(texts)}")
    for project, texts in locked.items():
        if project not in wanted:
            reasons += [f"requirement removed: {text}" for text in texts]
    if lock.inputs.base != current.base:
        reasons.append(f"base changed: {lock.inputs.base} -> {current.base}")
    if lock.inputs.system != current.system:
        reasons.append(f"system changed: {lock.inputs.system} -> {current.system}")
    if lock.inputs.torch_index != current.torch_index:
        reasons.append(f"torch index changed: {_index_text(lock.inputs.torch_index)} -> {_index_text(current.torch_index)}")
    if lock.inputs.interpreter != current.interpreter:
        reasons.append(f"interpreter changed: {lock.inputs.interpreter} -> {current.interpreter}")
    return reasons


def _by_project(requirements: Iterable[str]) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for text in requirements:
        try:
            project = canonicalize_name(Requirement(text).name)
        except InvalidRequirement:
            project = text  # the spec validates requirements; an odd one still compares as text
        groups.setdefault(project, []).append(text)
    return groups


def _same_requirements(old: list[str], new: list[str]) -> bool:
    # Compared as parsed requirements: `Rich >= 13` and `rich>=13` ask uv for the same thing.
    def parsed(text: str) -> Requirement | str:
        try:
            return Requirement(text)
        except InvalidRequirement:
            return text

    return Counter(map(parsed, old)) == Counter(map(parsed, new))


def _index_text(url: str | None) -> str:
    return url if url is not None else "none (host configuration only)"


def requirements_with_hashes(lock: Lock) -> str:
    """requirements.txt for `uv pip install --require-hashes --no-deps -r`: one pinned package per line."""
    lines = [
        " ".join([f"{package.name}=={package.version}", *(f"--hash={digest}" for digest in sorted(package.hashes))])
        for package in sorted(lock.packages, key=lambda package: package.name)
    ]
    return "".join(line + "\n" for line in lines)


def lock_path_for(spec_path: Path) -> Path:
    """The lock sits next to its spec: envs/foo.yaml -> envs/foo.lock."""
    if spec_path.suffix in _SPEC_SUFFIXES:
        return spec_path.with_suffix(LOCK_SUFFIX)
    # Appended rather than substituted, so that no spec name can map onto the spec file itself.
    return spec_path.with_name(spec_path.name + LOCK_SUFFIX)


def lock_sha256(text: str) -> str:
    """Hex sha256 of a lock file's text, like the spec's sha256 in image labels."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
