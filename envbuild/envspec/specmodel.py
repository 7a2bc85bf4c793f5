"""The environment spec (format version 1): what a user writes in envs/*.yaml, as a validated model.

The model only checks what can be checked from the text itself. Checks that need the outside world
(does `files[].src` exist, is `system` a known recipe) live in `envbuild.envspec.loadspec`.
"""

from __future__ import annotations

import os
import posixpath
import re
import shlex
from typing import TYPE_CHECKING, Annotated, Any, Literal

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from pydantic import AfterValidator, BeforeValidator, Field, ValidationError, ValidationInfo, field_validator, model_validator

from envbuild.envspec.conda import CondaEnv
from envbuild.envspec.torchfamily import pin_companions
from envbuild.shared.envnames import ENV_NAME_PATTERN, ENV_NAME_RULE
from envbuild.shared.overlayformat import DEFAULT_MOUNT
from envbuild.shared.strictmodel import StrictModel, check_version

if TYPE_CHECKING:
    from envbuild.recipes.protocols import SystemRecipe

SPEC_FORMAT_VERSION = 1

# Where the Python environment lives inside every image envbuild builds. Fixed, so that wrappers,
# overlays and `envbuild packages` know where to look without reading the image first.
VENV_PREFIX = "/opt/envbuild/venv"

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"


def spec_name_for(stem: str) -> str:
    """A valid spec name from a file name: 'Singularity.def' -> 'Singularity', 'my env' -> 'my-env'."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-._") or "imported"
    return name if re.match(NAME_PATTERN, name) else "imported"

# cpu | cuda<major><minor> (PyTorch's index names: cu118, cu121, cu124, cu126, cu128...) | rocm<major>.<minor>[.<patch>]
VARIANT_PATTERN = r"^(cpu|cuda\d{3,4}|rocm\d+\.\d+(\.\d+)?)$"


class BaseImage(StrictModel):
    """Where the root filesystem comes from."""

    kind: Literal["debootstrap", "docker", "oras", "localimage"]
    ref: str = Field(description="Debian suite, docker:// or oras:// URI, or path of a .sif or sandbox dir")
    include: tuple[str, ...] = Field(
        default=(), description="debootstrap only: extra Debian packages for the base (python3 and python3-venv are always added)"
    )
    mirror: str | None = Field(default=None, description="debootstrap only: Debian mirror URL (default: the host's)")

    @model_validator(mode="before")
    @classmethod
    def _accept_short_forms(cls, value: Any) -> Any:
        """`base:` may be a string (`debootstrap:bookworm`, `docker://...`, `oras://...`,
        `localimage:/path`, a path) or a one-key mapping (`{debootstrap: bookworm}`)."""
        if isinstance(value, str):
            return _parse_base_string(value)
        if isinstance(value, dict) and "kind" not in value:
            value = dict(value)
            for kind in ("debootstrap", "docker", "oras", "localimage"):
                if kind in value:
                    ref = value.pop(kind)
                    if not isinstance(ref, str):
                        raise ValueError(f"base.{kind} must be a string, got {type(ref).__name__}")
                    if kind in ("docker", "oras") and not ref.startswith(f"{kind}://"):
                        ref = f"{kind}://{ref}"
                    return {"kind": kind, "ref": ref, **value}
            raise ValueError(
                "base needs one of the keys debootstrap, docker, oras, localimage "
                f"(got {', '.join(map(str, value)) or 'an empty mapping'})"
            )
        return value

    @model_validator(mode="after")
    def _check_kind_options(self) -> BaseImage:
        if self.kind != "debootstrap" and (self.include or self.mirror):
            raise ValueError("include and mirror apply to debootstrap bases only")
        if self.kind == "debootstrap" and not re.match(r"^[a-z][a-z0-9-]*$", self.ref):
            raise ValueError(f"{self.ref!r} is not a Debian suite name (e.g. bookworm, trixie)")
        if self.kind in ("docker", "oras") and len(self.ref) <= len(self.kind) + 3:
            raise ValueError(f"{self.kind} base needs an image reference after {self.kind}://")
        if "$" in self.ref:
            raise ValueError(f"{self.describe()!r} holds an unexpanded variable ($...), which nothing expands; "
                             "write the image itself (a Dockerfile's FROM $ARG is expanded by envbuild import "
                             "--build-arg NAME=...)")
        return self

    def describe(self) -> str:
        if self.kind == "debootstrap":
            return f"debootstrap:{self.ref}"
        if self.kind == "localimage":
            return f"localimage:{self.ref}"
        return self.ref


def _parse_base_string(text: str) -> dict[str, Any]:
    text = text.strip()
    if text.startswith(("docker://", "oras://")):
        return {"kind": text.split(":", 1)[0], "ref": text}
    for kind in ("debootstrap", "localimage"):
        if text.startswith(kind + ":"):
            return {"kind": kind, "ref": text[len(kind) + 1 :].strip()}
    if text.startswith(("/", "./", "../", "~")) or text.endswith(".sif"):
        return {"kind": "localimage", "ref": text}
    raise ValueError(
        f"cannot tell what kind of base {text!r} is; write debootstrap:<suite>, docker://<image>, "
        "oras://<image>, or localimage:<path to .sif or sandbox dir>"
    )


def _check_requirement(text: str) -> str:
    try:
        Requirement(text)
    except InvalidRequirement as exc:
        detail = str(exc).splitlines()[0].strip()
        raise ValueError(f"{text!r} is not a pip requirement: {detail}") from None
    return text


RequirementText = Annotated[str, AfterValidator(_check_requirement)]


class PyTorch(StrictModel):
    version: str = Field(description="PyTorch release, e.g. 2.13.0")
    # The default is filled in when the spec is loaded: the system recipe's pytorch.default_variant
    # (envbuild.envspec.systemvariant); cpu stands only where no recipe is known.
    variant: str = Field(default="cpu", description="cpu, cuda<ver> (e.g. cuda126) or rocm<ver> (e.g. rocm6.4); "
                         "default: the system recipe's pytorch.default_variant")
    index_url: str | None = Field(
        default=None, description="wheel index for this variant; default: the system recipe's, else PyTorch's official one"
    )
    extras: tuple[RequirementText, ...] = Field(
        default=(), description="companion packages from the same index, e.g. torchvision (requirement strings)"
    )

    @field_validator("version")
    @classmethod
    def _valid_version(cls, value: str) -> str:
        return check_version(value, "a version number (write e.g. 2.13.0)")

    @field_validator("variant")
    @classmethod
    def _valid_variant(cls, value: str) -> str:
        if not re.match(VARIANT_PATTERN, value):
            raise ValueError(
                f"{value!r} is not a PyTorch variant; use cpu, cuda<major><minor> (e.g. cuda126) "
                "or rocm<major>.<minor> (e.g. rocm6.4)"
            )
        return value

    @property
    def wheel_tag(self) -> str:
        """PyTorch's index directory name for the variant: cpu, cu126, rocm6.4."""
        if self.variant.startswith("cuda"):
            return "cu" + self.variant[4:]
        return self.variant


PackageVersion = Annotated[
    str | bool | None,
    Field(description="true for the newest, or a version / specifier such as 4.57.1 or '>=4.50,<5'"),
]


def _normalise_shorthand(name: str, value: str | bool | None) -> str | None:
    """`transformers: true` -> 'transformers'; `4.57.1` -> 'transformers==4.57.1'; '>=4.50' kept."""
    if value is None or value is False:
        return None
    if value is True:
        return name
    text = str(value).strip()
    if re.match(r"^\d", text):
        text = "==" + text
    try:
        SpecifierSet(text)
    except InvalidSpecifier:
        raise ValueError(f"{value!r} is not a version or version specifier for {name}") from None
    return f"{name}{text}"


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


# Where a spec's Python packages go (python.target): envbuild's own venv at VENV_PREFIX, a venv there that sees the
# base's packages, or the base's own environment (the Python the base puts first on its PATH).
PythonTarget = Literal["envbuild-venv", "venv-over-base", "base"]
PYTHON_TARGETS: tuple[PythonTarget, ...] = ("envbuild-venv", "venv-over-base", "base")


class PythonEnv(StrictModel):
    target: PythonTarget = Field(
        default="envbuild-venv",
        description="where the packages go. envbuild-venv: a venv of envbuild's own at " + VENV_PREFIX + ", "
        "first on PATH (for plain OS bases: debootstrap, docker://debian, ubuntu); venv-over-base: that venv made "
        "with --system-site-packages from the base's Python, so the base's packages (its torch) stay importable "
        "and added packages win; base: no venv, packages installed with the base's own Python (the interpreter or "
        "conda env first on the base's PATH, after the base's $WITH_CONDA where it sets one, as its users get it; "
        "found inside the base at build time), PATH left as the base sets it "
        "(NGC, conda, TensorFlow and LUMI framework images). With venv-over-base and base the lock resolves against "
        "the base's installed distributions and keeps its torch family",
    )
    interpreter: str = Field(
        default="python3", description="the base image's Python used to create the venv (name or absolute path); "
        "with target: base, the Python installed into (default: python3, else python, on the base's PATH)"
    )
    installer: Literal["auto", "uv", "pip"] = Field(
        default="auto", description="auto: uv when envbuild has it, else pip"
    )
    pytorch: PyTorch | None = None
    transformers: PackageVersion = None
    lightning: PackageVersion = None
    packages: tuple[RequirementText, ...] = Field(default=(), description="pip requirement strings")
    lock_target: LockTargetFacts | None = Field(
        default=None, description="the base's Python and glibc versions: lets `envbuild lock` resolve for a system "
        "of another architecture without running the base (e.g. {python: '3.12', glibc: '2.39'})",
    )

    @field_validator("transformers", "lightning", mode="before")
    @classmethod
    def _numbers_as_text(cls, value: Any) -> Any:
        # YAML reads `transformers: 4.57` as a float; keep what the user meant.
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        return value

    @field_validator("transformers", "lightning")
    @classmethod
    def _check_shorthand(cls, value: str | bool | None, info: ValidationInfo) -> str | bool | None:
        # A field validator, not one on the whole model: it runs even when another field of python: is wrong.
        _normalise_shorthand(str(info.field_name), value)
        return value

    def requirements(self) -> list[str]:
        """Every requirement to install, in the spec's order: torch first, then the shorthands. Next to
        `pytorch:`, torchvision/torchaudio without a version get the one released with torch (wherever listed)."""
        reqs: list[str] = []
        if self.pytorch is not None:
            reqs.append(f"torch=={self.pytorch.version}")
            reqs.extend(self.pytorch.extras)
        for name in ("transformers", "lightning"):
            req = _normalise_shorthand(name, getattr(self, name))
            if req:
                reqs.append(req)
        reqs.extend(self.packages)
        return pin_companions(reqs, self.pytorch.version) if self.pytorch is not None else reqs

    def pytorch_index_url(self, recipe: SystemRecipe) -> str | None:
        """The wheel index for the PyTorch variant: the spec's own index_url, else the system recipe's;
        None without PyTorch, or when the recipe leaves it to the host's pip configuration."""
        if self.pytorch is None:
            return None
        return self.pytorch.index_url or recipe.pytorch_index_for(self.pytorch.wheel_tag)


GROUP, OTHERS = 0o070, 0o007  # the permission bits of a class of readers, as a mask


class FileCopy(StrictModel):
    # Before `src`, whose check reads it.
    allow_outside_spec_dir: bool = Field(
        default=False,
        description="let `src` be an absolute path, start with ~ or lead (by .. or a symbolic link) out of the "
                    "spec file's directory; without it a spec cannot copy a host file such as ~/.ssh into an image")
    src: str = Field(description="path on the build host, relative to the spec file's directory and inside it")
    dest: str = Field(description="absolute path inside the image (normalised; '..' may not climb above /)")
    mode: str | None = Field(default=None, description="octal permission bits, e.g. '0755'; without it the source's "
                                                       "bits are kept as they are (never widened)")

    @field_validator("src")
    @classmethod
    def _src_in_spec_dir(cls, value: str, info: ValidationInfo) -> str:
        if not info.data.get("allow_outside_spec_dir") and src_leaves_spec_dir(value):
            raise ValueError(f"{value!r} is outside the spec file's directory")
        return value

    @field_validator("dest")
    @classmethod
    def _absolute_dest(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError(f"{value!r} must be an absolute path inside the image (start with /)")
        normal = _normal_dest(value)
        if normal.rstrip("/") in ("", "/proc", "/sys", "/dev"):
            raise ValueError(f"{value!r} is managed by the container runtime; choose another destination")
        return normal

    @field_validator("mode", mode="before")
    @classmethod
    def _octal_mode(cls, value: Any) -> Any:
        if value is None:
            return None
        text = str(value)
        if not re.match(r"^0?[0-7]{3,4}$", text):
            raise ValueError(f"{value!r} is not an octal mode; quote it, e.g. '0755'")
        return text

    @property
    def readers_left_to_source(self) -> int:
        """The readers (GROUP, OTHERS) this entry does not let read the file in the image: both without a
        `mode:` (the source's bits are kept), none where the mode grants read to both. Those of them who cannot
        read the source on this host get no permission on the image file either (envbuild.envspec.loadspec.hidden_from)."""
        if self.mode is None:
            return GROUP | OTHERS
        bits = int(self.mode, 8)
        return (0 if bits & 0o040 else GROUP) | (0 if bits & 0o004 else OTHERS)

    def host_source(self, spec_dir: str) -> str:
        """Where `src` is on the build host, for the spec loader's checks and the build alike: `~` expanded,
        relative to the spec file's directory. Links are not resolved here (the loader checks where they lead
        against allow_outside_spec_dir, and the copy follows them the same way)."""
        return os.path.join(spec_dir, os.path.expanduser(self.src))


def src_leaves_spec_dir(src: str) -> bool:
    """Whether `src`, as written, names something outside the spec file's directory (the loader also follows
    its links)."""
    return src.startswith(("/", "~")) or posixpath.normpath(src).split("/")[0] == ".."


def _normal_dest(value: str) -> str:
    """`value` without `.`, doubled slashes and `..` taken back (a trailing slash, a directory, stays); a `..`
    that would climb above `/` is refused (it was meant to leave the image)."""
    parts: list[str] = []
    for part in value.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                raise ValueError(f"{value!r} climbs above the image's root with '..'")
            parts.pop()
        else:
            parts.append(part)
    return "/" + "/".join(parts) + ("/" if parts and value.endswith("/") else "")


def _env_value(value: Any) -> str:
    if isinstance(value, bool):
        raise ValueError("a YAML true/false/yes/no is ambiguous here; quote it ('true', '1', 'yes')")
    if isinstance(value, (int, float, str)):
        return str(value)
    raise ValueError(f"must be a string or number, got {type(value).__name__}")


def _env_name(value: Any) -> str:
    # fullmatch: re.match with `$` took "FOO\n", and every start of the image then ran `export FOO`
    # and `=x: not found` (the env script is `export NAME=value` lines)
    if not isinstance(value, str) or not re.fullmatch(ENV_NAME_PATTERN, value):
        raise ValueError(f"{value!r} is not a valid environment variable name ({ENV_NAME_RULE})")
    return value


EnvName = Annotated[str, BeforeValidator(_env_name)]
TextValue = Annotated[str, BeforeValidator(_env_value)]


class EnvEdit(StrictModel):
    """An `env:` entry that adds to a variable the base or the runtime sets (`PATH: {prepend: /opt/x/bin}`)
    instead of replacing it: what a definition file's `export PATH=/opt/x/bin:$PATH` means. Joined with `:`,
    and only when the variable is set and not empty, so no empty entry (the current directory) slips in."""

    prepend: str | None = Field(default=None, description="put before the variable's value, joined with ':'")
    append: str | None = Field(default=None, description="put after the variable's value, joined with ':'")

    @model_validator(mode="after")
    def _says_something(self) -> EnvEdit:
        if self.prepend is None and self.append is None:
            raise ValueError("give prepend: and/or append:, e.g. {prepend: /opt/x/bin}")
        for key, value in (("prepend", self.prepend), ("append", self.append)):
            if value is not None and (value == "" or value.startswith(":") or value.endswith(":")):
                raise ValueError(f"{key}: {value!r} would add an empty entry (the current directory); "
                                 "write the paths without a leading or trailing ':'")
        return self

    def describe(self) -> str:
        """As a user reads it in a message: {prepend: '/a', append: '/b'}."""
        parts = [f"{key}: {value!r}" for key, value in (("prepend", self.prepend), ("append", self.append)) if value]
        return "{" + ", ".join(parts) + "}"


def _env_entry(value: Any) -> Any:
    # A mapping is an edit of the variable; anything else a literal value. Checked here, so that a bad
    # mapping gets one message about the mapping, not a second one about it not being a string.
    if isinstance(value, EnvEdit):
        return value
    if isinstance(value, dict):
        unknown = sorted(str(key) for key in value if key not in EnvEdit.model_fields)
        if unknown:
            raise ValueError(f"unknown key {unknown[0]!r}: an env entry is a value (FOO: bar) or a mapping "
                             "with prepend: and/or append: (PATH: {prepend: /opt/x/bin})")
        for key, item in value.items():
            try:
                value = {**value, key: _env_value(item) if item is not None else None}
            except ValueError as error:
                raise ValueError(f"{key}: {error}") from None
        try:
            return EnvEdit.model_validate(value)
        except ValidationError as error:  # one plain message, located at the variable by the loader
            raise ValueError(error.errors()[0]["msg"].removeprefix("Value error, ")) from None
    return _env_value(value)


# `FOO: bar` sets FOO to bar, literally; `PATH: {prepend: /opt/x/bin}` adds to PATH (EnvEdit).
EnvValue = Annotated[str | EnvEdit, BeforeValidator(_env_entry)]


# Mount points that would hide what the base image needs to run (its Python, libraries, /etc).
_HIDDEN_BY_MOUNT = ("/", "/bin", "/sbin", "/lib", "/lib64", "/usr", "/etc", "/opt", "/var", "/tmp", "/home", "/root",  # noqa: S108 - a name, not a file
                    "/proc", "/sys", "/dev", "/run", "/.singularity.d")


# The spec's `env:` as shell assignments, `NAME=word`, one per line, in the order written: the image's environment
# script, an exported definition file's %environment and an exported Dockerfile's ENV lines all say the same
# thing with them (Docker's ENV reads quotes and ${NAME:+word} as the shell does). Every user value is one
# quoted word; an edit adds to the variable's value with the ':' only when the variable is set and not empty,
# so an unset variable gains no empty entry (which the shell and the dynamic loader read as the current directory).
def env_assignments(env: dict[str, str | EnvEdit]) -> list[str]:
    """`NAME=word` for every entry: a literal value as one quoted word, an edit as one line per side."""
    lines = []
    for name, value in env.items():
        if not isinstance(value, EnvEdit):
            lines.append(f"{name}={shlex.quote(value)}")
            continue
        if value.prepend is not None:
            lines.append(f'{name}={shlex.quote(value.prepend)}"${{{name}:+:${name}}}"')
        if value.append is not None:
            lines.append(f'{name}="${{{name}:+${name}:}}"{shlex.quote(value.append)}')
    return lines


class OverlaySettings(StrictModel):
    """`overlay:` turns the spec into a squashfs venv overlay on an existing image instead of an image."""

    mount: str = Field(default=DEFAULT_MOUNT, description="where the overlay is mounted in the container")
    python: str | None = Field(
        default=None, description="the base image's Python to make the venv with (absolute path inside the image); "
        "default: detected ($WITH_CONDA's conda env, /opt/venv, envbuild's venv, the system python3)",
    )
    allow_torch_change: bool = Field(
        default=False, description="allow a torch other than the base's (its ROCm/CUDA libraries belong to its torch)"
    )
    processors: int = Field(
        default=1, ge=1, le=1024,
        description="mksquashfs -processors (1, as LUMI documents for login nodes; raise it on a build node)",
    )

    @field_validator("mount")
    @classmethod
    def _valid_mount(cls, value: str) -> str:
        text = value.rstrip("/") or "/"
        if not text.startswith("/"):
            raise ValueError(f"{value!r} must be an absolute path inside the container (e.g. {DEFAULT_MOUNT})")
        if text in _HIDDEN_BY_MOUNT or any(part in (".", "..") for part in text.split("/")):
            raise ValueError(f"mounting at {value!r} would hide part of the base image; use a new directory such as "
                             f"{DEFAULT_MOUNT} or /opt/<name>")
        return text

    @field_validator("python")
    @classmethod
    def _absolute_python(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError(f"{value!r} must be an absolute path inside the base image, e.g. /opt/venv/bin/python")
        return value


# Spec sections an overlay cannot carry: it holds only a venv at its mount point.
_NOT_IN_OVERLAY = {
    "files": "copy the files into your project directory or bind them with envrun --bind",
    "post": "an overlay cannot change the base image; build a full image (remove overlay:) to run commands in it",
    "env": "set them in envrun.yaml (env:) next to your project, or in ~/.config/envbuild/envrun.yaml",
    "env_shell": "set the variables in envrun.yaml (env:) next to your project, or build a full image (remove overlay:)",
    "labels": "an overlay has no labels; its record (envbuild inspect NAME.sqsh) says how it was made",
}


# The parts of the spec each check across parts reads (Spec._check_overlay, Spec._check_conda), by the part
# it is about: the loader says which of them wait for a part that has a problem of its own.
CHECKED_TOGETHER: dict[str, tuple[str, ...]] = {
    "overlay": ("base", "python", *_NOT_IN_OVERLAY),
    "conda": ("base", "python", "overlay"),
}


class Spec(StrictModel):
    """An environment: a base image, a Python environment on top, and what to check in it."""

    version: Literal[1] = Field(default=1, description="spec format version")
    name: str = Field(pattern=NAME_PATTERN, description="image name; the default output is <name>.sif")
    system: str = Field(default="local", description="a recipe name from recipes/ (e.g. lumi-g, puhti, local), or a "
                        "recipe file's path (with a '/' or ending in .yaml, e.g. ./mysite.yaml from `envrun recipe "
                        "draft`), read from the spec file's directory")
    base: BaseImage
    python: PythonEnv = PythonEnv()
    env: dict[EnvName, EnvValue] = Field(
        default_factory=dict, description="environment variables set inside the image, in the order written: a value "
        "is literal (no $ expansion); {prepend: P} / {append: P} add P to the variable's value, joined with ':'")
    env_shell: str = Field(
        default="", description="shell lines sourced at every container start, after env: and in the order written, "
        "for what env: cannot say (an export under if/case, a value computed at start); as in any sourced script, "
        "a NAME=value without export sets a shell variable only")
    labels: dict[str, TextValue] = Field(default_factory=dict, description="image labels (apptainer inspect)")
    files: tuple[FileCopy, ...] = ()
    post: tuple[str, ...] = Field(default=(), description="shell commands run inside the image after installs")
    tests: tuple[str, ...] = Field(default=(), description="shell commands run inside the finished image; any failure stops the build")
    overlay: OverlaySettings | None = Field(
        default=None, description="build a squashfs venv overlay (NAME.sqsh) on the base image instead of an image"
    )
    conda: CondaEnv | None = Field(
        default=None, description="a conda environment (as in environment.yml), built into the image by cotainr"
    )

    @field_validator("overlay", mode="before")
    @classmethod
    def _empty_overlay_is_defaults(cls, value: Any) -> Any:
        # `overlay:` written with nothing after it asks for an overlay with the defaults, not for an image.
        # (Only a key present in the spec gets here: a spec without overlay: keeps the default None.)
        return {} if value is None else value

    @model_validator(mode="after")
    def _check_conda(self) -> Spec:
        if self.conda is None:
            return self
        if self.overlay is not None:
            raise ValueError("a conda environment is built into an image by cotainr, not into an overlay; "
                             "remove overlay: (or conda: and list pip packages under python.packages)")
        if self.python.requirements() or self.python != PythonEnv():
            raise ValueError("with conda:, the image's Python is the conda environment's: list pip packages under "
                             "conda.pip (or conda.dependencies as - pip: [...]) and remove python:")
        if self.base.kind == "debootstrap":
            raise ValueError("cotainr starts from an image: write base: docker://<image>, oras://<image> or "
                             "localimage:<path> (debootstrap bases are for envbuild's own venv builds)")
        return self

    @model_validator(mode="after")
    def _check_python_target(self) -> Spec:
        target = self.python.target
        if target == "envbuild-venv":
            return self
        if self.overlay is not None:
            raise ValueError(f"python.target: {target} does not apply to overlays (an overlay is always a venv over "
                             "the base's Python); remove the line")
        if self.python.installer == "uv":
            raise ValueError(f"python.installer: uv with python.target: {target}: uv does not count the base's "
                             "packages as installed and would install a second copy beside them; remove the "
                             "installer line (pip is used) or write python.target: envbuild-venv")
        return self

    @model_validator(mode="after")
    def _check_overlay(self) -> Spec:
        if self.overlay is None:
            return self
        if self.base.kind != "localimage":
            raise ValueError(
                f"an overlay is made on an existing image file, but base is {self.base.describe()}; "
                "pull it once (apptainer pull base.sif docker://...) and write base: localimage:base.sif"
            )
        used = [name for name in _NOT_IN_OVERLAY if getattr(self, name)]
        if used:
            raise ValueError("an overlay spec cannot have " + "; ".join(f"{name} ({_NOT_IN_OVERLAY[name]})" for name in used))
        if self.python.installer == "uv":
            raise ValueError(
                "python.installer: uv is not used for overlays: uv does not count the packages a base venv provides "
                "as installed and reinstalls them into the overlay (measured with uv 0.13.9); remove the line (pip is used)"
            )
        if self.python.interpreter != "python3":
            raise ValueError("python.interpreter does not apply to overlays; write overlay: {python: /path/in/image/bin/python}")
        return self

    @field_validator("env_shell")
    @classmethod
    def _env_shell_is_closed(cls, value: str) -> str:
        if "\0" in value:
            raise ValueError("holds a NUL character, which no shell script can")
        lexer = shlex.shlex(value, posix=True)
        lexer.whitespace_split, lexer.commenters = True, "#"
        try:
            list(lexer)
        except ValueError:
            raise ValueError("a quote is not closed by the end of env_shell; every container start would stop "
                             "at it") from None
        return value.strip("\n")

    @field_validator("labels")
    @classmethod
    def _no_reserved_labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not key.strip():
                raise ValueError("a label with an empty key; write the key before its value (labels: {version: '1.0'})")
            if key.startswith("org.envbuild."):
                raise ValueError(f"label {key!r} uses the prefix org.envbuild., which envbuild writes itself")
        return value
