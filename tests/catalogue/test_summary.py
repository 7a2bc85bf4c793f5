"""One image's catalogue line (pure): compression and who can run it, base, build record facts; and the
same read from the committed fixture images (tests/fixtures/inventory) and a small overlay."""

from __future__ import annotations

from pathlib import Path

import pytest

from envbuild.catalogue.summary import EVERY_RUNTIME, base_of, build_facts, runtime_requirement, summarize
from envbuild.inventory.imagefacts import ImageFacts, read_image_facts
from tests.support.inventory_layout import fixture_image
from tests.support.overlay_fixtures import make_overlay


@pytest.mark.parametrize(("compression", "needs", "limited"), [
    ("gzip", EVERY_RUNTIME, False),
    ("zstd", "zstd images run only on apptainer >= 1.4.0", True),  # envbuild.sif.writer's note
    ("xz", "xz images need apptainer >= 1.0 or singularity >= 3.0", True),
    ("lzo", "lzo: a compression envbuild does not write, not checked", True),
    ("", "", False),  # a sandbox directory
])
def test_runtime_requirement_comes_from_the_build_s_compression_notes(compression: str, needs: str, limited: bool) -> None:
    text, is_limited = runtime_requirement(compression)
    assert text.startswith(needs) and is_limited is limited


def test_base_from_record_then_envbuild_label_then_apptainer_labels() -> None:
    facts = ImageFacts(path="x.sif", labels={"org.envbuild.base": "debootstrap:bookworm"})
    assert base_of(facts, {"base": {"ref": "docker://rocm/pytorch:6.2"}}) == "docker://rocm/pytorch:6.2"
    assert base_of(facts, None) == "debootstrap:bookworm"
    bootstrap = "org.label-schema.usage.singularity.deffile.bootstrap"
    source = "org.label-schema.usage.singularity.deffile.from"
    assert base_of(ImageFacts(path="x", labels={bootstrap: "docker", source: "rocm/pytorch"}), None) == "docker://rocm/pytorch"
    assert base_of(ImageFacts(path="x", labels={bootstrap: "localimage", source: "/a.sif"}), None) == "localimage:/a.sif"
    assert base_of(ImageFacts(path="x"), None) == ""


def test_build_facts_of_an_image_record_and_an_overlay_record() -> None:
    record = {"built_at": "2026-11-20T09:30:00Z", "envbuild_version": "0.1.0", "spec": {"name": "s"}, "system": "lumi",
              "installer": "uv 0.13.9", "runtime": {"version": "apptainer version 1.4.5"}, "compression": "zstd", "lock": None}
    assert build_facts(record, overlay=False) == {
        "built": "2026-11-20T09:30:00Z", "envbuild": "0.1.0", "spec": "s", "system": "lumi", "installer": "uv 0.13.9",
        "build runtime": "apptainer version 1.4.5", "compression": "zstd", "lock": "none"}
    overlay = {"built_at": "t", "name": "env", "spec": {"name": "env"}, "mount": "/user-software",
               "installer": {"name": "pip", "version": "24.0"}, "lock": {"sha256": "f" * 64}}
    assert build_facts(overlay, overlay=True) == {"built": "t", "spec": "env", "installer": "pip 24.0",
                                                  "mount": "/user-software", "lock": "sha256 ffffffffffff"}
    assert build_facts(None, overlay=False) == {}


@pytest.mark.parametrize("compression", ["gzip", "zstd"])
def test_fixture_images_summarized(compression: str) -> None:
    path = str(fixture_image(compression))
    line = summarize(path, read_image_facts(path), "a.sif")
    assert (line.kind, line.arch, line.compression) == ("SIF", "amd64", compression)
    assert line.runtime_limited is (compression == "zstd")
    assert line.size == Path(path).stat().st_size
    assert {"team": "tests", "variant": "a"}.items() <= line.labels.items()
    assert line.base.startswith("localimage:")  # apptainer's deffile labels: built from a sandbox
    assert line.build == {} and line.build_record is None  # the fixtures have no /.envbuild/build.json
    assert line.packages == 21 and len(line.environments) == 6
    assert sum(env.packages for env in line.environments) == line.packages
    assert [p.split(": ")[0].rsplit("/", 2)[-2] for p in line.problems] == ["broken-1.0.dist-info"]


def test_overlay_summarized_from_its_record(tmp_path: Path) -> None:
    path = str(make_overlay(tmp_path, "env"))
    line = summarize(path, read_image_facts(path), "env.sqsh")
    assert (line.kind, line.compression, line.base) == ("overlay", "gzip", "localimage:/images/base.sif")
    assert line.build["mount"] == "/user-software" and line.build["installer"] == "pip 24.0"
    assert [(e.prefix, e.kind, e.packages) for e in line.environments] == [("/user-software", "venv", 2)]
