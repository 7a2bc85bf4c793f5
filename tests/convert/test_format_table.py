"""The import/export formats are slots: one module per format (its import and its export), each an entry of the
one table in envbuild.convert.formats, which detection and the CLI's --format choices read."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import click
import pytest

from envbuild.cli.convert_cmds import export_command, import_command
from envbuild.convert.formats import FORMATS, BuildFileFormat, detect_format, format_names
from envbuild.shared.errors import UsageError

CONVERT = Path(__file__).resolve().parents[2] / "envbuild" / "convert"
# The modules of envbuild/convert/ that are no format: what the formats share. Every other module is a format
# and must be in the table.
SHARED_MODULES = {"__init__", "formats", "specbuilder", "specexport", "buildargs", "envassign", "shellscript"}


def _module_of(target: str) -> str:
    return target.partition(":")[0]


def test_every_format_module_is_in_the_table() -> None:
    modules = {f"envbuild.convert.{path.stem}" for path in CONVERT.glob("*.py") if path.stem not in SHARED_MODULES}
    in_table = {_module_of(fmt.importer) for fmt in FORMATS}
    assert modules == in_table, "a module in envbuild/convert/ that is not a format of envbuild.convert.formats.FORMATS " \
                                "(register it there, or name it in SHARED_MODULES if the formats share it)"


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda fmt: fmt.name)
def test_each_entry_names_functions_that_exist_in_one_module(fmt: BuildFileFormat) -> None:
    assert _module_of(fmt.importer) == _module_of(fmt.exporter), "a format's import and export live in one module"
    for target, parameters in ((fmt.importer, ["text", "name", "src_prefix", "build_args", "source", "read_base"]),
                               (fmt.exporter, ["data"])):
        module, _, attribute = target.partition(":")
        function = getattr(importlib.import_module(module), attribute, None)
        assert callable(function), f"{target} does not exist"
        assert list(inspect.signature(function).parameters) == parameters, target


def test_names_are_unique() -> None:
    assert len(format_names()) == len(set(format_names())) == len(FORMATS)


@pytest.mark.parametrize("command", [import_command, export_command], ids=["import", "export"])
def test_the_cli_format_choices_are_the_table(command: click.Command) -> None:
    option = next(param for param in command.params if param.name == "fmt")
    assert isinstance(option.type, click.Choice)
    assert list(option.type.choices) == format_names() == sorted(fmt.name for fmt in FORMATS)


@pytest.mark.parametrize(("filename", "text", "expected"), [
    ("Dockerfile", "", "dockerfile"), ("app.dockerfile", "", "dockerfile"), ("Containerfile", "", "dockerfile"),
    ("Dockerfile.def", "", "dockerfile"),  # the name that says Dockerfile wins over the extension
    ("env.def", "", "def"), ("env.singularity", "", "def"), ("Singularity", "", "def"),
    ("build.txt", "# comment\n\nBootstrap: docker\n", "def"), ("build.txt", "\nARG V=1\nFROM x\n", "dockerfile"),
    # no telling name: the content says it (the LUMI AI Factory's templates start with a line their scripts replace)
    ("Venv_Torch", "@@ BUILD_ARGS @@\n\nFROM $BASE_IMAGE:$BASE_IMAGE_TAG\nARG BASE_IMAGE\n", "dockerfile"),
    ("Venv_Torch", "ARG BASE_IMAGE\nARG BASE_IMAGE_TAG\nFROM $BASE_IMAGE:$BASE_IMAGE_TAG\n", "dockerfile"),
    ("Ubuntu2404_Rocm", "# ROCm\nRUN apt-get update\n", "dockerfile"),
    ("pytorch_env", "# built with apptainer\nBootStrap: docker\nFrom: ubuntu:24.04\n\n%post\n    run_it\n", "def"),
])
def test_detection_reads_the_table(filename: str, text: str, expected: str) -> None:
    assert detect_format(text, filename).name == expected


def test_a_file_nothing_says_is_refused_with_the_choices() -> None:
    with pytest.raises(UsageError, match="is a definition file or a Dockerfile") as caught:
        detect_format("echo hi\nmake all\nfrom_here=1\n", "build.txt")
    assert caught.value.hint == "pass --format def or --format dockerfile"
