"""Resolving with uv: the `uv pip compile` command for a lock's target, and parsing its output into pins."""

from __future__ import annotations

import re
from collections.abc import Iterator

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from envbuild.lock.lockmodel import HASH_PATTERN, LockedPackage, LockTarget
from envbuild.shared.errors import EnvbuildError

# The manylinux levels uv 0.13.9's --python-platform accepts for x86_64 and aarch64 (see `uv pip compile --help`).
_UV_MANYLINUX_MINORS = (17, 28, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40)


_UV_ARCHES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


_UV_OUTPUT = "uv pip compile output"


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
                            "call uv with the arguments of envbuild.lock.uv.uv_compile_argv")
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
                            "call uv with the arguments of envbuild.lock.uv.uv_compile_argv (no --universal, --no-strip-*)")
    specifiers = list(requirement.specifier)
    if len(specifiers) != 1 or specifiers[0].operator != "==" or "*" in specifiers[0].version:
        raise EnvbuildError(f"{where}: {name} is not pinned to one version ({requirement_text}); expected {name}==VERSION")
    version = specifiers[0].version
    if not hashes:
        raise EnvbuildError(f"{where}: {name}=={version} has no hash; a lock needs the hash of every file it may install",
                            "call uv with --generate-hashes (envbuild.lock.uv.uv_compile_argv does)")
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
