"""What a venv overlay's Python sees beyond its own site-packages (its `_envbuild_base.pth` and
pyvenv.cfg), and which base it was made for: read from the overlay file alone, kept with its inventory."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from envbuild.shared.overlayformat import BASE_PTH

if TYPE_CHECKING:
    from envbuild.inventory.trees import Tree


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
