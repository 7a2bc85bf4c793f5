"""Remembered inventories, one small JSON file per image, keyed by what changes when the file does:
(real path, size, mtime in ns, inode). A rebuilt or copied-over image gets a new key, so an entry is
never stale; entries of deleted images are just never read again (`rm -r` the directory to tidy)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from envbuild.atomicfile import atomic_write
from envbuild.inventory.overlayvenv import OverlayVenv
from envbuild.inventory.pyenvs import Environment, Inventory, Package, Problem

# Bump when the walk or the stored shape changes, so older entries are ignored. ("overlay" is optional:
# entries written before it describe SIF files, which have none, so they stay valid.)
INDEX_FORMAT = 1


def inventory_to_dict(inventory: Inventory) -> dict[str, Any]:
    return {
        "environments": [asdict(e) for e in inventory.environments],
        "packages": [asdict(p) for p in inventory.packages],
        "problems": [asdict(p) for p in inventory.problems],
        "overlay": asdict(inventory.overlay) if inventory.overlay else None,
    }


def inventory_from_dict(data: dict[str, Any]) -> Inventory:
    return Inventory(
        environments=[Environment(**{**e, "site_dirs": tuple(e["site_dirs"])}) for e in data["environments"]],
        packages=[Package(**p) for p in data["packages"]],
        problems=[Problem(**p) for p in data["problems"]],
        overlay=_overlay_from_dict(data.get("overlay")),
    )


def _overlay_from_dict(data: dict[str, Any] | None) -> OverlayVenv | None:
    return None if data is None else OverlayVenv(**{**data, "base_site_dirs": tuple(data["base_site_dirs"])})


class InventoryCache:
    """`directory` None disables the cache (--no-cache)."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory

    def _entry(self, path: str) -> Path | None:
        if self.directory is None:
            return None
        try:
            real = os.path.realpath(path)
            stat = os.stat(real)
        except OSError:
            return None
        if not os.path.isfile(real):  # sandbox directories change without their own mtime changing
            return None
        key = f"{INDEX_FORMAT}\0{real}\0{stat.st_size}\0{stat.st_mtime_ns}\0{stat.st_ino}"
        return self.directory / (hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:32] + ".json")

    def load(self, path: str) -> Inventory | None:
        entry = self._entry(path)
        if entry is None:
            return None
        try:
            return inventory_from_dict(json.loads(entry.read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError):
            return None  # missing or unreadable entry: read the image again

    def store(self, path: str, inventory: Inventory) -> None:
        entry = self._entry(path)
        if entry is None:
            return
        # A cache that cannot be written (read-only home, full disk) only costs speed, never the listing.
        with contextlib.suppress(OSError):
            entry.parent.mkdir(parents=True, exist_ok=True)
            # 0600: the cache files have always been private to their user (as mkstemp made them).
            atomic_write(entry, json.dumps(inventory_to_dict(inventory)), mode=0o600)
