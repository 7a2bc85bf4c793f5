"""A shared store against the real tools: a build records its image's digest, a tampered image in a
group-writable store is not copied out but built again, and the store then verifies clean."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli

pytestmark = [pytest.mark.apptainer]

ENVBUILD = str(REPO / "bin/envbuild")
SPEC = """\
name: tiny
system: local
base: debootstrap:bookworm
python:
  packages:
    - six
tests:
  - python -c "import six"
"""


@pytest.fixture
def store(tmp_path: Path, build_cache: Path) -> Path:
    """A fresh store holding the shared cache's complete bases (hard links: only new files are written into
    it, never through them) and its uv cache."""
    root = tmp_path / "store"
    (root / "bases").mkdir(parents=True)
    for entry in sorted((build_cache / "bases").glob("debootstrap-bookworm-*")) if (build_cache / "bases").is_dir() else []:
        if (entry / "complete").exists():
            subprocess.run(["cp", "-al", str(entry), str(root / "bases" / entry.name)], check=True)
    (build_cache / "uv").mkdir(exist_ok=True)
    (root / "uv").symlink_to(build_cache / "uv")
    return root


def envbuild(store: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli([ENVBUILD, *args], env_extra={"ENVBUILD_CACHE_DIR": str(store)})


def test_a_tampered_image_in_a_group_writable_store_is_built_again(tmp_path: Path, store: Path) -> None:
    spec, output = tmp_path / "tiny.yaml", tmp_path / "out" / "tiny.sif"
    spec.write_text(SPEC)
    first = envbuild(store, "build", str(spec), "-o", str(output), "--compression", "zstd")
    assert first.returncode == 0, first.stderr[-4000:]
    (entry,) = (store / "images").iterdir()
    record = json.loads((entry / "content.json").read_text())
    assert record["files"]["image.sif"]["size"] == (entry / "image.sif").stat().st_size == output.stat().st_size

    for directory in (store, *store.glob("*"), *store.glob("*/*")):
        if directory.is_dir() and not directory.is_symlink():
            os.chmod(directory, 0o2775)  # as a group shares it
    data = bytearray((entry / "image.sif").read_bytes())
    data[-1] ^= 0xFF  # same size: only the hash tells
    (entry / "image.sif").write_bytes(bytes(data))
    verify = envbuild(store, "cache", "verify")
    assert verify.returncode == 1 and f"MISMATCH    image/{entry.name}" in verify.stdout, verify.stdout

    output.unlink()
    again = envbuild(store, "build", str(spec), "-o", str(output), "--compression", "zstd")
    assert again.returncode == 0, again.stderr[-4000:]
    assert f"warning: image entry {entry.name} in the store {store} does not match its content record" in again.stderr
    assert "taken from the store" not in again.stderr and "[build" in again.stderr
    assert output.read_bytes() == (entry / "image.sif").read_bytes() != bytes(data)
    run = subprocess.run(["apptainer", "exec", str(output), "python", "-c", "import six"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    verify = envbuild(store, "cache", "verify")
    assert verify.returncode == 0, verify.stdout + verify.stderr
