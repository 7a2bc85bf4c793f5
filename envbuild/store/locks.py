"""Who is making or using an entry: flock'ed files under locks/, with the holder (host, pid) written in
for messages.

Two locks per entry:
- `<kind>-<name>.lock`, exclusive: held by the build that creates the entry (and by a removal);
- `use-<kind>-<name>.lock`, shared: held by every build that reads the entry (copies a base into an env
  layer, an env layer into its sandbox) for as long as it may still read it. A removal (`cache prune`,
  `cache rm`, the debris sweep) must also get this one exclusively, so a running build's inputs never
  disappear under it. Separate files because flock locks of one process on two descriptors of the same
  file conflict: a build could not read-lock the layer its own step is creating.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
from collections.abc import Callable
from pathlib import Path

from envbuild.shared import safefiles
from envbuild.shared.errors import EnvbuildError
from envbuild.store.layout import LOCK_KINDS, StorePaths, check_entry_name


class EntryLock:
    """An exclusive flock on `<root>/locks/<kind>-<name>.lock`, held until `release()` or the end of a
    `with` block. The lock file is never deleted: deleting a flock'ed file lets two processes each lock a
    different file of the same name."""

    def __init__(self, path: Path, fd: int, *, shared: bool = False) -> None:
        self.path = path
        self._fd: int | None = fd
        self._shared = shared

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        if not self._shared:
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


def lock_path(root: Path, kind: str, name: str, *, use: bool = False) -> Path:
    if kind not in LOCK_KINDS:
        raise EnvbuildError(f"unknown store entry kind {kind!r} for a lock", f"use one of: {', '.join(LOCK_KINDS)}")
    check_entry_name(name)
    return Path(StorePaths(str(root)).lock(f"use-{kind}" if use else kind, name))


def use_lock(root: Path, kind: str, name: str, *, on_wait: Callable[[str], None] | None = None) -> EntryLock:
    """A shared lock saying "a build reads this entry": removals skip it while any build holds one."""
    path = lock_path(root, kind, name, use=True)
    fd = _wait_for_lock(path, shared=True, on_wait=on_wait,
                        waiting=lambda holder: f"waiting for the removal of {kind} {name} to finish ({holder})")
    return EntryLock(path, fd, shared=True)


def try_exclusive_use(root: Path, kind: str, name: str) -> EntryLock | None:
    """The use lock exclusively if no build reads the entry now (for a removal), else None."""
    path = lock_path(root, kind, name, use=True)
    fd = _try_lock(path)
    # Nothing is written into a use lock: its readers' files stay readable.
    return None if fd is None else EntryLock(path, fd, shared=True)


def entry_lock(root: Path, kind: str, name: str, *, on_wait: Callable[[str], None] | None = None) -> EntryLock:
    """Take the exclusive lock on an entry, waiting as long as another process holds it. `on_wait` is
    called once, before waiting, with a message naming the holder. Use as `with entry_lock(...):`."""
    path = lock_path(root, kind, name)
    fd = _wait_for_lock(path, shared=False, on_wait=on_wait,
                        waiting=lambda holder: f"waiting for another build that holds {path} ({holder})")
    _write_holder(fd)
    return EntryLock(path, fd)


def try_entry_lock(root: Path, kind: str, name: str) -> EntryLock | None:
    """The entry's lock if it is free now, else None (another process holds it)."""
    path = lock_path(root, kind, name)
    fd = _try_lock(path)
    if fd is None:
        return None
    _write_holder(fd)
    return EntryLock(path, fd)


def _wait_for_lock(path: Path, *, shared: bool, on_wait: Callable[[str], None] | None,
                   waiting: Callable[[str], str]) -> int:
    fd = _open_lock_file(path)
    try:
        if not _flock(fd, path, blocking=False, shared=shared):
            if on_wait is not None:
                on_wait(waiting(_holder(fd)))
            _flock(fd, path, blocking=True, shared=shared)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _try_lock(path: Path) -> int | None:
    """An exclusive lock's descriptor if the lock is free now, else None."""
    fd = _open_lock_file(path)
    try:
        acquired = _flock(fd, path, blocking=False)
    except BaseException:
        os.close(fd)
        raise
    if not acquired:
        os.close(fd)
        return None
    return fd


def forget_lock(root: Path, kind: str, name: str) -> None:
    """Delete the lock file of an entry that is gone for good (a finished build's work directory), while
    holding its lock. Only for names never used again: a waiter on the deleted file would hold a lock
    nobody else sees, which for a unique, finished build's name can only be a sweeper that finds nothing."""
    path = lock_path(root, kind, name)
    try:
        locks = _open_locks_dir(path, create=False)
    except (OSError, EnvbuildError):
        return  # a locks directory that is not the store's own is reported where locks are taken
    if locks is None:
        return
    try:
        safefiles.unlink_at(locks, path.name)
    except OSError:
        pass
    finally:
        os.close(locks)


def lock_holder(root: Path, kind: str, name: str) -> str:
    """Who wrote themselves into the entry's lock file: "pid 1234 on host x", or "holder unknown"."""
    path = lock_path(root, kind, name)
    try:
        locks = _open_locks_dir(path, create=False)
        if locks is None:
            return "holder unknown"
        try:
            fd = os.open(path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=locks)
        finally:
            os.close(locks)
    except (OSError, EnvbuildError):
        return "holder unknown"
    try:
        return _holder(fd)
    finally:
        os.close(fd)


def _open_locks_dir(path: Path, *, create: bool = True) -> int | None:
    """The descriptor of the store's `locks` directory holding `path`, opened below the store root without
    following a link (store.places): a link a member planted at `locks` is refused, never written through."""
    from envbuild.store.places import open_store_dir, open_store_root

    root = path.parent.parent
    try:
        root_fd = open_store_root(root, create=create)
    except FileNotFoundError:
        if create:
            raise
        return None
    try:
        return open_store_dir(root_fd, os.fstat(root_fd), path.parent.name, where=str(path.parent), create=create)
    finally:
        os.close(root_fd)


def _open_lock_file(path: Path) -> int:
    try:
        locks = _open_locks_dir(path)
    except OSError as exc:
        raise EnvbuildError(f"cannot create the lock directory {path.parent}: {exc.strerror}",
                            "make the store writable or point --cache-dir / $ENVBUILD_CACHE_DIR elsewhere") from None
    assert locks is not None
    try:
        return _open_in(locks, path)
    finally:
        os.close(locks)


def _open_in(locks: int, path: Path) -> int:
    # 0o666 (less the umask): a store shared by a project's group must let every member lock it. A link, FIFO
    # or hard link planted at a lock's name is refused (UnsafePlaceError), never truncated by _write_holder.
    try:
        return safefiles.open_lock_at(locks, path.name, mode=0o666, where=str(path))
    except OSError as exc:
        raise EnvbuildError(f"cannot open the lock file {path}: {exc.strerror}",
                            "make the store writable or point --cache-dir / $ENVBUILD_CACHE_DIR elsewhere") from None


def _flock(fd: int, path: Path, *, blocking: bool, shared: bool = False) -> bool:
    mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    try:
        fcntl.flock(fd, mode if blocking else mode | fcntl.LOCK_NB)
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
