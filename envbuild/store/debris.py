"""What killed builds left in the store, told apart from what running builds are making.

A build holds the lock of every entry it creates (bases and env layers per step, its image for the
whole build) and the `work` lock of its work directory for as long as that directory exists. So an
unfinished entry or a work directory whose lock is free belongs to a build that is gone (SIGKILL, a
node that died, an OOM kill): it is removed at once by the next build or `envbuild cache prune`, with
no hour of waiting and no second request. Trash is what an interrupted removal left; nobody uses it.

Work directories kept on purpose (`--keep-work`) carry a KEPT marker and are left to age out.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from envbuild.store.entries import StoreEntry
from envbuild.store.locks import forget_lock, try_entry_lock

KEPT = ".envbuild-kept"  # in a work directory: kept by --keep-work for inspection, not debris


def abandoned(root: Path, entries: Iterable[StoreEntry]) -> set[str]:
    """Qualified names (kind/name) of the unfinished entries, work directories and trash that no running
    build holds: safe to remove now."""
    found = set()
    for entry in entries:
        if entry.kind == "trash":
            found.add(entry.qualified_name)
        elif entry.kind == "work":
            if not os.path.lexists(entry.path / KEPT) and _lock_is_free(root, "work", entry.name):
                found.add(entry.qualified_name)
        elif entry.kind != "download" and not entry.complete and _lock_is_free(root, entry.kind, entry.name):
            found.add(entry.qualified_name)
    return found


def _lock_is_free(root: Path, kind: str, name: str) -> bool:
    lock = try_entry_lock(root, kind, name)
    if lock is None:
        return False
    lock.release()
    return True


def sweep_abandoned(root: Path) -> list[tuple[str, int]]:
    """Remove what killed builds left (see `abandoned`); returns (path, bytes freed) for each removal.
    Each removal happens under the entry's lock, after checking again that it is still unfinished, so a
    build that just took the entry over or finished it is never disturbed.

    The store is held open and everything is listed, sized and removed by descriptor (store.places): a link a
    member planted at `trash`, `work` or a kind directory is refused (UnsafePlaceError, naming it and the fix)
    before anything is removed, and one planted inside an entry is removed itself, never what it names."""
    from envbuild.shared.errors import EnvbuildError
    from envbuild.shared.safefiles import UnsafePlaceError
    from envbuild.store.entries import store_entries, tree_usage_and_newest
    from envbuild.store.places import OpenStore, open_entry
    from envbuild.store.prune import remove_entry

    root = Path(root)
    try:
        store = OpenStore(root)
    except (FileNotFoundError, NotADirectoryError):
        return []
    removed = []
    with store:
        # Without sizes: this runs before every build, and walking every layer of a big store costs seconds.
        for entry in store_entries(store, with_sizes=False):
            if entry.qualified_name not in abandoned(root, [entry]):
                continue
            parent = store.kind_dir(entry.kind)
            entry_fd = None if parent is None else open_entry(parent, entry.name)
            if entry_fd is None:
                continue  # gone meanwhile
            try:
                size = tree_usage_and_newest(entry_fd)[0]
            finally:
                os.close(entry_fd)
            try:
                remove_entry(root, entry, only_if_unfinished=True, store=store)
            except UnsafePlaceError:
                raise  # a store directory swapped for a link meanwhile: the user must hear of it
            except EnvbuildError:
                continue  # taken meanwhile, or not ours to delete: `envbuild cache ls` still shows it
            if entry.kind == "work":
                lock = try_entry_lock(root, "work", entry.name)
                if lock is not None:
                    with lock:
                        forget_lock(root, "work", entry.name)
            removed.append((str(entry.path), size))
    return removed


def remove_stale_partials(output: Path, root: Path, spec_name: str) -> list[str]:
    """Partial copies beside `output` (`<output>.partial-<build id>`) whose build is gone: its work lock
    (`<spec name>-<build id>`) is free. A SIGKILL during the copy to the output leaves one. The output's
    directory is held open and each name is unlinked in it: a link planted under such a name (in a project
    directory others may write) is removed itself, never the file it names."""
    from envbuild.shared import safefiles

    prefix = f"{output.name}.partial-"
    try:
        directory = safefiles.open_dir(output.parent)
    except (FileNotFoundError, NotADirectoryError):
        return []
    removed = []
    try:
        for name in sorted(safefiles.list_names(directory)):
            if not name.startswith(prefix):
                continue
            build_id = name[len(prefix):].removesuffix(".envbuild-partial")
            if not build_id or "/" in build_id or not _lock_is_free(root, "work", f"{spec_name}-{build_id}"):
                continue
            try:
                safefiles.unlink_at(directory, name, missing_ok=False)
            except OSError:
                continue
            forget_lock(root, "work", f"{spec_name}-{build_id}")
            removed.append(str(output.parent / name))
    finally:
        os.close(directory)
    return removed
