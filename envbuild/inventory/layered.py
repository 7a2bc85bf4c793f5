"""A SIF whose squashfs overlay partitions lie over its root file system (`envbuild build --layered`),
read as the runtime's overlayfs shows it: upper layers win, a whiteout (character device 0/0) hides
the path below, a directory in both merges, a file or link in an upper layer hides a directory below."""

from __future__ import annotations

import posixpath
from collections.abc import Hashable

from envbuild.inventory.squashfs import Squashfs
from envbuild.inventory.trees import SquashfsTree, Tree

WHITEOUT = "whiteout"


class _Upper:
    """One overlay partition: its listings with whiteouts told apart."""

    def __init__(self, fs: Squashfs) -> None:
        self.fs = fs
        self.tree = SquashfsTree(fs)
        self._cache: dict[str, dict[str, str] | None] = {}

    def children(self, path: str) -> dict[str, str] | None:
        if path in self._cache:
            return self._cache[path]
        listing = self.tree._listing(path)  # its entries carry the refs that tell whiteouts apart
        result = None
        if listing is not None:
            result = {name: (WHITEOUT if e.kind == "other" and self.fs.is_whiteout(e.ref) else e.kind)
                      for name, e in listing.items()}
        self._cache[path] = result
        return result


class LayeredTree:
    """`lower` (the root file system, or the layers below) with one squashfs overlay partition on top."""

    def __init__(self, lower: Tree, upper_fs: Squashfs) -> None:
        self.lower = lower
        self.upper = _Upper(upper_fs)

    def _state(self, path: str) -> tuple[str | None, bool, bool]:
        """(kind of `path` in the upper layer or None, whether the lower layer shows through, whether it exists at all)."""
        names = [n for n in posixpath.normpath(path).split("/") if n]
        current, upper_dir, lower_open = "/", True, True
        kind: str | None = "dir"
        for index, name in enumerate(names):
            last = index == len(names) - 1
            found = (self.upper.children(current) or {}).get(name) if upper_dir else None
            if found == WHITEOUT:
                return None, False, False
            if found is not None and found != "dir":
                return (found, False, True) if last else (None, False, False)
            upper_dir = found == "dir"
            kind = found
            current = posixpath.join(current, name)
        return kind, lower_open, True

    def children(self, path: str) -> dict[str, str] | None:
        kind, lower_open, exists = self._state(path)
        if not exists or (kind is not None and kind != "dir"):
            return None
        below = self.lower.children(path) if lower_open else None
        above = self.upper.children(path) if kind == "dir" else None
        if below is None and above is None:
            return None
        merged = dict(below or {})
        for name, entry_kind in (above or {}).items():
            if entry_kind == WHITEOUT:
                merged.pop(name, None)
            else:
                merged[name] = entry_kind
        return merged

    def directory_key(self, path: str) -> Hashable | None:
        """A merged directory is what both layers show there."""
        kind, lower_open, exists = self._state(path)
        if not exists or (kind is not None and kind != "dir"):
            return None
        below = self.lower.directory_key(path) if lower_open else None
        above = self.upper.tree.directory_key(path) if kind == "dir" else None
        return None if below is None and above is None else (below, above)

    def read(self, path: str, limit: int) -> bytes | None:
        kind, lower_open, exists = self._state(path)
        if not exists:
            return None
        if kind is not None:
            data = self.upper.tree.read(path, limit)
            if data is not None or kind == "file":
                return data
        return self.lower.read(path, limit) if lower_open else None
