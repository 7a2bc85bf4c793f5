"""Bounds on walking an image's file tree, which someone else made: a crafted squashfs can list a
directory inside itself (its root as /a, /a/a, ...), so a walk by path never ends, and a huge tree can
make a listing take minutes. The walk (pyenvs.py) lists each directory once, known by what it is (a
squashfs listing's place in the directory table, a sandbox directory's device and inode), and stops with
a clear error when an image holds far more than any real one the inventory has to look at.

A directory reached a second time is skipped and noted, not an error: it was listed under its first
name, so the inventory is complete, and the note names both paths.

Real images, for scale: the reference image's walk lists 99 directories and 1,231 entries (the walk skips
documentation, headers, the standard library, site-packages' insides). The budgets are 500 times that and
more, and are reached in under a second on a squashfs, a few seconds on a sandbox directory."""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING

from envbuild.shared.errors import EnvbuildError
from envbuild.shared.terminaltext import printable

if TYPE_CHECKING:
    from envbuild.inventory.trees import Tree

MAX_DIRECTORIES = 50_000
MAX_ENTRIES = 1_000_000
# What one inventory reads from files (metadata headers, conda records). A real image with 2,000 packages
# reads about 16 MiB; an 80 KiB squashfs of 200 hard links to one 64 MiB conda record made the reader
# decompress 13 GiB before this bound.
MAX_READ_BYTES = 128 << 20
# What `inspect` reads besides: labels, start scripts, runscript, spec, lock (each cut at 1 MiB), a few KiB
# in a real image; a crafted one can hold thousands of start scripts.
MAX_FACTS_READ_BYTES = 32 << 20
# Problems noted for directories seen twice; beyond these one line counts the rest.
_NOTED_ALIASES = 5


_WALK_HINT = ("the image holds far more directories than an image's environments live in; if it is genuine, "
              "list it with --via-runtime (which asks `find` inside the container), or report it")
_READ_HINT = "the image is damaged or made to be read without end; if it is genuine, report it"


class WalkLimitError(EnvbuildError):
    """A walk or its reads went past a budget; image.guarded turns it into an ImageFormatError naming the
    image (an EnvbuildError already, so a caller that does not name the image still shows a clear error)."""

    def __init__(self, message: str, hint: str = _WALK_HINT) -> None:
        super().__init__(message, hint)


class WalkGuard:
    """Counts what a walk lists and remembers each directory it listed, by key."""

    def __init__(self, max_directories: int = MAX_DIRECTORIES, max_entries: int = MAX_ENTRIES) -> None:
        self.max_directories = max_directories
        self.max_entries = max_entries
        self.directories = 0
        self.entries = 0
        self._first_path: dict[object, str] = {}
        self.aliases: list[tuple[str, str]] = []  # (path skipped, the path it was listed under)

    def repeated(self, path: str, key: object | None) -> bool:
        """Whether the directory at `path` (known as `key`; None for one that cannot hold itself, such as an
        empty directory) was listed before under another path; it is then noted, to be skipped."""
        if key is None:
            return False
        first = self._first_path.setdefault(key, path)
        if first == path:
            return False
        self.aliases.append((path, first))
        return True

    def count(self, path: str, entries: int) -> None:
        """Count one directory listed at `path` with `entries` entries; WalkLimitError past a budget."""
        self.directories += 1
        self.entries += entries
        if self.directories > self.max_directories:
            raise WalkLimitError(f"the walk for Python environments listed {self.max_directories} directories "
                                 f"and was still going (at {printable(path)})")
        if self.entries > self.max_entries:
            raise WalkLimitError(f"the walk for Python environments listed {self.max_entries} directory entries "
                                 f"and was still going (at {printable(path)})")

    def alias_notes(self) -> list[tuple[str, str]]:
        """(path, message) notes for the directories skipped as seen before: the first few, then a count."""
        notes = [(path, f"is the directory {first} again (a directory loop, which no real file system makes); "
                        f"listed once, under {first}") for path, first in sorted(self.aliases)[:_NOTED_ALIASES]]
        rest = len(self.aliases) - _NOTED_ALIASES
        if rest > 0:
            notes.append((sorted(self.aliases)[_NOTED_ALIASES][0],
                          f"and {rest} more paths that lead to directories already listed were skipped"))
        return notes


class ReadBudget:
    """A Tree whose reads count against MAX_READ_BYTES in all; WalkLimitError past it."""

    def __init__(self, tree: Tree, max_bytes: int = MAX_READ_BYTES) -> None:
        self.tree = tree
        self.max_bytes = max_bytes
        self.bytes = 0

    def children(self, path: str) -> dict[str, str] | None:
        return self.tree.children(path)

    def directory_key(self, path: str) -> Hashable | None:
        return self.tree.directory_key(path)

    def read_order(self, paths: list[str]) -> list[str]:
        """The tree's cheapest order to read `paths` in (as given when it has none); the reads still count here."""
        order = getattr(self.tree, "read_order", None)
        return paths if order is None else list(order(paths))

    def read(self, path: str, limit: int) -> bytes | None:
        data = self.tree.read(path, min(limit, self.max_bytes - self.bytes + 1))
        if data is not None:
            self.bytes += len(data)
            if self.bytes > self.max_bytes:
                raise WalkLimitError(f"reading the image's records passed {self.max_bytes >> 20} MiB "
                                     f"(at {printable(path)}): far more than any real image holds", _READ_HINT)
        return data
