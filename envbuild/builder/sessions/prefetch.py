"""While a stale lock is resolved again, hard-link the env layer that will most likely be the new one's parent.

A user adds a package to the spec and builds: the lock is stale, so uv resolves again (mostly waiting on
the package indexes), and only then is the new env layer's parent known and hard-linked (`cp -al` of the
reference env layer's 46,000 paths, bound by the file system's journal, not the CPU): two waits of about
the same length, one after the other. Resolving again keeps every pin the spec still allows, so the parent is nearly always the env layer
the previous lock built; its copy (with the guard's snapshot, as envbuild.builder.execute.fsactions.copy_tree makes
them) starts beside the resolution in its own work directory. The build then takes it (envbuild.builder.plan.imageplan
renames it into place instead of copying) when the layer it chose is that one, and removes it otherwise.

Nothing here decides anything the build did not: the parent is still chosen from the new lock
(BuildSession._plan); a copy of another layer is thrown away (only when the guess was wrong).

From a store others can write, the layer is also digested meanwhile and compared with its record
(envbuild.store.integrity.env_layer_problem: longer than the resolution it runs beside): the build takes
that verdict when it chooses the same layer, and checks any other.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from envbuild.shared import safefiles

if TYPE_CHECKING:
    from envbuild.builder.sessions.buildrequest import BuildOptions
    from envbuild.envspec.loadspec import LoadedSpec
    from envbuild.lock.lockmodel import LoadedLock


@dataclass
class ParentPrefetch:
    """A hard-linked copy of env layer `parent` being made at `tree`, with the guard's snapshot at `snapshot`."""

    parent: str
    store_root: str
    work_dir: str
    tree: str
    snapshot: str
    _thread: threading.Thread | None = None
    _failure: list[str] = field(default_factory=list)
    _checker: threading.Thread | None = None
    _verdict: list[str | None] = field(default_factory=list)

    def check(self, entry_dir: str) -> ParentPrefetch:
        """Digest the layer at `entry_dir` against its record meanwhile (a store others can write)."""
        from envbuild.store.integrity import env_layer_problem

        def check() -> None:
            try:
                self._verdict.append(env_layer_problem(entry_dir)[0])
            except OSError as exc:
                self._verdict.append(f"rootfs: {exc}")

        self._checker = threading.Thread(target=check, name="envbuild-prefetch-check", daemon=True)
        self._checker.start()
        return self

    def verdict(self, parent: str) -> tuple[str | None] | None:
        """What the check found for `parent` ((problem,), problem None when it matched its record); None when
        this prefetch did not check that layer."""
        if self._checker is None or parent != self.parent:
            return None
        self._checker.join()
        return (self._verdict[0],) if self._verdict else None

    def start(self, source: str) -> ParentPrefetch:
        def copy() -> None:
            recorder = threading.Thread(target=self._record, args=(source,), name="envbuild-prefetch-snapshot", daemon=True)
            recorder.start()
            result = subprocess.run(safefiles.linked_copy_argv(source, self.tree), capture_output=True, text=True, check=False)
            recorder.join()
            if result.returncode != 0:
                self._failure.append(result.stderr.strip()[-300:] or f"cp exited with {result.returncode}")

        # The work directory lies in the store's work/, which every member of a group store may write: made by
        # descriptor from there, so a link planted at its name is refused, never copied into; and made new (its
        # name is this build's own), so none another member made ahead, with a link at rootfs, is copied into.
        from envbuild.store.places import make_store_dirs

        make_store_dirs(self.store_root, self.work_dir, new=True)
        self._thread = threading.Thread(target=copy, name="envbuild-prefetch", daemon=True)
        self._thread.start()
        return self

    def _record(self, source: str) -> None:
        from envbuild.builder.execute.fsactions import file_states

        try:
            safefiles.write_file(self.snapshot, json.dumps(file_states(source)))
        except OSError as exc:
            self._failure.append(str(exc))

    def take(self) -> tuple[str, str] | None:
        """Wait for the copy; (tree, snapshot) when it is whole, else None (the build copies as usual)."""
        if self._thread is not None:
            self._thread.join()
        if self._failure or not (os.path.isdir(self.tree) and os.path.isfile(self.snapshot)):
            return None
        return self.tree, self.snapshot

    def remove(self) -> None:
        """Wait for the copy and remove what is left of it (all of it when the build did not take it)."""
        for thread in (self._thread, self._checker):
            if thread is not None:
                thread.join()
        subprocess.run(["rm", "-rf", "--one-file-system", self.work_dir], check=False)


def start_parent_prefetch(loaded: LoadedSpec, options: BuildOptions, previous: LoadedLock, *,
                          uses: ExitStack, use: Callable[[Path, str, str], None]) -> ParentPrefetch | None:
    """Start copying the env layer `previous` (the lock before it is resolved again) built, or would have taken
    as its parent; None when there is none in the store. Its use lock and the copy's work lock are held, and
    the copy removed, until `uses` closes (the end of the build)."""
    from envbuild.builder.plan.imageplan import plan_base
    from envbuild.builder.plan.layers import plan_layers
    from envbuild.builder.sessions.buildrequest import make_request, read_digest
    from envbuild.builder.sessions.envparent import find_env_parent
    from envbuild.host.buildhost import gather_host_facts
    from envbuild.store.layout import EntryPaths, StorePaths
    from envbuild.store.locks import entry_lock, forget_lock

    facts = gather_host_facts(cache_dir=options.cache_dir)
    request = make_request(loaded, options, facts, lock=previous)
    base = plan_base(request)
    digest = read_digest(base)
    if not digest or not os.path.exists(EntryPaths(base.entry).complete):
        return None
    store_root = Path(facts.cache_dir)
    store = StorePaths(str(store_root))
    request = request.with_base_digest(digest)
    layers = plan_layers(request)
    parent = layers.env_entry if os.path.exists(store.env(layers.env_entry).complete) else find_env_parent(store_root, layers, request)
    if parent is None:
        return None
    use(store_root, "env", store.env(parent).dir)
    if not os.path.exists(store.env(parent).complete):
        return None
    name = f"{loaded.spec.name}-{os.getpid()}-{uuid.uuid4().hex[:6]}-prefetch"
    work = store.work(name)
    uses.enter_context(entry_lock(store_root, "work", name))
    uses.callback(forget_lock, store_root, "work", name)
    prefetch = ParentPrefetch(parent=parent, store_root=str(store_root), work_dir=work, tree=f"{work}/rootfs",
                              snapshot=f"{work}/parent.snapshot")
    uses.callback(prefetch.remove)  # after the work lock's release is registered: runs before it
    from envbuild.store.integrity import others_can_write

    if others_can_write(store_root, Path(store.env(parent).dir), ("rootfs", "digest")):
        prefetch.check(store.env(parent).dir)
    return prefetch.start(store.env(parent).rootfs)
