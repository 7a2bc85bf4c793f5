"""Small images for the catalogue tests, its benchmark and the README picture, made without apptainer:
a tree from tests/support/inventory_layout.py, squashed by mksquashfs and wrapped into a SIF by envbuild's own
writer (envbuild.sif.writer), about 0.1 s each; plus a venv overlay from tests/support/overlay_fixtures.py."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

from envbuild.sif.compression import mksquashfs_argv
from envbuild.sif.writer import assemble
from tests.support.inventory_layout import lay_out
from tests.support.overlay_fixtures import make_overlay

EPOCH = 1_795_400_000  # fixed times and content-derived ids: the same tree gives the same file


def make_sif(root: Path, image: Path, compression: str = "gzip") -> Path:
    argv = mksquashfs_argv(str(root), str(image), compression=compression, processors=1, source_date_epoch=EPOCH,
                           all_root=True)
    result = subprocess.run([*argv, "-quiet"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    deffile = b"Bootstrap: localimage\nFrom: layout.sif\n"
    assemble(str(image), deffile=deffile, metadata=b"{}", arch="amd64", epoch=EPOCH)
    return image


def build_record(name: str, compression: str, base: str) -> dict[str, object]:
    """A build record shaped as envbuild.builder.plan.record.build_record writes it."""
    spec = f"name: {name}\n"
    return {
        "record_format": 2, "envbuild_version": "0.1.0", "built_at": "2026-11-20T09:30:00Z",
        "spec": {"name": name, "sha256": hashlib.sha256(spec.encode()).hexdigest()},
        "lock": {"sha256": hashlib.sha256(name.encode()).hexdigest(), "python": "3.10.14"},
        "system": "lumi", "recipe": {"name": "lumi", "sha256": "sha256:" + "1" * 64},
        "base": {"ref": base, "digest": "sha256:" + "2" * 64}, "installer": "uv 0.13.9",
        "runtime": {"name": "apptainer", "version": "apptainer version 1.4.5"},
        "build_host": {"hostname": "uan01", "machine": "x86_64"}, "compression": compression,
        "venv": "/opt/envbuild/venv", "requirements": ["torch"],
    }


def make_layout_sif(work: Path, name: str, *, variant: str = "a", compression: str = "gzip",
                    base: str | None = "docker://rocm/pytorch:rocm6.2_ubuntu22.04") -> Path:
    """WORK/NAME.sif holding lay_out(variant) (variant "b": torch 2.4.0, accelerate instead of lightning),
    with an envbuild build record unless `base` is None."""
    root = work / f"{name}.root"
    lay_out(root, variant)
    if base is not None:
        (root / ".envbuild/build.json").write_text(json.dumps(build_record(name, compression, base)))
    return make_sif(root, work / f"{name}.sif", compression)


def example_images(work: Path) -> list[Path]:
    """The README picture's and the browser test's images: two builds that differ (torch, lightning,
    accelerate; gzip and zstd), an image not built by envbuild, and a venv overlay."""
    work.mkdir(parents=True, exist_ok=True)
    return [
        make_layout_sif(work, "pytorch-2.3", variant="a"),
        make_layout_sif(work, "pytorch-2.4", variant="b", compression="zstd"),
        make_layout_sif(work, "site-base", variant="a", base=None),
        make_overlay(work, "user-env"),
    ]
