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
            if not (entry.path / KEPT).exists() and _lock_is_free(root, "work", entry.name):
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
    build that just took the entry over or finished it is never disturbed."""
    from envbuild.errors import EnvbuildError
    from envbuild.store.entries import list_entries
    from envbuild.store.prune import remove_entry

    root = Path(root)
    # Without sizes: this runs before every build, and walking every layer of a big store costs seconds.
    entries = list_entries(root, with_sizes=False)
    removed = []
    for entry in entries:
        if entry.qualified_name not in abandoned(root, [entry]):
            continue
        size = _usage(entry.path)
        try:
            remove_entry(root, entry, only_if_unfinished=True)
        except EnvbuildError:
            continue  # taken meanwhile, or not ours to delete: `envbuild cache ls` still shows it
        if entry.kind == "work":
            lock = try_entry_lock(root, "work", entry.name)
            if lock is not None:
                with lock:
                    forget_lock(root, "work", entry.name)
        removed.append((str(entry.path), size))
    return removed


def _usage(top: Path) -> int:
    total = 0
    for directory, _dirs, files in os.walk(top):
        for name in files:
            try:
                total += os.lstat(os.path.join(directory, name)).st_blocks * 512
            except OSError:
                pass
    return total


def remove_stale_partials(output: Path, root: Path, spec_name: str) -> list[str]:
    """Partial copies beside `output` (`<output>.partial-<build id>`) whose build is gone: its work lock
    (`<spec name>-<build id>`) is free. A SIGKILL during the copy to the output leaves one."""
    removed = []
    for partial in output.parent.glob(f"{output.name}.partial-*"):
        build_id = partial.name[len(output.name) + len(".partial-"):].removesuffix(".envbuild-partial")
        if not build_id or not _lock_is_free(root, "work", f"{spec_name}-{build_id}"):
            continue
        try:
            os.unlink(partial)
        except OSError:
            continue
        forget_lock(root, "work", f"{spec_name}-{build_id}")
        removed.append(str(partial))
    return removed
