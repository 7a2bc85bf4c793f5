"""What may go and taking it away: the least recently used entries beyond a size or age, removed by
renaming into trash/ first so that a removal is atomic."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Collection, Iterable
from pathlib import Path

from envbuild.shared import safefiles
from envbuild.shared.errors import EnvbuildError
from envbuild.store.entries import StoreEntry
from envbuild.store.layout import COMPLETE, ENTRY_DIRS, KIND_ORDER, STALE_AFTER_SECONDS, kind_dir
from envbuild.store.locks import lock_holder, try_entry_lock, try_exclusive_use
from envbuild.store.places import OpenStore, open_entry


def choose_prunable(
    entries: Iterable[StoreEntry],
    *,
    now: float,
    older_than: float | None,
    max_size: int | None,
    include_downloads: bool = False,
    abandoned: Collection[str] = frozenset(),
) -> list[StoreEntry]:
    """What a prune removes, in removal order:

    1. always: incomplete entries, work dirs and trash that are `abandoned` (qualified names: no running
       build holds their lock, see store.debris), or untouched for an hour (kept work directories);
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
        if not _is_build_result(entry) and (entry.qualified_name in abandoned or now - entry.last_used > STALE_AFTER_SECONDS):
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


def remove_entry(root: Path, entry: StoreEntry, *, only_if_unfinished: bool = False,
                 store: OpenStore | None = None) -> None:
    """Remove an entry. Under its lock it is renamed into `<root>/trash/` first, so a build never sees half
    an entry; the slow delete happens after the lock is released. Raises EntryBusyError when a build holds
    the lock. `only_if_unfinished`: leave it when, under the lock, it turns out complete after all (a
    build finished it between listing and locking). `store`: the store already held open.

    Every step goes by descriptor (store.places): the rename is between the held kind and trash directories,
    and the delete never crosses a link, so a link a member planted at `trash`, at the entry or inside it
    deletes nothing but itself; a store directory that is a link or a stranger's is refused (UnsafePlaceError)."""
    root = Path(root)
    if entry.kind not in KIND_ORDER or entry.path.parent != kind_dir(root, entry.kind):
        raise EnvbuildError(f"{entry.path} is not an entry of the store {root}", "list the entries of this store with list_entries(root)")
    if store is None:
        try:
            opened = OpenStore(root)
        except FileNotFoundError:
            return  # the whole store is gone
        with opened:
            remove_entry(root, entry, only_if_unfinished=only_if_unfinished, store=opened)
        return
    if entry.kind == "trash":
        trash = store.dir("trash")
        if trash is not None:
            _remove_tree(trash, entry.name, entry.path)  # already out of the way; nobody locks trash
        return
    lock = try_entry_lock(root, entry.kind, entry.name)
    if lock is None:
        raise EntryBusyError(
            f"{entry.kind} {entry.name} is in use by a build ({lock_holder(root, entry.kind, entry.name)})",
            "retry when that build has finished",
        )
    readers = try_exclusive_use(root, entry.kind, entry.name) if entry.kind in ENTRY_DIRS else None
    if entry.kind in ENTRY_DIRS and readers is None:
        lock.release()
        raise EntryBusyError(f"{entry.kind} {entry.name} is being read by a running build", "retry when that build has finished")
    with lock, contextlib.ExitStack() as stack:
        if readers is not None:
            stack.enter_context(readers)
        parent = store.kind_dir(entry.kind)
        entry_fd = None if parent is None else open_entry(parent, entry.name)
        if parent is None or entry_fd is None:
            return  # someone else removed it meanwhile (or put something that is not an entry in its place)
        try:
            if only_if_unfinished and entry.kind in ENTRY_DIRS and _exists_at(entry_fd, COMPLETE):
                return
            trash = store.dir("trash", create=True)
            assert trash is not None
            doomed = f"{entry.name}-{secrets.token_hex(4)}"
            try:
                _rename_dir(parent, entry.name, trash, doomed, entry_fd)
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    raise EnvbuildError(f"cannot remove {entry.path}: {exc.strerror}", _permission_hint(entry.path)) from None
                # The kind directory is the user's link to another file system: no atomic rename is possible,
                # so withdraw the complete marker first (readers then see an unfinished entry) and delete in place.
                safefiles.unlink_at(entry_fd, COMPLETE)
                trash, doomed = parent, entry.name
        finally:
            os.close(entry_fd)
    _remove_tree(trash, doomed, entry.path)


def _exists_at(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _rename_dir(parent: int, name: str, trash: int, doomed: str, entry_fd: int) -> None:
    try:
        safefiles.rename_at(parent, name, trash, doomed)
    except PermissionError:
        # Moving a directory to another parent rewrites its "..", which needs write permission on the
        # directory itself; entries built read-only lack it. Only ours may be opened up.
        info = os.fstat(entry_fd)
        if info.st_uid != os.geteuid():
            raise
        os.fchmod(entry_fd, stat.S_IMODE(info.st_mode) | stat.S_IRWXU)
        safefiles.rename_at(parent, name, trash, doomed)


def _remove_tree(parent: int, name: str, shown: Path) -> None:
    """Delete `name` in `parent` by descriptor, never crossing a link; our read-only directories are made
    writable first (safefiles.empty_dir), others' are not ours to change and are reported."""
    try:
        safefiles.remove_tree_at(parent, name)
    except OSError as exc:
        where = exc.filename or shown
        raise EnvbuildError(f"cannot delete {where} (under {shown}): {exc.strerror}", _permission_hint(shown)) from None


def _permission_hint(path: Path) -> str:
    return (f"files under {path} belong to another user (root, if a build ran under sudo): "
            f"remove it as that user, e.g. `sudo rm -rf {path}`")
