"""The content-addressed build store: what is in it, who is using it, and what may go.

Layout under the store root (`envbuild.host.runtime.default_cache_dir()`; the build code relies on it):

    bases/<name>/   rootfs/, complete, [digest], [meta.json], [last-used]
    envs/<name>/    rootfs/, complete, meta.json, [last-used]
    images/<name>/  image.sif, complete, meta.json, [last-used]
    locks/<kind>-<name>.lock   flock'ed by a build while it creates or uses an entry
    work/<build>/   scratch of running (or killed) builds
    trash/<name>-<random>/     entries being removed (renamed here first, so removal is atomic)
    uv/, pip/       installer download caches

An entry is complete only once its `complete` marker exists; a directory without it is what a killed
build left behind.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import secrets
import socket
import stat
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from envbuild.errors import EnvbuildError, UsageError

# Entry kind -> the store directory that holds entries of that kind.
ENTRY_DIRS = {"base": "bases", "env": "envs", "image": "images"}
DOWNLOAD_CACHES = ("uv", "pip")
LOCK_KINDS = (*ENTRY_DIRS, "work", "download")
# Listing order: what was built, then what builds left behind, then the download caches.
KIND_ORDER = ("base", "env", "image", "work", "trash", "download")

# A build that is still running keeps touching its files; an hour of silence means it was killed. This is
# a floor, never lowered by --older-than, because removing a running build's scratch breaks that build.
STALE_AFTER_SECONDS = 3600.0


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


# ---------------------------------------------------------------------------------------------- listing


def list_entries(root: Path, *, with_sizes: bool = True) -> list[StoreEntry]:
    """Every entry under `root`, ordered by kind then name; an empty list when the store does not exist."""
    root = Path(root)
    entries: list[StoreEntry] = []
    for kind, dirname in ENTRY_DIRS.items():
        for path in _subdirs(root / dirname):
            entries.append(_build_entry(kind, path, with_sizes))
    for path in _subdirs(root / "work"):
        entries.append(_scratch_entry("work", path, "scratch of a running or killed build", with_sizes))
    for path in _subdirs(root / "trash"):
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
    meta = _read_meta(path / "meta.json")
    dir_mtime = _mtime(path) or 0.0
    complete_mtime = _mtime(path / "complete")
    size, newest = _tree_usage(path) if with_sizes else (0, dir_mtime)
    if complete_mtime is None:
        # A killed build: its age is the last time anything inside changed, so a build that is still
        # writing is not mistaken for a stale one.
        return StoreEntry(kind, path.name, path, False, dir_mtime, max(newest, dir_mtime), size, _describe(kind, path, meta), meta)
    created = _parse_iso(meta.get("created")) or complete_mtime
    last_used = _mtime(path / "last-used") or complete_mtime
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


# ---------------------------------------------------------------------------------------------- locking


class EntryLock:
    """An exclusive flock on `<root>/locks/<kind>-<name>.lock`, held until `release()` or the end of a
    `with` block. The lock file is never deleted: deleting a flock'ed file lets two processes each lock a
    different file of the same name."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.ftruncate(fd, 0)  # so no waiter names a holder that has gone
        except OSError:
            pass
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def __enter__(self) -> EntryLock:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


def lock_path(root: Path, kind: str, name: str) -> Path:
    if kind not in LOCK_KINDS:
        raise EnvbuildError(f"unknown store entry kind {kind!r} for a lock", f"use one of: {', '.join(LOCK_KINDS)}")
    _check_entry_name(name)
    return Path(root) / "locks" / f"{kind}-{name}.lock"


def entry_lock(root: Path, kind: str, name: str, *, on_wait: Callable[[str], None] | None = None) -> EntryLock:
    """Take the exclusive lock on an entry, waiting as long as another process holds it. `on_wait` is
    called once, before waiting, with a message naming the holder. Use as `with entry_lock(...):`."""
    path = lock_path(root, kind, name)
    fd = _open_lock_file(path)
    try:
        if not _flock(fd, path, blocking=False):
            if on_wait is not None:
                on_wait(f"waiting for another build that holds {path} ({_holder(fd)})")
            _flock(fd, path, blocking=True)
    except BaseException:
        os.close(fd)
        raise
    _write_holder(fd)
    return EntryLock(path, fd)


def try_entry_lock(root: Path, kind: str, name: str) -> EntryLock | None:
    """The entry's lock if it is free now, else None (another process holds it)."""
    path = lock_path(root, kind, name)
    fd = _open_lock_file(path)
    try:
        acquired = _flock(fd, path, blocking=False)
    except BaseException:
        os.close(fd)
        raise
    if not acquired:
        os.close(fd)
        return None
    _write_holder(fd)
    return EntryLock(path, fd)


def lock_holder(root: Path, kind: str, name: str) -> str:
    """Who wrote themselves into the entry's lock file: "pid 1234 on host x", or "holder unknown"."""
    try:
        fd = os.open(lock_path(root, kind, name), os.O_RDONLY)
    except OSError:
        return "holder unknown"
    try:
        return _holder(fd)
    finally:
        os.close(fd)


def _open_lock_file(path: Path) -> int:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EnvbuildError(f"cannot create the lock directory {path.parent}: {exc.strerror}",
                            "make the store writable or point --cache-dir / $ENVBUILD_CACHE_DIR elsewhere") from None
    try:
        # 0o666 (less the umask): a store shared by a project's group must let every member lock it.
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    except PermissionError:
        pass
    try:
        # Another user's lock file we may not write: flock works on a read-only descriptor too.
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise EnvbuildError(f"cannot open the lock file {path}: {exc.strerror}",
                            "make the store writable or point --cache-dir / $ENVBUILD_CACHE_DIR elsewhere") from None


def _flock(fd: int, path: Path, *, blocking: bool) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if blocking else fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError as exc:
        if exc.errno in (errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOLCK, errno.EINVAL):
            # Lustre mounted without -o flock, some NFS setups.
            raise EnvbuildError(
                f"the file system of {path} does not support file locks ({exc.strerror})",
                "put the store on a file system with flock support (local disk, or Lustre mounted with -o flock) "
                "via --cache-dir or $ENVBUILD_CACHE_DIR",
            ) from None
        raise
    return True


def _write_holder(fd: int) -> None:
    # Best effort: a read-only lock file (another user's) still locks, it just cannot say who holds it.
    data = f"pid {os.getpid()} on host {socket.gethostname()}\n".encode()
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
    except OSError:
        pass


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
    except OSError:
        text = ""
    return text.splitlines()[0] if text else "holder unknown"


def _check_entry_name(name: str) -> None:
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise EnvbuildError(f"invalid store entry name {name!r}", "an entry name is one path component, without '/'")


def touch_used(entry_dir: Path) -> None:
    """Record that a build used the entry now (the mtime of `<entry>/last-used`). A store the caller may
    only read (a shared, read-only one) is not an error: the entry then just ages from its creation."""
    marker = Path(entry_dir) / "last-used"
    try:
        marker.touch()
        os.utime(marker)  # touch() leaves the time alone on some file systems when the file exists
    except OSError as exc:
        if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise


# ---------------------------------------------------------------------------------------------- pruning


def choose_prunable(
    entries: Iterable[StoreEntry],
    *,
    now: float,
    older_than: float | None,
    max_size: int | None,
    include_downloads: bool = False,
) -> list[StoreEntry]:
    """What a prune removes, in removal order:

    1. always: incomplete entries, work dirs and trash untouched for an hour (a running build keeps writing);
    2. complete entries last used more than `older_than` seconds ago;
    3. then, while the entries that are left total more than `max_size` bytes, the least recently used
       complete entries.

    Download caches are never chosen unless `include_downloads`; they then follow rules 2 and 3 like
    builds, and with neither `older_than` nor `max_size` they are all chosen (asking to prune the download
    caches and nothing else means emptying them). Without `include_downloads` they do not count toward
    `max_size` either, so a big download cache does not evict builds.
    """
    in_scope = [e for e in entries if e.kind != "download" or include_downloads]
    chosen: list[StoreEntry] = []
    chosen_ids: set[int] = set()

    def choose(entry: StoreEntry) -> None:
        chosen.append(entry)
        chosen_ids.add(id(entry))

    removable = [e for e in in_scope if _is_build_result(e)]
    for entry in in_scope:
        if not _is_build_result(entry) and now - entry.last_used > STALE_AFTER_SECONDS:
            choose(entry)
    if include_downloads and older_than is None and max_size is None:
        for entry in removable:
            if entry.kind == "download":
                choose(entry)
    if older_than is not None:
        for entry in sorted(removable, key=_lru_key):
            if now - entry.last_used > older_than:
                choose(entry)
    if max_size is not None:
        remaining = sum(e.size_bytes for e in in_scope if id(e) not in chosen_ids)
        for entry in sorted(removable, key=_lru_key):
            if remaining <= max_size:
                break
            if id(entry) not in chosen_ids:
                choose(entry)
                remaining -= entry.size_bytes
    return chosen


def _is_build_result(entry: StoreEntry) -> bool:
    """A finished entry (or a download cache), as opposed to a leftover of an unfinished build or removal."""
    return entry.complete and entry.kind in (*ENTRY_DIRS, "download")


def _lru_key(entry: StoreEntry) -> tuple[float, str, str]:
    return (entry.last_used, entry.kind, entry.name)


class EntryBusyError(EnvbuildError):
    """The entry's lock is held: a build is creating or using it."""


def remove_entry(root: Path, entry: StoreEntry) -> None:
    """Remove an entry. Under its lock it is renamed into `<root>/trash/` first, so a build never sees half
    an entry; the slow delete happens after the lock is released. Raises EntryBusyError when a build holds
    the lock."""
    root = Path(root)
    if entry.kind not in KIND_ORDER or entry.path.parent != _kind_dir(root, entry.kind):
        raise EnvbuildError(f"{entry.path} is not an entry of the store {root}", "list the entries of this store with list_entries(root)")
    if entry.kind == "trash":
        _force_rmtree(entry.path)  # already out of the way; nobody locks trash
        return
    lock = try_entry_lock(root, entry.kind, entry.name)
    if lock is None:
        raise EntryBusyError(
            f"{entry.kind} {entry.name} is in use by a build ({lock_holder(root, entry.kind, entry.name)})",
            "retry when that build has finished",
        )
    with lock:
        if not entry.path.exists():
            return  # someone else removed it meanwhile
        trash = root / "trash"
        trash.mkdir(parents=True, exist_ok=True)
        doomed = trash / f"{entry.name}-{secrets.token_hex(4)}"
        try:
            _rename_dir(entry.path, doomed)
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise EnvbuildError(f"cannot remove {entry.path}: {exc.strerror}", _permission_hint(entry.path)) from None
            # The kind directory is a link to another file system: no atomic rename is possible, so
            # withdraw the complete marker first (readers then see an unfinished entry) and delete in place.
            (entry.path / "complete").unlink(missing_ok=True)
            doomed = entry.path
    _force_rmtree(doomed)


def _kind_dir(root: Path, kind: str) -> Path:
    if kind == "download":
        return root
    return root / ENTRY_DIRS.get(kind, kind)


def _rename_dir(source: Path, target: Path) -> None:
    try:
        os.rename(source, target)
    except PermissionError:
        # Moving a directory to another parent rewrites its "..", which needs write permission on the
        # directory itself; entries built read-only lack it.
        mode = source.stat(follow_symlinks=False).st_mode
        os.chmod(source, stat.S_IMODE(mode) | stat.S_IRWXU)
        os.rename(source, target)


def _force_rmtree(path: Path) -> None:
    import shutil

    try:
        shutil.rmtree(path)
        return
    except OSError:
        if not os.path.lexists(path):
            return  # a concurrent prune finished it
    # Rootfs trees hold read-only directories (e.g. usr/share/doc from some packages): make every
    # directory writable by us, then try once more.
    _make_dirs_writable(path)
    try:
        shutil.rmtree(path)
    except OSError as exc:
        if not os.path.lexists(path):
            return
        where = exc.filename or path
        raise EnvbuildError(f"cannot delete {where}: {exc.strerror}", _permission_hint(path)) from None


def _make_dirs_writable(top: Path) -> None:
    def allow(path: str) -> None:
        try:
            mode = os.lstat(path).st_mode
            if stat.S_ISDIR(mode):
                os.chmod(path, stat.S_IMODE(mode) | stat.S_IRWXU)
        except OSError:
            pass  # not ours to change: the second rmtree reports it

    allow(os.fspath(top))
    # Top-down: each directory is opened up before os.walk lists it.
    for directory, subdirs, _files in os.walk(top):
        for sub in subdirs:
            allow(os.path.join(directory, sub))


def _permission_hint(path: Path) -> str:
    return (f"files under {path} belong to another user (root, if a build ran under sudo): "
            f"remove it as that user, e.g. `sudo rm -rf {path}`")


# ---------------------------------------------------------------------------------------------- sizes, ages

_SIZE_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)
_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_AGE_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([smhdw])\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """"50G" -> bytes. K, M, G, T are powers of 1024 (50G == 50GiB == 50GB); a bare number is bytes."""
    match = _SIZE_RE.match(text)
    if not match:
        raise UsageError(f"invalid size {text!r}",
                         "give bytes or a number with K, M, G or T (powers of 1024), e.g. 50G, 1.5T or 500M")
    number, unit = match.groups()
    return int(float(number) * _SIZE_UNITS[unit.upper()])


def parse_age(text: str) -> float:
    """"30d" -> seconds. Units: s, m (minutes), h, d, w; the unit is required."""
    match = _AGE_RE.match(text)
    if not match:
        raise UsageError(f"invalid age {text!r}",
                         "give a number with a unit: s, m (minutes), h, d or w, e.g. 30d, 12h or 2w")
    number, unit = match.groups()
    return float(number) * _AGE_UNITS[unit.lower()]


def human_size(size: int) -> str:
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
