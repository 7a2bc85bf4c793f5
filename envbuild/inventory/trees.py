"""Views of an image's root file system that the inventory walks: a squashfs inside a SIF, a sandbox
directory on the host, or the listing a container printed (`--via-runtime`). All three answer the
same two questions, so finding environments and packages is written once, in pyenvs.py."""

from __future__ import annotations

import os
import posixpath
from pathlib import Path
from typing import Protocol

from envbuild.inventory.squashfs import Entry, Inode, Squashfs


class Tree(Protocol):
    def children(self, path: str) -> dict[str, str] | None:
        """name -> kind (dir | file | symlink | other) of a directory's entries, without following
        symlinks; None when `path` is not a directory."""
        ...

    def read(self, path: str, limit: int) -> bytes | None:
        """The first `limit` bytes of a file (symlinks followed); None when there is no such file."""
        ...


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
        inode = self._dirs.get(path)
        if inode is None:
            parent, name = posixpath.split(path)
            entry = (self._listing(parent) or {}).get(name) if path != "/" else None
            if entry is None or entry.kind != "dir":
                return None
            inode = self.fs.inode(entry.ref)
            self._dirs[path] = inode
        listing = {e.name: e for e in self.fs.listdir(inode)}
        self._listings[path] = listing
        return listing

    def children(self, path: str) -> dict[str, str] | None:
        listing = self._listing(path)
        return None if listing is None else {name: e.kind for name, e in listing.items()}

    def read(self, path: str, limit: int) -> bytes | None:
        parent, name = posixpath.split(path)
        entry = (self._listing(parent) or {}).get(name)
        if entry is not None and entry.kind == "file":
            inode = self.fs.inode(entry.ref)
        else:  # not reached by a walk, or behind a symlink: resolve from the root
            inode = self.fs.lookup(path)
        if inode is None or inode.kind != "file":
            return None
        return self.fs.read(inode, limit)


class DirectoryTree:
    """A sandbox directory on this machine, read as if it were the container's root."""

    def __init__(self, root: str | Path) -> None:
        self.root = str(root)

    def _host(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    def children(self, path: str) -> dict[str, str] | None:
        try:
            with os.scandir(self._host(path)) as entries:
                result = {}
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

    def read(self, path: str, limit: int) -> bytes | None:
        host = self._host(path)
        # A symlink inside the sandbox that points to an absolute path means a path in the sandbox.
        for _ in range(40):
            if not os.path.islink(host):
                break
            target = os.readlink(host)
            host = self._host(target) if target.startswith("/") else os.path.join(os.path.dirname(host), target)
        try:
            with open(host, "rb") as handle:
                return handle.read(limit)
        except OSError:
            return None


class ListedTree:
    """The paths and file heads a container printed (see runtime.py); directories are implied by the
    paths under them, so a listing holds what the walk looks for and nothing else."""

    def __init__(self) -> None:
        self._children: dict[str, dict[str, str]] = {"/": {}}
        self._contents: dict[str, bytes] = {}

    def add(self, path: str, kind: str, content: bytes | None = None) -> None:
        path = posixpath.normpath("/" + path.lstrip("/"))
        if path == "/":
            return
        parent, name = posixpath.split(path)
        self.add(parent, "dir")
        siblings = self._children.setdefault(parent, {})
        if siblings.get(name) != "dir":  # a path seen as a parent stays a directory
            siblings[name] = kind
        if kind == "dir":
            self._children.setdefault(path, {})
        if content is not None:
            self._contents[path] = content

    def children(self, path: str) -> dict[str, str] | None:
        listing = self._children.get(path)
        return None if listing is None else dict(listing)

    def read(self, path: str, limit: int) -> bytes | None:
        content = self._contents.get(path)
        return None if content is None else content[:limit]


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
