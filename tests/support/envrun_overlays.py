"""envrun's overlays on real files, for its tests and bench/envrun_overlay_dryrun.py: the committed fixture SIF as
the base, and a squashfs overlay holding an envbuild record, made with mksquashfs as `envbuild build` writes it."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

from envbuild.shared.overlayformat import DEFAULT_MOUNT, OVERLAY_RECORD_FORMAT, RECORD_FILE
from envbuild.sif.reader import read_sif_layout
from tests.conftest import REPO

FIXTURE_SIF = REPO / "tests/fixtures/inventory/layout-a.gzip.sif"
PYTHON = {"path": "/usr/bin/python3", "version": "3.11.2", "abi": "cpython-311-x86_64-linux-gnu", "env": "/usr",
          "activation": ""}


def sha256_of(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def base_record(image: Path) -> dict[str, object]:
    """The record's `base` for an overlay built on `image`, as the build writes it."""
    return {"ref": f"localimage:{image}", "path": str(image), "digest": sha256_of(image),
            "sif_id": read_sif_layout(image).header.image_id, "size": image.stat().st_size}


def make_overlay(directory: Path, name: str, base: dict[str, object], *, mount: str = DEFAULT_MOUNT) -> Path:
    """NAME.sqsh: a squashfs with a venv's bin/python and envbuild's record, as `envbuild build` writes it."""
    tree = directory / f"{name}-tree"
    (tree / "bin").mkdir(parents=True)
    (tree / "bin/python").symlink_to(PYTHON["path"])
    (tree / RECORD_FILE).parent.mkdir()
    record = {"record_format": OVERLAY_RECORD_FORMAT, "kind": "overlay", "name": name, "mount": mount, "key": "k" * 64,
              "base": base, "python": PYTHON, "packages": {"kept": [], "added": ["rich==13.9.4"]}}
    (tree / RECORD_FILE).write_text(json.dumps(record))
    out = directory / f"{name}.sqsh"
    subprocess.run(["mksquashfs", str(tree), str(out), "-noappend", "-no-progress", "-processors", "1", "-quiet"],
                   check=True, capture_output=True)
    shutil.rmtree(tree)
    return out
