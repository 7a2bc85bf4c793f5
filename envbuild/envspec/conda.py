"""`conda:` in a spec, and plain conda environment files (`envbuild build env.yml --system lumi-g`).

Such specs build through cotainr (envbuild.builder.plan.condaplan): cotainr installs Miniforge into the image and
runs `conda env create` on the env file envbuild writes from this section. The section mirrors a conda env
file, so a file users already have reads as it is: `channels`, `dependencies` (conda match specs) with an
optional `{pip: [...]}` item whose lines are requirements or pip options (`--extra-index-url URL`).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any

import yaml
from packaging.requirements import InvalidRequirement, Requirement
from pydantic import Field, field_validator, model_validator

from envbuild.shared.strictmodel import StrictModel

# Where cotainr installs conda and the name it gives the environment (cotainr 2025.7.1, cli.py/pack.py):
# the image's Python is then CONDA_ENV_PREFIX/bin/python, activated by cotainr's env script.
CONDA_PREFIX = "/opt/cotainr/conda"
CONDA_ENV_NAME = "conda_container_env"
CONDA_ENV_PREFIX = f"{CONDA_PREFIX}/envs/{CONDA_ENV_NAME}"

# pip options that may appear in an env file's pip list, with a value (conda passes the list to pip as
# a requirements file, where these are allowed: pip's "Requirements File Format").
PIP_OPTIONS_WITH_VALUE = ("--index-url", "-i", "--extra-index-url", "--find-links", "-f", "--trusted-host",
                          "--constraint", "-c", "--requirement", "-r")
PIP_FLAGS = ("--pre", "--no-index", "--prefer-binary", "--only-binary", "--no-binary")
# A conda match spec: name, optional version / build ("numpy=1.26.3", "python>=3.11", "pytorch::torch",
# "conda-forge::numpy=1.26=py311*"). Checked loosely: conda itself is the judge.
CONDA_SPEC = re.compile(r"^([A-Za-z0-9_.-]+::)?[A-Za-z0-9_.-]+(\[[^\]]*\])?(\s*[=<>!~][^\s]*)?(\s+[^\s]+)?$")


@dataclass(frozen=True)
class PipPart:
    """The pip list split into what pip is told (options) and what it installs (requirements)."""

    index_urls: tuple[str, ...]
    find_links: tuple[str, ...]
    requirements: tuple[str, ...]


class CondaEnv(StrictModel):
    """A conda environment, as in an environment.yml."""

    name: str | None = Field(default=None, description="the env file's name: (informational; cotainr names the env itself)")
    channels: tuple[str, ...] = Field(default=(), description="conda channels, e.g. conda-forge (names or URLs)")
    dependencies: tuple[str, ...] = Field(default=(), description="conda match specs, e.g. python=3.12 or numpy>=2")
    pip: tuple[str, ...] = Field(
        default=(), description="pip lines installed after the conda packages: requirements or options such as "
        "--extra-index-url https://download.pytorch.org/whl/rocm6.2",
    )
    accept_licenses: bool = Field(
        default=False, description="you accept the Miniforge installer's license (cotainr --accept-licenses); "
        "without it cotainr asks interactively, which a batch job cannot answer",
    )

    @model_validator(mode="before")
    @classmethod
    def _pip_item_in_dependencies(cls, value: Any) -> Any:
        """An env file writes the pip list as a `{pip: [...]}` item of `dependencies`; take it from there."""
        if not isinstance(value, dict) or not isinstance(value.get("dependencies"), list):
            return value
        value = dict(value)
        conda, pip = [], list(value.get("pip") or ())
        for item in value["dependencies"]:
            if isinstance(item, dict) and set(item) == {"pip"}:
                pip += list(item["pip"] or ())
            else:
                conda.append(item)
        value["dependencies"], value["pip"] = conda, pip
        return value

    @field_validator("dependencies", mode="before")
    @classmethod
    def _numbers_as_text(cls, value: Any) -> Any:
        return [str(item) if isinstance(item, (int, float)) and not isinstance(item, bool) else item
                for item in value] if isinstance(value, list) else value

    @field_validator("dependencies")
    @classmethod
    def _conda_specs(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for item in value:
            if not CONDA_SPEC.match(item.strip()):
                raise ValueError(f"{item!r} is not a conda package spec (write e.g. numpy=1.26.3 or python>=3.11)")
        return value

    @field_validator("pip")
    @classmethod
    def _pip_lines(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        split_pip_lines(value)  # raises ValueError naming the line
        return value

    def pip_part(self) -> PipPart:
        return split_pip_lines(self.pip)

    def env_file(self, name: str) -> str:
        """The environment.yml cotainr is given (`conda env create -f`)."""
        dependencies: list[Any] = list(self.dependencies)
        if self.pip:
            if not any(re.match(r"^pip(\s*[=<>!~].*)?$", d.strip()) for d in self.dependencies):
                dependencies.append("pip")  # conda warns and skips the pip list when pip itself is not listed
            dependencies.append({"pip": list(self.pip)})
        document: dict[str, Any] = {"name": self.name or name}
        if self.channels:
            document["channels"] = list(self.channels)
        document["dependencies"] = dependencies
        return yaml.safe_dump(document, sort_keys=False, default_flow_style=False, width=1000)


def split_pip_lines(lines: tuple[str, ...] | list[str]) -> PipPart:
    """Options and requirements of a pip list; a ValueError naming the first line that is neither."""
    index_urls: list[str] = []
    find_links: list[str] = []
    requirements: list[str] = []
    for line in lines:
        text = str(line).split(" #", 1)[0].strip()
        if not text:
            continue
        if text.startswith("-"):
            words = shlex.split(text)
            option, _, inline = words[0].partition("=")
            if option in PIP_FLAGS or option in ("--no-deps", "--upgrade", "-U"):
                continue
            if option not in PIP_OPTIONS_WITH_VALUE:
                raise ValueError(f"pip line {line!r}: unknown pip option {option}")
            argument = inline or (words[1] if len(words) > 1 else "")
            if not argument:
                raise ValueError(f"pip line {line!r}: {option} needs a value")
            if option in ("--index-url", "-i", "--extra-index-url"):
                index_urls.append(argument)
            elif option in ("--find-links", "-f"):
                find_links.append(argument)
            continue
        try:
            Requirement(text)
        except InvalidRequirement as exc:
            if re.match(r"^(git\+|https?://|file:|\.{0,2}/)", text):
                requirements.append(text)  # a URL or path requirement: pip's business
                continue
            raise ValueError(f"pip line {line!r} is not a requirement: {str(exc).splitlines()[0]}") from None
        requirements.append(text)
    return PipPart(tuple(index_urls), tuple(find_links), tuple(requirements))


def looks_like_conda_env_file(data: Any) -> bool:
    """A plain conda env file: `dependencies:` at the top and none of a spec's own keys."""
    return isinstance(data, dict) and "dependencies" in data and not ({"base", "conda", "python", "version"} & set(data))


def spec_from_env_file(data: dict[str, Any], *, name: str, system: str, base: str, source: str,
                       accept_licenses: bool = False) -> str:
    """The spec text for a plain conda env file: everything of the file under `conda:`; the base image
    is the system recipe's cotainr base (`cotainr --system` does the same with its systems.json)."""
    conda: dict[str, Any] = {key: data[key] for key in ("channels", "dependencies") if key in data}
    if data.get("name"):
        conda = {"name": data["name"], **conda}
    if accept_licenses:
        conda["accept_licenses"] = True
    unknown = sorted(set(data) - {"name", "channels", "dependencies", "prefix", "variables"})
    if unknown:
        raise ValueError(f"unknown key(s) in the conda env file: {', '.join(unknown)}")
    spec: dict[str, Any] = {"name": name, "system": system, "base": base, "conda": conda}
    if data.get("variables"):
        spec["env"] = {str(k): str(v) for k, v in data["variables"].items()}
    header = (f"# Generated by envbuild from the conda environment file {source}: its content is under conda:,\n"
              f"# the base image is the {system} recipe's cotainr base. Edit this spec to change either.\n")
    return header + yaml.safe_dump(spec, sort_keys=False, default_flow_style=False, width=1000)
