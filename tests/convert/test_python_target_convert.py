"""python.target through export and import: each target survives a definition file and a Dockerfile, and
an export writes no venv (and no venv on PATH) where the packages go into the base's own Python."""

from __future__ import annotations

import pytest

from envbuild.convert.deffile import export_def, import_def
from envbuild.convert.dockerfile import export_dockerfile, import_dockerfile
from envbuild.convert.specexport import ExportInput
from envbuild.envspec.loadspec import load_spec_text

SPEC = """\
name: rt
base: {base}
python:
  target: {target}
  packages: [einops, "timm>=1.0"]
post: ["python -c 'import torch'"]
"""
FORMATS = {"def": (export_def, import_def, "rt.def"), "dockerfile": (export_dockerfile, import_dockerfile, "rt.Dockerfile")}


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("target", ["envbuild-venv", "venv-over-base", "base"])
@pytest.mark.parametrize("base", ["docker://nvcr.io/nvidia/pytorch:25.01-py3", "docker://ubuntu:24.04"])
def test_the_target_survives_export_and_import(fmt: str, target: str, base: str) -> None:
    export, read, name = FORMATS[fmt]
    spec = load_spec_text(SPEC.format(base=base, target=target)).spec
    text = export(ExportInput(spec, "rt.yaml"))
    assert ("/opt/envbuild/venv" in text) == (target != "base")
    back = load_spec_text(read(text, "rt").render(name)).spec
    assert back.model_dump() == spec.model_dump()


def test_an_exported_base_target_installs_with_the_bases_python() -> None:
    spec = load_spec_text(SPEC.format(base="docker://nvcr.io/nvidia/pytorch:25.01-py3", target="base")).spec
    text = export_dockerfile(ExportInput(spec, "rt.yaml"))
    assert "RUN python3 -m pip install --no-cache-dir einops 'timm>=1.0'" in text
    assert "ENV PATH=" not in text and "-m venv" not in text
