"""Venv overlays on site images (issue 11), built and run with the real apptainer on three bases: the
reference image, and stand-ins for LUMI's conda-style images and the LUMI AI Factory images (site images
are not on this machine: tests/support/standin_bases.py builds look-alikes with the same layout)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import OVERLAY_BASES, OVERLAY_PACKAGE, REPO, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.apptainer]
ENVRUN = str(REPO / "bin/envrun")
ENVBUILD = str(REPO / "bin/envbuild")
BASE_PYTHON = {"envbuild": "/opt/envbuild/venv/bin/python", "lumi": "/opt/miniconda3/envs/pytorch/bin/python",
               "aif": "/opt/venv/bin/python"}
CHECK = (f"import {OVERLAY_PACKAGE}, torch, sys, json; "
         f"print('OVERLAY', json.dumps({{'prefix': sys.prefix, 'pkg': {OVERLAY_PACKAGE}.__file__, 'torch': torch.__file__}}))")


def _seen(output: str) -> dict:
    line = next(x for x in output.splitlines() if x.startswith("OVERLAY "))
    return json.loads(line.split(" ", 1)[1])


@pytest.mark.parametrize("kind", OVERLAY_BASES)
def test_build_reports_the_python_and_what_it_kept_and_added(kind: str, overlay_projects: dict[str, Path]) -> None:
    from envbuild.inventory.overlayfile import read_overlay_record

    project = overlay_projects[kind]
    said = (project / "build-output.txt").read_text()
    assert f"base Python: {BASE_PYTHON[kind]}" in said
    assert "kept from the base: torch==2.13.0" in said
    assert f"to install into the overlay: {OVERLAY_PACKAGE}" in said
    record = read_overlay_record(str(project / "extras.sqsh"))
    assert record["mount"] == "/user-software" and record["python"]["path"] == BASE_PYTHON[kind]
    assert record["python"]["activation"] == ("WITH_CONDA" if kind == "lumi" else "")
    assert [p.split("==")[0] for p in record["packages"]["added"]] == [OVERLAY_PACKAGE], "torch stays in the base"
    assert record["base"]["digest"].startswith("sha256:") and record["base"]["sif_id"]


@pytest.mark.parametrize("kind", OVERLAY_BASES)
def test_envrun_and_wrappers_see_base_and_overlay_packages(kind: str, overlay_projects: dict[str, Path]) -> None:
    project = overlay_projects[kind]
    for argv in ([ENVRUN, "--image", "base.sif", "--overlay", "extras.sqsh", "python", "-c", CHECK],
                 [ENVRUN, "python", "-c", CHECK],  # found through the envrun.yaml the build wrote
                 [str(project / "bin/python"), "-c", CHECK]):
        result = run_cli(argv, cwd=project, timeout=300)
        assert result.returncode == 0, f"{argv}: {result.stdout}{result.stderr}"
        seen = _seen(result.stdout)
        assert seen["prefix"] == "/user-software", "sys.prefix is the overlay's venv"
        assert seen["pkg"].startswith("/user-software/lib/"), seen
        assert seen["torch"].startswith(BASE_PYTHON[kind].rsplit("/bin/", 1)[0]), "torch comes from the base"


def test_unchanged_overlay_spec_is_a_no_op(overlay_projects: dict[str, Path], build_cache: Path) -> None:
    project = overlay_projects["aif"]
    result = run_cli([ENVBUILD, "build", "extras.yaml"], cwd=project, env_extra={"ENVBUILD_CACHE_DIR": str(build_cache)})
    assert result.returncode == 0, result.stderr
    assert "is up to date" in result.stderr


def test_a_different_torch_is_refused(overlay_projects: dict[str, Path], build_cache: Path, tmp_path: Path) -> None:
    project = tmp_path / "torch-change"
    project.mkdir()
    os.link(overlay_projects["aif"] / "base.sif", project / "base.sif")
    (project / "spec.yaml").write_text("name: newtorch\nbase: localimage:base.sif\noverlay: {}\n"
                                       "python: {packages: ['torch==2.5.1']}\n")
    result = run_cli([ENVBUILD, "build", "spec.yaml"], cwd=project, env_extra={"ENVBUILD_CACHE_DIR": str(build_cache)})
    assert result.returncode != 0
    assert "torch==2.5.1" in result.stderr and "the base has torch 2.13.0" in result.stderr
    assert "allow_torch_change" in result.stderr
    assert not (project / "newtorch.sqsh").exists()


def test_an_overlay_on_another_base_is_refused_unless_forced(overlay_projects: dict[str, Path]) -> None:
    aif, lumi = overlay_projects["aif"], overlay_projects["lumi"]
    argv = [ENVRUN, "--image", str(aif / "base.sif"), "--overlay", str(lumi / "extras.sqsh"), "python", "-c", CHECK]
    refused = run_cli(argv, cwd=aif, timeout=300)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert str(lumi / "base.sif") in refused.stderr and str(aif / "base.sif") in refused.stderr, "both bases named"
    assert "fix:" in refused.stderr and "--force-overlay" in refused.stderr
    forced = run_cli([*argv[:1], "--force-overlay", *argv[1:]], cwd=aif, timeout=300)
    assert "warning" in forced.stderr and "--force-overlay" in forced.stderr


def test_a_failing_with_conda_stops_the_run(overlay_projects: dict[str, Path]) -> None:
    """A LUMI-like image whose $WITH_CONDA names a missing env: envrun stops instead of running the
    image's system Python (before issue 11, dash printed "source: not found" and carried on)."""
    project = overlay_projects["lumi"]
    result = run_cli([ENVRUN, "python", "-c", "print('RAN')"], cwd=project, timeout=300,
                     env_extra={"APPTAINERENV_WITH_CONDA": "source /opt/miniconda3/bin/activate missing-env"})
    assert result.returncode == 1
    assert "RAN" not in result.stdout
    assert "could not activate the image's environment" in result.stderr


def test_packages_lists_the_combined_environment(overlay_projects: dict[str, Path]) -> None:
    project = overlay_projects["lumi"]
    result = run_cli([ENVBUILD, "packages", "base.sif", "--overlay", "extras.sqsh", "--json", "--no-cache"], cwd=project)
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert OVERLAY_PACKAGE in text and '"torch"' in text and "/user-software" in text


def test_run_wrappers_and_project_file_point_at_base_and_overlay(overlay_projects: dict[str, Path]) -> None:
    project = overlay_projects["envbuild"]
    wrapper = (project / "bin/python").read_text()
    assert "extras.sqsh:/user-software:image-src=/" in wrapper
    assert (project / "bin/torchrun").exists(), "the base's torchrun is wrapped with the overlay too"
    text = (project / "envrun.yaml").read_text()
    assert "image: base.sif" in text and "overlays: [extras.sqsh]" in text
    assert shutil.which("apptainer") or shutil.which("singularity")
