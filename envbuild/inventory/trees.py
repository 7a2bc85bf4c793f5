"""Views of an image's root file system that the inventory walks: a squashfs inside a SIF, a sandbox
directory on the host, or the listing a container printed (`--via-runtime`). All three answer the
same questions, so finding environments and packages is written once, in pyenvs.py.

Every path is the container's: a symlink in the image resolves inside the image, never on the host
(a sandbox's `/usr -> /etc` or `../../..` stays in the sandbox), with at most 40 links per path."""

from __future__ import annotations

import os
import posixpath
import stat
from collections.abc import Hashable
from typing import TYPE_CHECKING, Protocol

from envbuild.imagetree.inroot import Link, resolve_in_root
from envbuild.inventory.squashfs import Entry, Inode, Squashfs

if TYPE_CHECKING:
    from pathlib import Path  # a sandbox's path may be given as one; pathlib's import is not paid for it


class Tree(Protocol):
    def children(self, path: str) -> dict[str, str] | None:
        """name -> kind (dir | file | symlink | other) of a directory's entries, without following
        symlinks; None when `path` is not a directory."""
        ...

    def read(self, path: str, limit: int) -> bytes | None:
        """The first `limit` bytes of a file (symlinks followed); None when there is no such file."""
        ...

    def directory_key(self, path: str) -> Hashable | None:
        """What the directory at `path` is, whatever path leads to it (the walk lists each once: a crafted
        image can hold a directory inside itself); None when it cannot hold itself (empty, or no directory)."""
        ...


_UNPLACED = 1 << 32  # after every fragment index, the files without one (0xFFFFFFFF) included


class SquashfsTree:
    """Walks a squashfs; listings are kept by path so that a walk from the root decodes each once."""

    def __init__(self, fs: Squashfs) -> None:
        self.fs = fs
        self._dirs: dict[str, Inode] = {"/": fs.inode(fs.root_ref)}
        self._listings: dict[str, dict[str, Entry]] = {}

    def _listing(self, path: str) -> dict[str, Entry] | None:
        listing = self._listings.get(path)
        if listing is not None:
            return listing
        inode = self._directory(path)
        if inode is None or inode.kind != "dir":  # an entry may say dir for an inode that is none
            return None
        listing = {e.name: e for e in self.fs.listdir(inode)}
        self._listings[path] = listing
        return listing

    def children(self, path: str) -> dict[str, str] | None:
        listing = self._listing(path)
        return None if listing is None else {name: e.kind for name, e in listing.items()}

    def _directory(self, path: str) -> Inode | None:
        inode = self._dirs.get(path)
        if inode is None and path != "/":
            parent, name = posixpath.split(path)
            entry = (self._listing(parent) or {}).get(name)
            if entry is None or entry.kind != "dir":
                return None
            inode = self._dirs[path] = self.fs.inode(entry.ref)
        return inode

    def directory_key(self, path: str) -> Hashable | None:
        # The listing's place in the directory table: two paths there show the same entries. (Inode numbers
        # are the image's word and may repeat; an empty directory's place is shared and holds nothing.)
        inode = self._directory(path)
        if inode is None or inode.kind != "dir" or inode.size <= 3:
            return None
        return inode.start, inode.offset

    def read_order(self, paths: list[str]) -> list[str]:
        """`paths` in the order that decompresses each data block once. Small files share fragment blocks, and a
        block decompresses only from its start: reading its farthest file first leaves the whole prefix the
        others need in the reader's block cache, where reading them in name order decompresses it again."""

        def place(path: str) -> tuple[int, int]:
            parent, name = posixpath.split(path)
            entry = (self._listing(parent) or {}).get(name)
            if entry is None or entry.kind != "file":
                return (_UNPLACED, 0)  # behind a symlink or missing: read resolves it, last
            inode = self.fs.inode(entry.ref)
            return (inode.fragment, -inode.offset)

        return sorted(paths, key=place)

    def read(self, path: str, limit: int) -> bytes | None:
        parent, name = posixpath.split(path)
        entry = (self._listing(parent) or {}).get(name)
        inode: Inode | None
        if entry is not None and entry.kind == "file":
            inode = self.fs.inode(entry.ref)
        else:  # not reached by a walk, or behind a symlink: resolve from the root
            inode = self.fs.lookup(path)
        if inode is None or inode.kind != "file":
            return None
        return self.fs.read(inode, limit)


class DirectoryTree:
    """A sandbox directory on this machine, read as if it were the container's root: each path is opened
    one name at a time below the root (O_NOFOLLOW), symlinks resolved inside it, as openat2's
    RESOLVE_IN_ROOT does, so neither a link in the sandbox nor one swapped in meanwhile reads the host."""

    def __init__(self, root: str | Path) -> None:
        self.root = str(root)
        self._keys: dict[str, tuple[int, int]] = {}

    def _open(self, path: str, flags: int) -> int | None:
        """A descriptor for `path` in the sandbox, opened with `flags`; None when it does not resolve."""

        def step(directory: int, name: str, last: bool) -> int | Link | None:
            mode = os.stat(name, dir_fd=directory, follow_symlinks=False).st_mode
            if stat.S_ISLNK(mode):
                return Link(os.readlink(name, dir_fd=directory))
            if last and not flags & os.O_DIRECTORY and not stat.S_ISREG(mode):
                return None  # a device or FIFO named like a file the inventory reads is never opened
            # O_NOFOLLOW: a symlink swapped in since the line above is refused, not followed to the host.
            return os.open(name, (flags if last else os.O_RDONLY | os.O_DIRECTORY) | os.O_NOFOLLOW | os.O_CLOEXEC,
                           dir_fd=directory)

        try:
            root = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            fd = resolve_in_root(path, root, step, os.close)
        except OSError:
            fd = None
        if fd == root:  # the root itself, opened as a directory
            return root if flags & os.O_DIRECTORY else _reopen(root, flags)
        os.close(root)
        return fd

    def children(self, path: str) -> dict[str, str] | None:
        fd = self._open(path, os.O_RDONLY | os.O_DIRECTORY)
        if fd is None:
            return None
        try:
            info = os.fstat(fd)
            self._keys[path] = (info.st_dev, info.st_ino)
            result = {}
            with os.scandir(fd) as entries:
                for entry in entries:
                    if entry.is_symlink():
                        result[entry.name] = "symlink"
                    elif entry.is_dir():
                        result[entry.name] = "dir"
                    elif entry.is_file():
                        result[entry.name] = "file"
                    else:
                        result[entry.name] = "other"
            return result
        except OSError:
            return None
        finally:
            os.close(fd)

    def read(self, path: str, limit: int) -> bytes | None:
        # O_NONBLOCK: a FIFO named like a metadata file must not hang the listing; only regular files are read.
        fd = self._open(path, os.O_RDONLY | os.O_NONBLOCK)
        if fd is None:
            return None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            chunks, remaining = [], limit
            while remaining > 0:
                chunk = os.read(fd, min(remaining, 1 << 20))
                if not chunk:
                    break
                chunks.append(chunk)
                remaining -= len(chunk)
            return b"".join(chunks)
        except OSError:
            return None
        finally:
            os.close(fd)

    def directory_key(self, path: str) -> Hashable | None:
        # Device and inode, noted when children() listed it (the walk asks right after); a bind mount can
        # show a directory inside itself.
        key = self._keys.get(path)
        if key is None and self.children(path) is not None:
            key = self._keys.get(path)
        return key


def _reopen(directory: int, flags: int) -> int | None:
    try:
        return os.open(".", flags | os.O_CLOEXEC, dir_fd=directory)
    except OSError:
        return None
    finally:
        os.close(directory)


class ListedTree:
    """The paths and file heads a container printed (see runtime.py); directories are implied by the
    paths under them, so a listing holds what the walk looks for and nothing else."""

    def __init__(self) -> None:
        self._children: dict[str, dict[str, str]] = {"/": {}}
        self._contents: dict[str, bytes] = {}

    def add(self, path: str, kind: str, content: bytes | None = None) -> None:
        path = posixpath.normpath("/" + path.lstrip("/"))
        if content is not None:
            self._contents[path] = content
        # From the path up to the first directory already known (a loop, not recursion: a path may be deep).
        while path != "/":
            parent, name = posixpath.split(path)
            known = parent in self._children  # then it is linked into its own parent already
            siblings = self._children.setdefault(parent, {})
            if siblings.get(name) != "dir":  # a path seen as a parent stays a directory
                siblings[name] = kind
            if kind == "dir":
                self._children.setdefault(path, {})
            if known:
                return
            path, kind = parent, "dir"

    def children(self, path: str) -> dict[str, str] | None:
        listing = self._children.get(path)
        return None if listing is None else dict(listing)

    def read(self, path: str, limit: int) -> bytes | None:
        content = self._contents.get(path)
        return None if content is None else content[:limit]

    def directory_key(self, path: str) -> Hashable | None:
        return path if self._children.get(path) else None  # built from paths: nothing is in itself


class MountedTree:
    """Another tree as a container sees it mounted at `mount`: apptainer's `--bind FILE:MOUNT:image-src=/`
    shows a venv overlay's root at /user-software, so its venv must be listed as /user-software, as its
    scripts and pyvenv.cfg name it. Outside the mount point there is nothing but the way to it."""

    def __init__(self, inner: Tree, mount: str) -> None:
        self.inner = inner
        self.mount = posixpath.normpath("/" + mount.lstrip("/"))

    def _inner_path(self, path: str) -> str | None:
        """`path` in the inner tree, or None when it lies outside the mount point."""
        path = posixpath.normpath(path)
        if self.mount == "/":
            return path
        if path == self.mount:
            return "/"
        if path.startswith(self.mount + "/"):
            return path[len(self.mount):]
        return None

    def children(self, path: str) -> dict[str, str] | None:
        inner = self._inner_path(path)
        if inner is not None:
            return self.inner.children(inner)
        above = posixpath.normpath(path).rstrip("/") + "/"
        if self.mount.startswith(above):  # a directory on the way to the mount point
            return {self.mount[len(above):].split("/", 1)[0]: "dir"}
        return None

    def read(self, path: str, limit: int) -> bytes | None:
        inner = self._inner_path(path)
        return None if inner is None else self.inner.read(inner, limit)

    def directory_key(self, path: str) -> Hashable | None:
        inner = self._inner_path(path)
        return None if inner is None else self.inner.directory_key(inner)  # the way to the mount holds one name
