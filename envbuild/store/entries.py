"""What is in the store: one StoreEntry per base, env, image, scratch directory and download cache,
with its size, age and description; and the size and age texts of `envbuild cache`."""

from __future__ import annotations

import errno
import json
import os
import re
import stat
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from envbuild.errors import UsageError
from envbuild.store.layout import COMPLETE, DOWNLOAD_CACHES, ENTRY_DIRS, LAST_USED, META, kind_dir


@dataclass(frozen=True)
class StoreEntry:
    """One directory of the store. `kind` is base, env, image, work (a build's scratch), trash (a removal
    that was interrupted) or download (the uv/pip caches). Times are epoch seconds."""

    kind: str
    name: str
    path: Path
    complete: bool
    created: float
    last_used: float
    size_bytes: int  # 0 when listed without sizes
    description: str
    meta: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def qualified_name(self) -> str:
        return f"{self.kind}/{self.name}"


def list_entries(root: Path, *, with_sizes: bool = True) -> list[StoreEntry]:
    """Every entry under `root`, ordered by kind then name; an empty list when the store does not exist."""
    root = Path(root)
    entries: list[StoreEntry] = []
    for kind in ENTRY_DIRS:
        for path in _subdirs(kind_dir(root, kind)):
            entries.append(_build_entry(kind, path, with_sizes))
    for path in _subdirs(kind_dir(root, "work")):
        entries.append(_scratch_entry("work", path, "scratch of a running or killed build", with_sizes))
    for path in _subdirs(kind_dir(root, "trash")):
        entries.append(_scratch_entry("trash", path, "left over from an interrupted removal", with_sizes))
    for name in DOWNLOAD_CACHES:
        path = root / name
        if path.is_dir() and not path.is_symlink():
            entries.append(_scratch_entry("download", path, f"{name} download cache", with_sizes))
    return entries


def _subdirs(parent: Path) -> list[Path]:
    try:
        with os.scandir(parent) as it:
            return sorted(Path(e.path) for e in it if e.is_dir(follow_symlinks=False))
    except (FileNotFoundError, NotADirectoryError):
        return []


def _build_entry(kind: str, path: Path, with_sizes: bool) -> StoreEntry:
    meta = _read_meta(path / META)
    dir_mtime = _mtime(path) or 0.0
    complete_mtime = _mtime(path / COMPLETE)
    size, newest = _tree_usage(path) if with_sizes else (0, dir_mtime)
    if complete_mtime is None:
        # A killed build: its age is the last time anything inside changed, so a build that is still
        # writing is not mistaken for a stale one.
        return StoreEntry(kind, path.name, path, False, dir_mtime, max(newest, dir_mtime), size, _describe(kind, path, meta), meta)
    created = _parse_iso(meta.get("created")) or complete_mtime
    last_used = _mtime(path / LAST_USED) or complete_mtime
    return StoreEntry(kind, path.name, path, True, created, last_used, size, _describe(kind, path, meta), meta)


def _scratch_entry(kind: str, path: Path, description: str, with_sizes: bool) -> StoreEntry:
    dir_mtime = _mtime(path) or 0.0
    size, newest = _tree_usage(path) if with_sizes else (0, dir_mtime)
    return StoreEntry(kind, path.name, path, kind == "download", dir_mtime, max(newest, dir_mtime), size, description, {})


def _read_meta(path: Path) -> dict[str, Any]:
    # Older entries have no meta.json and a killed build may leave half of one: neither is an error here.
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _describe(kind: str, path: Path, meta: dict[str, Any]) -> str:
    description = meta.get("description")
    if isinstance(description, str) and description.strip():
        return " ".join(description.split())
    if kind == "base":
        try:
            digest = (path / "digest").read_text(encoding="utf-8").strip()
        except OSError:
            digest = ""
        if digest:
            return digest
    spec = meta.get("spec")
    return f"spec {spec}" if isinstance(spec, str) and spec else ""


def _mtime(path: Path) -> float | None:
    try:
        return path.stat(follow_symlinks=False).st_mtime
    except OSError:
        return None


def _parse_iso(value: object) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))  # 3.10 does not read "Z"
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)  # meta.json times are UTC
    return moment.timestamp()


def _tree_usage(top: Path) -> tuple[int, float]:
    """(bytes on disk, newest mtime) of the tree at `top`. Symlinks are not followed; st_blocks counts
    what is allocated, so sparse files count what they use and a hard-linked file counts once."""
    total = 0
    newest = 0.0
    seen_inodes: set[tuple[int, int]] = set()
    pending = [os.fspath(top)]
    # An explicit stack, not recursion: rootfs trees can be deeper than Python's recursion limit.
    while pending:
        directory = pending.pop()
        try:
            it = os.scandir(directory)
        except OSError:
            continue  # unreadable (root-owned) directories are counted as far as they can be read
        with it:
            for item in it:
                try:
                    info = item.stat(follow_symlinks=False)
                except OSError:
                    continue
                if info.st_nlink > 1 and not stat.S_ISDIR(info.st_mode):
                    inode = (info.st_dev, info.st_ino)
                    if inode in seen_inodes:
                        continue
                    seen_inodes.add(inode)
                total += info.st_blocks * 512
                newest = max(newest, info.st_mtime)
                if stat.S_ISDIR(info.st_mode):
                    pending.append(item.path)
    return total, newest


def touch_used(entry_dir: Path) -> None:
    """Record that a build used the entry now (the mtime of `<entry>/last-used`). A store the caller may
    only read (a shared, read-only one) is not an error: the entry then just ages from its creation."""
    marker = Path(entry_dir) / LAST_USED
    try:
        marker.touch()
        os.utime(marker)  # touch() leaves the time alone on some file systems when the file exists
    except OSError as exc:
        if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise


_SIZE_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """"50G" -> bytes. K, M, G, T are powers of 1024 (50G == 50GiB == 50GB); a bare number is bytes."""
    match = _SIZE_RE.match(text)
    if not match:
        raise UsageError(f"invalid size {text!r}",
                         "give bytes or a number with K, M, G or T (powers of 1024), e.g. 50G, 1.5T or 500M")
    number, unit = match.groups()
    return int(float(number) * _SIZE_UNITS[unit.upper()])


def human_size(size: int) -> str:
    """512 -> "512 B", 268476416 -> "256.0 MiB": sizes as every report shows them (store, inventory, catalogue)."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def human_age(then: float, now: float | None = None) -> str:
    seconds = (time.time() if now is None else now) - then
    if seconds < 60:
        return "just now"
    for limit, unit, per in ((3600, "min", 60), (2 * 86400, "h", 3600), (float("inf"), "d", 86400)):
        if seconds < limit:
            return f"{int(seconds // per)} {unit} ago"
    raise AssertionError("unreachable")


def entry_to_dict(entry: StoreEntry) -> dict[str, Any]:
    """The JSON form of an entry (`envbuild cache ls --json`)."""
    return {
        "kind": entry.kind,
        "name": entry.name,
        "path": str(entry.path),
        "complete": entry.complete,
        "created": _iso(entry.created),
        "last_used": _iso(entry.last_used),
        "size_bytes": entry.size_bytes,
        "description": entry.description,
        "meta": entry.meta,
    }


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
