"""Venv overlays (`NAME.sqsh`, issue 11) made without apptainer, for the inventory, verify and build tests.

`lay_out_overlay(root, ...)` writes the directory tree an overlay holds (the venv's bin/, lib/, pyvenv.cfg,
`_envbuild_base.pth` and `.envbuild/`); `squash(root, output)` packs it with mksquashfs as a bare
squashfs; `make_overlay(work, name, ...)` does both. The defaults describe an overlay made for the
inventory's fixture base (tests/support/inventory_layout.py, `fixture_image("gzip")`): its /opt/venv is Python
3.11, its system Python /usr (with Debian's /usr/local).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

from envbuild.shared.overlayformat import BASE_PTH, DEFAULT_MOUNT, LOCK_FILE, OVERLAY_RECORD_FORMAT, RECORD_FILE, SPEC_FILE

OVERLAY_SPEC = """\
name: tiny-overlay
system: local
base: localimage:/images/base.sif
python:
  packages:
    - requests>=2.32.4
    - rich
"""
# What the default overlay installs, and what it keeps from the fixture base's /opt/venv and /usr.
ADDED = {"requests": "2.32.4", "rich": "13.7.1"}
KEPT = {"six": "1.16.0", "big-meta": "1.0"}


def fixture_base_identity(base_sif: Path) -> dict[str, Any]:
    """The record's `base` entry for a SIF on this machine: its path, digest, SIF id and size."""
    from envbuild.sif.reader import read_sif_layout

    digest = hashlib.sha256(base_sif.read_bytes()).hexdigest()
    return {"ref": f"localimage:{base_sif}", "path": str(base_sif), "digest": f"sha256:{digest}",
            "sif_id": read_sif_layout(base_sif).header.image_id, "size": base_sif.stat().st_size}


def overlay_record(*, name: str = "tiny-overlay", mount: str = DEFAULT_MOUNT, base: dict[str, Any] | None = None,
                   python_version: str = "3.11.2", base_env: str = "/opt/venv",
                   added: dict[str, str] | None = None, kept: dict[str, str] | None = None,
                   spec: str | None = OVERLAY_SPEC, lock: str | None = None) -> dict[str, Any]:
    """A complete overlay.json (the keys envbuild.shared.overlayformat documents)."""
    added = ADDED if added is None else added
    kept = KEPT if kept is None else kept
    major_minor = ".".join(python_version.split(".")[:2])
    return {
        "record_format": OVERLAY_RECORD_FORMAT, "kind": "overlay",
        "envbuild_version": "0.0.test", "built_at": "2026-11-24T10:00:00Z",
        "name": name,
        "spec": {"name": name, "sha256": hashlib.sha256((spec or "").encode()).hexdigest()},
        "lock": {"sha256": hashlib.sha256(lock.encode()).hexdigest(), "python": python_version} if lock else None,
        "system": "local", "mount": mount, "key": "0" * 64,
        "base": base or {"ref": "localimage:/images/base.sif", "path": "/images/base.sif", "digest": "sha256:" + "9" * 64,
                         "sif_id": "00000000-0000-0000-0000-000000000000", "size": 0},
        "python": {"path": f"{base_env}/bin/python", "version": python_version,
                   "abi": f"cpython-{major_minor.replace('.', '')}-x86_64-linux-gnu", "env": base_env,
                   "activation": "", "why": f"the venv {base_env} (the base's only venv)"},
        "requirements": ["requests>=2.32.4", "rich"],
        "packages": {"kept": [f"{n}=={v}" for n, v in sorted(kept.items())],
                     "added": [f"{n}=={v}" for n, v in sorted(added.items())]},
        "installer": {"name": "pip", "version": "24.0"},
    }


def lay_out_overlay(root: Path, *, record: dict[str, Any] | None = None, installed: dict[str, str] | None = None,
                    base_site_dirs: tuple[str, ...] = ("/opt/venv/lib/python3.11/site-packages",),
                    home: str = "/usr/bin", system_site: bool = True, spec: str | None = OVERLAY_SPEC,
                    lock: str | None = None) -> dict[str, Any]:
    """Write the overlay's root under `root` and return its record. `installed` (name -> version) are
    the dist-infos in the venv (default: the record's packages.added); `base_site_dirs` go into
    `_envbuild_base.pth`; `home` and `system_site` into pyvenv.cfg."""
    record = record if record is not None else overlay_record(spec=spec, lock=lock)
    if installed is None:
        installed = dict(pin.split("==", 1) for pin in record["packages"]["added"])
    version = record["python"]["version"]
    major_minor = ".".join(version.split(".")[:2])
    (root / "bin").mkdir(parents=True, exist_ok=True)
    os.symlink(record["python"]["path"], root / "bin/python")
    os.symlink("python", root / "bin" / f"python{major_minor}")
    (root / "pyvenv.cfg").write_text(f"home = {home}\ninclude-system-site-packages = {str(system_site).lower()}\n"
                                     f"version = {version}\n")
    site = root / f"lib/python{major_minor}/site-packages"
    site.mkdir(parents=True, exist_ok=True)
    os.symlink("lib", root / "lib64")
    (site / BASE_PTH).write_text("".join(f"{line}\n" for line in base_site_dirs))
    for name, package_version in installed.items():
        info = site / f"{name.replace('-', '_')}-{package_version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {package_version}\n\n")
        (info / "RECORD").write_text("")
        (root / "bin" / name).write_text(f"#!{record['mount']}/bin/python\n")
    (root / RECORD_FILE).parent.mkdir(parents=True, exist_ok=True)
    (root / RECORD_FILE).write_text(json.dumps(record, indent=2))
    if spec is not None:
        (root / SPEC_FILE).write_text(spec)
    if lock is not None:
        (root / LOCK_FILE).write_text(lock)
    return record


def squash(root: Path, output: Path, compression: str = "gzip") -> Path:
    """Pack `root` into the bare squashfs `output`, as the build writes an overlay (owned by root, no xattrs)."""
    command = ["mksquashfs", str(root), str(output), "-noappend", "-no-xattrs", "-all-root", "-quiet",
               "-processors", "1", "-comp", compression]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return output


def make_overlay(work: Path, name: str = "env", *, compression: str = "gzip", **layout: Any) -> Path:
    """`work/NAME.sqsh` from a tree laid out in `work/NAME.root` by lay_out_overlay(**layout)."""
    lay_out_overlay(work / f"{name}.root", **layout)
    return squash(work / f"{name}.root", work / f"{name}.sqsh", compression)
