"""The import/export formats, in one table: each format's `--format` name, how a file is told to be one, and the
functions that read it into a spec and write a spec as it. Detection, the `--format` choices of `envbuild import`
and `envbuild export` and both commands read this table; a new format is one module beside deffile.py and
dockerfile.py (its import and its export) and one entry here.

The functions are named as "module:function" and imported when used: `envbuild --help` loads this module for the
commands' options, and the readers and writers bring pydantic and PyYAML with them.
"""

from __future__ import annotations

import importlib
import re
from typing import TYPE_CHECKING, NamedTuple, Protocol, cast

from envbuild.shared.errors import UsageError

if TYPE_CHECKING:
    from envbuild.convert.specbuilder import ImportResult
    from envbuild.convert.specexport import ExportInput
    from envbuild.inventory.registryconfig import ConfigReader


class ImportFunction(Protocol):
    def __call__(self, text: str, name: str, *, src_prefix: str = "", build_args: dict[str, str] | None = None,
                 source: str = ..., read_base: ConfigReader | None = None) -> ImportResult: ...


class ExportFunction(Protocol):
    def __call__(self, data: ExportInput) -> str: ...


class BuildFileFormat(NamedTuple):
    """One format of definition file or Dockerfile that envbuild imports and exports."""

    name: str  # the --format value
    title: str  # what its files are called in messages ("a Dockerfile")
    export_help: str  # what `envbuild export --format NAME` writes, for its help
    file_names: re.Pattern[str]  # searched in a file's name (in lower case): a name that says this format
    telling_line: re.Pattern[str]  # matched with each line, when no name says it: a line only this format has
    importer: str  # "module:function", an ImportFunction
    exporter: str  # "module:function", an ExportFunction

    def import_text(self, text: str, name: str, *, src_prefix: str, build_args: dict[str, str],
                    source: str, read_base: ConfigReader | None = None) -> ImportResult:
        """`text`, read from `source`, as the spec `name`; `src_prefix` leads the spec's files[] sources to the
        file's directory from the spec's; `read_base` reads a base image's config from its registry (None: not
        read, envbuild import --offline)."""
        function = cast("ImportFunction", _function(self.importer))
        return function(text, name, src_prefix=src_prefix, build_args=build_args, source=source, read_base=read_base)

    def export_text(self, data: ExportInput) -> str:
        return cast("ExportFunction", _function(self.exporter))(data)


# In the order detection tries their file names: a name that says Dockerfile wins over the .def extension
# (Dockerfile.def is a Dockerfile). Users see the formats sorted by name (format_names).
FORMATS: tuple[BuildFileFormat, ...] = (
    BuildFileFormat("dockerfile", "a Dockerfile", "a Dockerfile",
                    re.compile(r"dockerfile|^containerfile"), re.compile(r"(from|arg|run)\s+\S", re.I),
                    "envbuild.convert.dockerfile:import_dockerfile", "envbuild.convert.dockerfile:export_dockerfile"),
    BuildFileFormat("def", "a definition file", "an Apptainer definition file (apptainer build --fakeroot)",
                    re.compile(r"\.(def|singularity)\Z|^singularity"), re.compile(r"bootstrap\s*:", re.I),
                    "envbuild.convert.deffile:import_def", "envbuild.convert.deffile:export_def"),
)


def _function(target: str) -> object:
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)


def sorted_formats() -> list[BuildFileFormat]:
    """The formats as users see them (choices, help, messages): by name."""
    return sorted(FORMATS, key=lambda fmt: fmt.name)


def format_names() -> list[str]:
    """The `--format` choices."""
    return [fmt.name for fmt in sorted_formats()]


def format_named(name: str) -> BuildFileFormat:
    for fmt in FORMATS:
        if fmt.name == name:
            return fmt
    raise UsageError(f"no import/export format {name!r}", "use --format " + " or --format ".join(format_names()))


def detect_format(text: str, filename: str) -> BuildFileFormat:
    """The format `filename` says, else the one its content says: the first line (neither blank nor a comment)
    that one format's telling line matches (`Bootstrap:` a definition file, `FROM`/`ARG`/`RUN` a Dockerfile).
    Files with no telling name (the LUMI AI Factory's containerfiles/torch/Venv_Torch, which starts with a line
    its build scripts replace) are told by their content."""
    lower = filename.lower()
    for fmt in FORMATS:
        if fmt.file_names.search(lower):
            return fmt
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        for fmt in FORMATS:
            if fmt.telling_line.match(stripped):
                return fmt
    formats = sorted_formats()
    raise UsageError(f"cannot tell whether {filename} is " + " or ".join(fmt.title for fmt in formats),
                     "pass " + " or ".join(f"--format {fmt.name}" for fmt in formats))


def export_spec(data: ExportInput, fmt: BuildFileFormat) -> str:
    """The spec written in `fmt`; an overlay spec has no image of its own to write."""
    if data.spec.overlay is not None:
        titles = " or ".join(other.title for other in sorted_formats())
        raise UsageError(f"an overlay spec makes a venv overlay on an existing image, not an image {titles} can build",
                         "export a spec without overlay:")
    return fmt.export_text(data)
