"""Remembered inventories, one small file per image, keyed by what changes when the file does:
(real path, size, mtime in ns, inode). A rebuilt or copied-over image gets a new key, so an entry is
never stale; entries of deleted images are just never read again (`rm` them to tidy).

They live in the user's own private cache (envbuild.host.usercache: ~/.cache/envrun, 0600 files in a 0700
directory, read only when they are the user's and nobody else may write them), never in
$ENVBUILD_CACHE_DIR: a store a group shares would let any member decide what `envbuild packages` tells
the others an image holds. A tampered or foreign entry is a miss: the image is read again.

Light at import (os, zlib and the user cache only: no dataclasses, hashlib or the reader): `envbuild
packages` answers from here after one stat per image, without opening it (`listing_entry`); what converts to
and from the reader's Inventory is imported when it is used."""

from __future__ import annotations

import os
import zlib

from envbuild.host.usercache import MISS, read_cached, write_cached, write_cached_many

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from envbuild.inventory.imagefacts import ImageFacts
    from envbuild.inventory.overlayvenv import OverlayVenv
    from envbuild.inventory.pyenvs import Inventory

# Bump when the walk or the stored shape changes, so older entries are ignored. ("overlay" is optional:
# entries written before it describe SIF files, which have none, so they stay valid.)
INDEX_FORMAT = 3  # 2: in the user's private cache, marshal; 3: keyed by one stat, with the image's architecture
_REGULAR_FILE = 0o100000  # S_IFREG, without importing stat
_FILE_TYPE = 0o170000


def inventory_to_dict(inventory: Inventory) -> dict[str, Any]:
    """The inventory as plain data: each record's fields as a dict, as dataclasses.asdict makes them. Their
    fields hold only str, bool and tuples of str, so a copy of each record's own dict is that, at a fraction of
    asdict's cost (it copies every value recursively)."""
    return {
        "environments": [dict(vars(e)) for e in inventory.environments],
        "packages": [dict(vars(p)) for p in inventory.packages],
        "problems": [dict(vars(p)) for p in inventory.problems],
        "overlay": dict(vars(inventory.overlay)) if inventory.overlay else None,
    }


def inventory_from_dict(data: dict[str, Any]) -> Inventory:
    from envbuild.inventory.pyenvs import Environment, Inventory, Package, Problem

    return Inventory(
        environments=[Environment(**{**e, "site_dirs": tuple(e["site_dirs"])}) for e in data["environments"]],
        packages=[Package(**p) for p in data["packages"]],
        problems=[Problem(**p) for p in data["problems"]],
        overlay=_overlay_from_dict(data.get("overlay")),
    )


def _overlay_from_dict(data: dict[str, Any] | None) -> OverlayVenv | None:
    if data is None:
        return None
    from envbuild.inventory.overlayvenv import OverlayVenv

    return OverlayVenv(**{**data, "base_site_dirs": tuple(data["base_site_dirs"])})


def _is_listing_entry(value: Any) -> bool:
    return (isinstance(value, dict) and isinstance(value.get("packages"), list) and isinstance(value.get("problems"), list)
            and isinstance(value.get("environments"), list) and "overlay" in value
            and all(type(p) is dict and type(p.get("environment")) is str and type(p.get("name")) is str
                    and type(p.get("version")) is str and type(p.get("source")) is str for p in value["packages"])
            and all(type(p) is dict and type(p.get("path")) is str and type(p.get("message")) is str
                    for p in value["problems"]))


class InventoryCache:
    """`enabled` False disables the cache (--no-cache)."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled

    def entry_name(self, path: str) -> tuple[str, str] | None:
        """(file name in the user cache, key) for the image at `path` as it is now; None when it cannot be
        cached (or the cache is off). Taken before an image is read, it keeps a file rewritten during the read
        from being remembered under its new key with what was read of the old."""
        return self._entry(path)

    def _entry(self, path: str) -> tuple[str, str] | None:
        """(file name in the user cache, key) for the image at `path`; None when it cannot be cached. One stat
        (links followed): the file is known by its device and inode, and a rewrite changes its size or mtime."""
        if not self.enabled:
            return None
        try:
            status = os.stat(path)
        except (OSError, ValueError):
            return None
        if status.st_mode & _FILE_TYPE != _REGULAR_FILE:  # sandbox directories change without their own mtime changing
            return None
        key = f"{INDEX_FORMAT}\0{status.st_dev}\0{status.st_ino}\0{status.st_size}\0{status.st_mtime_ns}"
        # crc32 and adler32 rather than sha256 (hashlib's import): the key is stored in the file and compared,
        # so two images whose names collide only miss each other's entry.
        raw = key.encode()
        return f"inventory-{zlib.crc32(raw):08x}{zlib.adler32(raw):08x}", key

    def listing_entry(self, path: str) -> dict[str, Any] | None:
        """The stored inventory of the image at `path` as plain data (inventory_to_dict's shape) with its
        architecture under "arch", when the index holds one for the file as it is now; None otherwise."""
        entry = self._entry(path)
        if entry is None:
            return None
        data = read_cached(*entry, check=_is_listing_entry)
        if data is MISS or type(data.get("arch")) is not str:
            return None
        return data  # type: ignore[no-any-return]

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

    def store(self, path: str, inventory: Inventory | dict[str, Any], arch: str | None = None) -> None:
        """Remember the inventory (or inventory_to_dict's plain form of one) of the image at `path`, with its
        architecture when known (listing_entry answers only for entries that have it)."""
        entry = self._entry(path)
        if entry is None:
            return
        data = dict(inventory) if type(inventory) is dict else inventory_to_dict(inventory)  # type: ignore[arg-type]
        if arch is not None:
            data["arch"] = arch
        write_cached(*entry, data)  # best effort: a cache that cannot be written only costs speed

    def store_listings(self, listings: list[tuple[tuple[str, str], dict[str, Any]]]) -> None:
        """Remember several inventories in inventory_to_dict's plain form, each with "arch", under the
        entries entry_name gave for them: the cache directory opened once for all."""
        if self.enabled and listings:
            write_cached_many([(name, key, data) for (name, key), data in listings])

    def inventory(self, path: str) -> Inventory:
        """The inventory of the image at `path`: remembered, else read from the file and remembered."""
        from envbuild.inventory.image import image_arch, read_inventory

        inventory = self.load(path)
        if inventory is None:
            inventory = read_inventory(path)
            self.store(path, inventory, image_arch(path))
        return inventory

    def facts(self, path: str) -> ImageFacts:
        """What `inspect`, `diff` and `catalogue` show of the image at `path`, read from the file; its inventory
        (the slow part) remembered."""
        from envbuild.inventory.imagefacts import read_image_facts

        facts = read_image_facts(path, self.load(path))
        self.store(path, facts.inventory, facts.architecture)
        return facts
