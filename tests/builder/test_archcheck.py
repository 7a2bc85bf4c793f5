"""Architecture is part of the target: a spec for aarch64 nodes on this x86_64 machine (or a base of another
architecture than the system's) stops at once, before any download, naming both architectures and the fix."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from envbuild.host.arch import host_arch
from tests.conftest import REPO, run_cli
from tests.support.archfixtures import recipes_with_arm_system, recording_tools, sif_with_arch

ENVBUILD = str(REPO / "bin" / "envbuild")
FIXTURE_SIF = REPO / "tests" / "fixtures" / "inventory" / "layout-a.gzip.sif"  # its header says amd64

pytestmark = pytest.mark.skipif(host_arch() != "x86_64", reason="written for an x86_64 build machine")


@pytest.fixture
def setup(tmp_path: Path) -> dict[str, Path]:
    record = tmp_path / "started.txt"
    tools = recording_tools(tmp_path / "tools", record)
    return {"recipes": recipes_with_arm_system(tmp_path / "recipes"), "cache": tmp_path / "store", "record": record,
            "tools": tools, "dir": tmp_path}


def _run(setup: dict[str, Path], *args: str) -> tuple[object, float]:
    import os

    env = {"ENVBUILD_RECIPES": str(setup["recipes"]), "ENVBUILD_CACHE_DIR": str(setup["cache"]),
           "PATH": f"{setup['tools']}:{os.environ['PATH']}"}
    started = time.monotonic()
    result = run_cli([ENVBUILD, *args], env_extra=env, timeout=120, cwd=setup["dir"])
    return result, time.monotonic() - started


def _nothing_started(setup: dict[str, Path]) -> None:
    assert not setup["record"].exists(), f"a runtime or debootstrap was started: {setup['record'].read_text()}"
    stored = {p.name for p in setup["cache"].iterdir()} if setup["cache"].exists() else set()
    # recipes/ and runtime/ are caches of the recipe and of `apptainer --version`: no base, no download cache
    assert stored <= {"recipes", "runtime"}, f"the store holds {stored}: something was fetched or prepared"


@pytest.mark.parametrize("base", ["debootstrap:bookworm", "docker://docker.io/library/python:3.12"])
def test_an_aarch64_system_on_this_x86_64_machine_stops_before_any_download(setup: dict[str, Path], base: str) -> None:
    spec = setup["dir"] / "arm.yaml"
    spec.write_text(f"name: armenv\nsystem: armsys\nbase: {base}\npython:\n  packages: [rich]\n")
    for extra in ([], ["--dry-run"]):
        result, seconds = _run(setup, "build", str(spec), "-o", str(setup["dir"] / "armenv.sif"), *extra)
        assert result.returncode == 1, result.stdout + result.stderr
        assert seconds < 15, f"took {seconds:.1f} s: the refusal must come before any work"
        assert "Traceback" not in result.stderr
        message = result.stderr
        assert f"error: {spec}: system armsys runs aarch64 (armsys.yaml:3 architecture)" in message.replace("recipes/", "")
        assert "but this machine is x86_64" in message and "exec format error" in message
        assert "fix: build on an aarch64 machine (armsys's login node" in message and "envbuild lock" in message
    assert not (setup["dir"] / "armenv.lock").exists(), "no lock is resolved for a build that cannot happen"
    _nothing_started(setup)


def test_a_local_base_of_another_architecture_is_refused(setup: dict[str, Path]) -> None:
    sif_with_arch(FIXTURE_SIF, setup["dir"] / "arm-base.sif")
    spec = setup["dir"] / "local.yaml"
    spec.write_text("name: onarm\nsystem: local\nbase: localimage:arm-base.sif\npython:\n  packages: [rich]\n")
    result, _ = _run(setup, "build", str(spec), "--dry-run")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "the base localimage:arm-base.sif is aarch64, but system local runs x86_64" in result.stderr
    assert "fix: give a base built for x86_64" in result.stderr
    overlay = setup["dir"] / "overlay.yaml"
    overlay.write_text("name: ov\nsystem: local\nbase: localimage:arm-base.sif\noverlay: {}\npython:\n  packages: [rich]\n")
    result, _ = _run(setup, "build", str(overlay), "-o", str(setup["dir"] / "ov.sqsh"))
    assert result.returncode == 1 and "is aarch64, but system local runs x86_64" in result.stderr, result.stderr
    _nothing_started(setup)


def test_the_dry_run_names_the_target_architecture(setup: dict[str, Path]) -> None:
    spec = setup["dir"] / "local.yaml"
    spec.write_text(f"name: onx86\nsystem: local\nbase: localimage:{FIXTURE_SIF}\npython:\n  packages: [rich]\n")
    result, _ = _run(setup, "build", str(spec), "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "# target architecture: x86_64 (system local); this machine: x86_64; base: x86_64" in result.stdout
