"""Resolving a path inside an image as the container would see it, whatever holds the image (a squashfs,
a sandbox directory): one name at a time from the image's root, a symlink's target read and walked in
its place, `..` never above the root, and at most MAX_SYMLINK_HOPS links per path in all, as Linux counts
them, so a link whose target names other links cannot multiply the work. What openat2's RESOLVE_IN_ROOT
does in the kernel. The one walk for every holder: a squashfs image read in place (envbuild.inventory.squashfs),
a sandbox the inventory reads (envbuild.inventory.trees), and a build's confined I/O where the kernel has no
openat2 (envbuild.imagetree.intree); each brings the step that reads one name of its kind of directory."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

MAX_SYMLINK_HOPS = 40

Node = TypeVar("Node")


@dataclass(frozen=True)
class Link:
    """What a step finds when the name is a symlink to follow: its target."""

    target: str


def resolve_in_root(path: str, root: Node, step: Callable[[Node, str, bool], Node | Link | None],
                    release: Callable[[Node], None] = lambda _node: None) -> Node | None:
    """The node at `path` below `root`. `step(directory, name, last)` gives the entry `name` of `directory`
    (`last`: the path's last name): a Link when it is a symlink to follow, the node otherwise, None when
    there is none. `release` is called for each node left behind (a sandbox's open directories); the root
    and the node returned stay the caller's. None when the path does not resolve."""
    walk = _Walk(root, release)
    names = [n for n in path.split("/") if n]
    hops = 0
    try:
        while names:
            name = names.pop(0)
            if name in ("", "."):
                continue
            if name == "..":
                walk.up()
                continue
            found = step(walk.trail[-1], name, not names)
            if found is None:
                return None
            if isinstance(found, Link):
                hops += 1
                if hops > MAX_SYMLINK_HOPS:
                    return None
                if found.target.startswith("/"):
                    walk.to_root()
                names[:0] = [n for n in found.target.split("/") if n]
                continue
            walk.trail.append(found)
        return walk.take_last()
    finally:
        walk.release_all()


class _Walk(Generic[Node]):
    """The nodes from the root to where a resolution is."""

    def __init__(self, root: Node, release: Callable[[Node], None]) -> None:
        self.trail = [root]
        self._release = release
        self._taken = False

    def up(self) -> None:
        if len(self.trail) > 1:
            self._release(self.trail.pop())

    def to_root(self) -> None:
        while len(self.trail) > 1:
            self._release(self.trail.pop())

    def take_last(self) -> Node:
        self._taken = True
        return self.trail[-1]

    def release_all(self) -> None:
        # The root stays the caller's; the node handed back is the caller's to release.
        last = len(self.trail) - 1
        for index, node in enumerate(self.trail[1:], start=1):
            if not (self._taken and index == last):
                self._release(node)
