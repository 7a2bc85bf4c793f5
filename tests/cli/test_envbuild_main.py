"""`envbuild build --locked` as a user runs it (bin/envbuild in a subprocess): a missing lock is refused
before anything is looked up or built, and a lock made for another Python than the base's is refused
by the build itself (apptainer: the check runs the base's interpreter)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from envbuild.builder.sessions.buildrequest import torch_index_for
from envbuild.envspec.loadspec import load_spec
from envbuild.lock.fileformat import render_lock
from envbuild.lock.lockmodel import Lock, LockedPackage, LockTarget, lock_inputs
from tests.conftest import REPO, run_cli, seeded_store

ENVBUILD = str(REPO / "bin" / "envbuild")

TINY = """\
name: tiny
system: local
base: debootstrap:bookworm
python:
  packages:
    - six
"""


def write_spec(directory: Path) -> Path:
    path = directory / "tiny.yaml"
    path.write_text(TINY)
    return path


def test_locked_build_without_a_lock_names_the_file_and_the_fix(tmp_path: Path) -> None:
    spec = write_spec(tmp_path)
    output = tmp_path / "out" / "tiny.sif"
    # A PATH with bash and readlink only (what bin/envbuild needs): the refusal comes before any tool
    # (apptainer, uv) is looked for, so it is the same on a machine without them.
    tools = tmp_path / "tools"
    tools.mkdir()
    for name in ("bash", "readlink"):
        found = shutil.which(name)
        assert found
        (tools / name).symlink_to(found)
    result = run_cli([ENVBUILD, "build", str(spec), "-o", str(output), "--locked"],
                     env_extra={"ENVBUILD_CACHE_DIR": str(tmp_path / "store"), "PATH": str(tools)}, timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.splitlines() == [
        f"error: --locked: there is no lock file {tmp_path / 'tiny.lock'} for {spec}",
        f"  fix: create it with: envbuild lock {spec}",
    ]
    assert not output.exists() and not (tmp_path / "store").exists(), "nothing was built or stored"


def test_dry_run_locked_without_a_lock_is_refused_the_same_way(tmp_path: Path) -> None:
    spec = write_spec(tmp_path)
    result = run_cli([ENVBUILD, "build", str(spec), "--locked", "--dry-run"],
                     env_extra={"ENVBUILD_CACHE_DIR": str(tmp_path / "store")}, timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"there is no lock file {tmp_path / 'tiny.lock'}" in result.stderr
    assert f"fix: create it with: envbuild lock {spec}" in result.stderr


@pytest.fixture
def store(tmp_path: Path, build_cache: Path) -> Path:
    """A fresh store holding the shared cache's complete debootstrap bases (hard links), as in
    tests/integration/test_build_store.py: nothing is debootstrapped twice."""
    return seeded_store(tmp_path / "store", build_cache, uv_cache=False)


@pytest.mark.apptainer
def test_locked_build_refuses_a_lock_for_another_python(tmp_path: Path, store: Path) -> None:
    """A lock that is fresh for the spec but was made for Python 3.12 (the bookworm base has 3.11):
    the build stops before installing, names both versions and says to re-lock; no image is written."""
    spec = write_spec(tmp_path)
    loaded = load_spec(spec)
    lock = Lock(inputs=lock_inputs(loaded.spec, torch_index_for(loaded)),
                target=LockTarget(python="3.12.1", platform="x86_64-manylinux_2_36"),
                base_digest="sha256:" + "0" * 64, recipe_digest="sha256:" + "0" * 64, resolver="uv 0.13.9",
                packages=(LockedPackage("six", "1.17.0", ("sha256:" + "a" * 64,)),), spec_name="tiny")
    (tmp_path / "tiny.lock").write_text(render_lock(lock, spec_path_for_comment=str(spec)))
    output = tmp_path / "tiny.sif"
    result = run_cli([ENVBUILD, "build", str(spec), "-o", str(output), "--locked"],
                     env_extra={"ENVBUILD_CACHE_DIR": str(store)}, timeout=1200)
    assert result.returncode != 0, result.stdout + result.stderr
    assert "the lock was made for Python 3.12, but the base has Python 3.11: run envbuild lock again" in result.stderr, \
        result.stderr[-4000:]
    assert not output.exists()
