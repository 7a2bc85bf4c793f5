"""Builds into file systems that fill up (issue 15): a store on a small tmpfs and an output on a smaller
one. Each gives a clear message naming the file system and the space needed, leaves no partial image,
and keeps the store consistent. Needs root to mount the tmpfs (CI runs as root)."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.support.build_faults import ENVBUILD, assert_nothing_left, write_spec

pytestmark = [pytest.mark.apptainer, pytest.mark.slow]


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[callable]:
    mounted: list[Path] = []

    def mount(name: str, size: str) -> Path:
        if os.geteuid() != 0:
            pytest.fail("mounting a size-limited tmpfs needs root (CI runs as root)", pytrace=False)
        path = tmp_path / name
        path.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
        mounted.append(path)
        return path

    yield mount
    for path in reversed(mounted):
        subprocess.run(["umount", "-l", str(path)], check=False)


def build(spec: Path, output: Path, store: Path) -> subprocess.CompletedProcess[str]:
    return run_cli([ENVBUILD, "build", str(spec), "-o", str(output), "--compression", "zstd"],
                   env_extra={"ENVBUILD_CACHE_DIR": str(store)}, timeout=600)


def test_a_store_that_fills_up_says_which_file_system_and_how_much(tmp_path: Path, debootstrap_base: Path,
                                                                     small_fs: callable) -> None:
    """350 MB: the base (about 230 MB) fits; what comes after it does not. The env layer hard-links the base
    (issue 17), so the first step to run out is the one that writes the most new data after it: env when it
    installs, else the sandbox for the image layer."""
    store = small_fs("store", "350m")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    spec = write_spec(tmp_path, debootstrap_base)
    result = build(spec, out_dir / "fault.sif", store)
    assert result.returncode == 1, result.stderr
    message = result.stderr
    assert re.search(r"step '(env|sandbox)' ran out of space", message), message
    assert f"the file system mounted at {store} (tmpfs" in message, message
    assert re.search(r"it needs about \d+\.\d MB \(the copy of .*/(bases|envs)/.*/rootfs\)", message), message
    assert "fix: free space on" in message
    assert_nothing_left(store, out_dir, out_dir / "fault.sif")


def test_an_output_without_room_is_refused_before_copying(tmp_path: Path, debootstrap_base: Path,
                                                          small_fs: callable) -> None:
    """The store has room, the output's file system (8 MB) does not: refused before a byte is copied; the
    finished image stays in the store, and a build to a roomier place takes it from there."""
    store = tmp_path / "store"
    out_dir = small_fs("out", "8m")
    spec = write_spec(tmp_path, debootstrap_base)
    result = build(spec, out_dir / "fault.sif", store)
    assert result.returncode == 1, result.stderr
    assert f"step 'output' does not have room for {out_dir}/fault.sif.partial-" in result.stderr, result.stderr
    assert f"the file system mounted at {out_dir} (tmpfs" in result.stderr
    assert re.search(r"it needs about \d+\.\d MB \(the image .*/images/.*/image\.sif\)", result.stderr), result.stderr
    assert_nothing_left(store, out_dir, out_dir / "fault.sif")
    elsewhere = tmp_path / "roomy"
    again = build(spec, elsewhere / "fault.sif", store)
    assert again.returncode == 0 and "image unchanged, taken from the store" in again.stderr, again.stderr
