"""Reading a venv overlay file (`NAME.sqsh`): its record, without mounting or starting anything.

Used by envrun (is this overlay made for this base?), the build (is the output up to date?) and the
inventory. Reading the record touches a few metadata blocks: about a millisecond on a 100 MiB overlay.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from envbuild.inventory.errors import ImageFormatError
from envbuild.overlayformat import BASE_PTH, RECORD_FILE, check_record, is_squashfs_file

if TYPE_CHECKING:
    from envbuild.inventory.trees import Tree

_RECORD_LIMIT = 4 << 20


@dataclass(frozen=True)
class OverlayVenv:
    """What an overlay's Python sees beyond its own site-packages, and which base it was made for: read
    from the overlay file alone and kept with its inventory (in the cache too), so that combining it
    with a base (`envbuild packages BASE --overlay X`) reads nothing of it again."""

    mount: str  # the venv's prefix in the container
    python: str  # "3.12", from the record
    base_site_dirs: tuple[str, ...]  # _envbuild_base.pth: the base environment's site directories, in order
    home: str  # pyvenv.cfg: the base interpreter's bin directory
    system_site: bool  # pyvenv.cfg include-system-site-packages
    base_ref: str
    base_sif_id: str
    base_digest: str


def is_overlay_file(path: str) -> bool:
    """True when `path` is a bare squashfs file (what envbuild writes as an overlay), not a SIF."""
    try:
        with open(path, "rb") as handle:
            return is_squashfs_file(handle.read(4))
    except OSError:
        return False


def record_in_tree(tree: Tree, path: str) -> dict[str, Any] | None:
    """The record of the overlay whose root `tree` is; None when there is no record file (a squashfs
    not made by envbuild); ImageFormatError when the record is unreadable."""
    data = tree.read("/" + RECORD_FILE, _RECORD_LIMIT)
    if data is None:
        return None
    try:
        return check_record(json.loads(data), path)
    except ValueError as exc:
        raise ImageFormatError(path, f"unreadable overlay record: {exc}", "build the overlay again") from None


def read_overlay_record(path: str) -> dict:
    """The overlay's record (envbuild.overlayformat). ImageFormatError when `path` is no envbuild overlay."""
    from envbuild.inventory.squashfs import DECODE_ERRORS, Squashfs
    from envbuild.inventory.trees import SquashfsTree

    if not is_overlay_file(path):
        raise ImageFormatError(path, "not a squashfs file (an overlay starts with 'hsqs')",
                               "pass the .sqsh file that `envbuild build` wrote for an overlay spec")
    try:
        with Squashfs(path) as fs:
            record = record_in_tree(SquashfsTree(fs), path)
    except DECODE_ERRORS as exc:
        raise ImageFormatError(path, f"the squashfs file system is damaged ({type(exc).__name__}: {exc})",
                               "the file is corrupt or truncated: build or copy it again") from None
    if record is None:
        raise ImageFormatError(path, f"a squashfs without {RECORD_FILE}: not made by envbuild",
                               "build the overlay with `envbuild build SPEC` (a spec with an overlay: section), "
                               "or mount it yourself with --bind FILE:/mount:image-src=/")
    return record


def _venv_config(text: str) -> dict[str, str]:
    """pyvenv.cfg's `key = value` lines, keys lower-cased as Python's site module reads them."""
    config = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            config[key.strip().lower()] = value.strip()
    return config


def read_overlay_venv(tree: Tree, record: dict[str, Any]) -> OverlayVenv:
    """The overlay's venv facts from its own root (`tree` unmounted) and its record."""
    version = str((record.get("python") or {}).get("version", ""))
    python = ".".join(version.split(".")[:2])
    config = _venv_config((tree.read("/pyvenv.cfg", 64 * 1024) or b"").decode("utf-8", errors="replace"))
    pth = None
    for name, kind in sorted((tree.children("/lib") or {}).items()):
        if kind == "dir" and name.startswith("python"):
            pth = pth or tree.read(f"/lib/{name}/site-packages/{BASE_PTH}", 64 * 1024)
    # A .pth line that starts with "import" is code, and a blank or "#" line is skipped: site.py's rules.
    lines = [line.strip() for line in (pth or b"").decode("utf-8", errors="replace").splitlines()]
    site_dirs = tuple(posixpath.normpath(line) for line in lines
                      if line and not line.startswith(("#", "import ", "import\t")))
    base = record.get("base") or {}
    return OverlayVenv(
        mount=posixpath.normpath(record["mount"]), python=python, base_site_dirs=site_dirs,
        home=config.get("home", ""), system_site=config.get("include-system-site-packages", "").lower() == "true",
        base_ref=str(base.get("ref", "")), base_sif_id=str(base.get("sif_id", "")), base_digest=str(base.get("digest", "")),
    )
