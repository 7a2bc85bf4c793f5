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
from typing import TYPE_CHECKING, Any

from envbuild.shared import safefiles
from envbuild.shared.errors import EnvbuildError, UsageError
from envbuild.store.layout import COMPLETE, DOWNLOAD_CACHES, ENTRY_DIRS, LAST_USED, META, kind_dir
from envbuild.store.places import OpenStore, open_entry, open_entry_path

if TYPE_CHECKING:
    from collections.abc import Iterator


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
    """Every entry under `root`, ordered by kind then name; an empty list when the store does not exist.
    Raises UnsafePlaceError when one of the store's own directories is a link or a stranger's (store.places)."""
    try:
        store = OpenStore(root)
    except (FileNotFoundError, NotADirectoryError):
        return []
    with store:
        return store_entries(store, with_sizes=with_sizes)


def store_entries(store: OpenStore, *, with_sizes: bool = True) -> list[StoreEntry]:
    """list_entries of a store held open: every directory is listed and read by descriptor, never through a
    link (an entry that is a link is not an entry, and is not listed)."""
    entries: list[StoreEntry] = []
    for kind in ENTRY_DIRS:
        entries += _entries_in(store, kind, with_sizes, None)
    entries += _entries_in(store, "work", with_sizes, "scratch of a running or killed build")
    entries += _entries_in(store, "trash", with_sizes, "left over from an interrupted removal")
    for name in DOWNLOAD_CACHES:
        entry = _read_entry(store.fd, "download", name, store.root / name, with_sizes, f"{name} download cache")
        if entry is not None:
            entries.append(entry)
    return entries


def _entries_in(store: OpenStore, kind: str, with_sizes: bool, scratch: str | None) -> list[StoreEntry]:
    parent = store.kind_dir(kind)
    if parent is None:
        return []
    where = kind_dir(store.root, kind)
    found = []
    for name, _info in sorted(safefiles.iter_subdirs(parent)):
        entry = _read_entry(parent, kind, name, where / name, with_sizes, scratch)
        if entry is not None:
            found.append(entry)
    return found


def _read_entry(parent_fd: int, kind: str, name: str, path: Path, with_sizes: bool,
                scratch: str | None) -> StoreEntry | None:
    """The entry `name` in `parent_fd` (a kind directory) as listed; None when it is gone or is not a
    directory (swapped for a link since the listing). `scratch`: the description of a work, trash or
    download directory, which has no complete marker or meta.json."""
    fd = open_entry(parent_fd, name)
    if fd is None:
        return None
    try:
        dir_mtime = os.fstat(fd).st_mtime
        size, newest = tree_usage_and_newest(fd) if with_sizes else (0, dir_mtime)
        if scratch is not None:
            return StoreEntry(kind, name, path, kind == "download", dir_mtime, max(newest, dir_mtime), size, scratch, {})
        meta = _read_meta(fd)
        complete_mtime = _mtime(fd, COMPLETE)
        description = _describe(kind, fd, meta)
        if complete_mtime is None:
            # A killed build: its age is the last time anything inside changed, so a build that is still
            # writing is not mistaken for a stale one.
            return StoreEntry(kind, name, path, False, dir_mtime, max(newest, dir_mtime), size, description, meta)
        created = _parse_iso(meta.get("created")) or complete_mtime
        last_used = _mtime(fd, LAST_USED) or complete_mtime
        return StoreEntry(kind, name, path, True, created, last_used, size, description, meta)
    finally:
        os.close(fd)


def _read_small(entry_fd: int, name: str) -> str | None:
    """The text of the entry's file `name`, never through a link; None when it is missing or not a file."""
    try:
        data, _info = safefiles.read_file_nofollow(entry_fd, name, limit=1 << 20)
    except (OSError, EnvbuildError):
        return None
    return data.decode("utf-8", "replace")


def _read_meta(entry_fd: int) -> dict[str, Any]:
    # Older entries have no meta.json and a killed build may leave half of one: neither is an error here.
    text = _read_small(entry_fd, META)
    if text is None:
        return {}
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _describe(kind: str, entry_fd: int, meta: dict[str, Any]) -> str:
    description = meta.get("description")
    if isinstance(description, str) and description.strip():
        return " ".join(description.split())
    if kind == "base":
        digest = (_read_small(entry_fd, "digest") or "").strip()
        if digest:
            return digest
    spec = meta.get("spec")
    return f"spec {spec}" if isinstance(spec, str) and spec else ""


def _mtime(entry_fd: int, name: str) -> float | None:
    try:
        return os.stat(name, dir_fd=entry_fd, follow_symlinks=False).st_mtime
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


def tree_usage_and_newest(top_fd: int) -> tuple[int, float]:
    """(bytes on disk, newest mtime) of the tree below the directory `top_fd`, walked by descriptor and never
    through a link; st_blocks counts what is allocated, so sparse files count what they use and a hard-linked
    file counts once."""
    total = 0
    newest = 0.0
    seen_inodes: set[tuple[int, int]] = set()

    def scan(fd: int) -> list[str]:
        nonlocal total, newest
        subdirs = []
        try:
            with os.scandir(fd) as it:
                items = list(it)
        except OSError:
            return []  # unreadable (root-owned) directories are counted as far as they can be read
        for item in items:
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
                subdirs.append(item.name)
        return subdirs

    # Depth first with an explicit stack, not recursion: rootfs trees can be deeper than Python's recursion
    # limit. Only the directories on the current path are held open.
    first = os.dup(top_fd)
    stack: list[tuple[int, Iterator[str]]] = [(first, iter(scan(first)))]
    try:
        while stack:
            fd, pending = stack[-1]
            name = next(pending, None)
            if name is None:
                os.close(fd)
                stack.pop()
                continue
            try:
                sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError:
                continue  # gone, swapped for a link, unreadable, or too deep for the descriptors left
            stack.append((sub, iter(scan(sub))))
    finally:
        for fd, _pending in stack:
            os.close(fd)
    return total, newest


def touch_used(entry_dir: Path) -> None:
    """Record that a build used the entry now (the mtime of `<entry>/last-used`). A store the caller may
    only read (a shared, read-only one) is not an error: the entry then just ages from its creation. The
    marker is touched by descriptor, never through a link a member planted at its name (touching, or
    creating, the file the link names)."""
    try:
        entry_fd = open_entry_path(entry_dir)
        if entry_fd is None:
            return  # removed meanwhile: nothing to record
        try:
            _touch_at(entry_fd, LAST_USED)
        finally:
            os.close(entry_fd)
    except OSError as exc:
        if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOENT):
            raise


def _touch_at(dir_fd: int, name: str) -> None:
    for _attempt in range(2):
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
        except FileNotFoundError:
            try:
                safefiles.create_new(dir_fd, name, b"", mode=0o666 & ~safefiles.current_umask())
                return
            except FileExistsError:
                continue  # made meanwhile by another build: touch that one
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return  # a link is not our marker: leave it alone, the entry ages from its creation
            raise
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                os.utime(fd)
        finally:
            os.close(fd)
        return


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
