"""What every `envbuild build` session is: the loaded spec, the options, where progress goes, the lock
chosen for it, and the two things a session does, `dry_run()` and `build()`. One kind per spec kind:
envbuild.builder.sessions.imagesession (pip image), overlaysession (venv overlay), condasession (conda);
envbuild.commands.build picks one and drives it."""

from __future__ import annotations

import abc
import contextlib
import time
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from envbuild.builder.sessions.buildrequest import BuildOptions
    from envbuild.envspec.loadspec import LoadedSpec
    from envbuild.lock.lockmodel import LoadedLock


class Session(abc.ABC):
    """One `envbuild build` of one spec; the kinds differ in how they plan and build."""

    def __init__(self, loaded: LoadedSpec, options: BuildOptions, *, out: TextIO) -> None:
        self.loaded = loaded
        self.options = options
        self.out = out
        self._uses = contextlib.ExitStack()  # the store entries this session reads (use locks)
        # The lock to install, as envbuild.builder.sessions.buildlock chose it (uv's conventions); unset: --locked's only.
        self.chosen_lock: LoadedLock | None = None
        self.lock_chosen = False
        self.lock_note = ""  # --dry-run: which lock case applies
        self.started = time.monotonic()  # the command's start: a build's total includes the lock and the base
        # Set when the output was found up to date: the result line without its time, and the inputs the verdict
        # was made from (envbuild.builder.sessions.noopinputs), for the light check's record.
        self.up_to_date: tuple[str, list[tuple[str, str]]] | None = None

    @abc.abstractmethod
    def dry_run(self) -> str:
        """The plan as text, headed by the lock case (lock_note); nothing is built or written."""

    @abc.abstractmethod
    def build(self) -> Path:
        """Build the output; returns its path."""

    def while_resolving(self) -> Callable[[LoadedLock], None] | None:
        """What to start while a stale lock is resolved again (given the stale lock); None: nothing."""
        return None

    def release(self) -> None:
        """Let go of what the session holds (use locks, work made ahead) when it ends without building."""
        self._uses.close()

    def choose_lock(self, lock: LoadedLock | None, note: str = "") -> None:
        self.chosen_lock, self.lock_chosen, self.lock_note = lock, True, note

    def the_lock(self) -> LoadedLock | None:
        if self.lock_chosen:
            return self.chosen_lock
        if not self.options.locked:
            return None
        from envbuild.builder.sessions.lockdecision import load_fresh_lock

        return load_fresh_lock(self.loaded)

    def _say(self, text: str, *, result: bool = False) -> None:
        """A line of progress; with -q only warnings and the result (`result`) are printed."""
        if self.options.quiet and not result and not text.startswith(("warning", "error")):
            return
        print(text, file=self.out, flush=True)

    def _sweep_store(self, store_root: Path) -> None:
        """Before building: remove what killed builds left (their locks are free), in the store and beside
        the output, so debris never outlives the next build (see envbuild.store.debris)."""
        from envbuild.store.debris import remove_stale_partials, sweep_abandoned
        from envbuild.store.entries import human_size

        removed = sweep_abandoned(store_root)
        partials = remove_stale_partials(self.options.output.absolute(), store_root, self.loaded.spec.name)
        if removed or partials:
            freed = sum(size for _, size in removed)
            names = [path for path, _ in removed] + partials
            self._say(f"removed what killed builds left ({human_size(freed)}): " + ", ".join(names))
