"""Remembered inventories, one small file per image, keyed by what changes when the file does:
(real path, size, mtime in ns, inode). A rebuilt or copied-over image gets a new key, so an entry is
never stale; entries of deleted images are just never read again (`rm` them to tidy).

They live in the user's own private cache (envbuild.host.usercache: ~/.cache/envrun, 0600 files in a 0700
directory, read only when they are the user's and nobody else may write them), never in
$ENVBUILD_CACHE_DIR: a store a group shares would let any member decide what `envbuild packages` tells
the others an image holds. A tampered or foreign entry is a miss: the image is read again."""

from __future__ import annotations

import hashlib
import os
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from envbuild.host.usercache import MISS, read_cached, write_cached
from envbuild.inventory.overlayvenv import OverlayVenv
from envbuild.inventory.pyenvs import Environment, Inventory, Package, Problem

if TYPE_CHECKING:
    from envbuild.inventory.imagefacts import ImageFacts

# Bump when the walk or the stored shape changes, so older entries are ignored. ("overlay" is optional:
# entries written before it describe SIF files, which have none, so they stay valid.)
INDEX_FORMAT = 2  # 2: in the user's private cache, marshal


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
    """`enabled` False disables the cache (--no-cache)."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled

    def _entry(self, path: str) -> tuple[str, str] | None:
        """(file name in the user cache, key) for the image at `path`; None when it cannot be cached."""
        if not self.enabled:
            return None
        try:
            real = os.path.realpath(path)
            stat = os.stat(real)
        except OSError:
            return None
        if not os.path.isfile(real):  # sandbox directories change without their own mtime changing
            return None
        key = f"{INDEX_FORMAT}\0{real}\0{stat.st_size}\0{stat.st_mtime_ns}\0{stat.st_ino}"
        return "inventory-" + hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:32], key

    def load(self, path: str) -> Inventory | None:
        entry = self._entry(path)
        if entry is None:
            return None
        data = read_cached(*entry, check=lambda value: isinstance(value, dict))
        if data is MISS:
            return None
        try:
            return inventory_from_dict(data)
        except (ValueError, KeyError, TypeError):
            return None  # not what this version stores: read the image again

    def store(self, path: str, inventory: Inventory) -> None:
        entry = self._entry(path)
        if entry is not None:  # best effort: a cache that cannot be written only costs speed
            write_cached(*entry, inventory_to_dict(inventory))

    def inventory(self, path: str) -> Inventory:
        """The inventory of the image at `path`: remembered, else read from the file and remembered."""
        from envbuild.inventory.image import read_inventory

        inventory = self.load(path)
        if inventory is None:
            inventory = read_inventory(path)
            self.store(path, inventory)
        return inventory

    def facts(self, path: str) -> ImageFacts:
        """What `inspect`, `diff` and `catalogue` show of the image at `path`, read from the file; its inventory
        (the slow part) remembered."""
        from envbuild.inventory.imagefacts import read_image_facts

        facts = read_image_facts(path, self.load(path))
        self.store(path, facts.inventory)
        return facts
