"""Open an image for reading: a SIF file (its primary squashfs partition) or a sandbox directory."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

from envbuild.inventory.errors import ImageFormatError
from envbuild.inventory.pyenvs import Inventory, Problem, take_inventory
from envbuild.inventory.sif import SifLayout, SifObject, read_sif_layout
from envbuild.inventory.squashfs import DECODE_ERRORS, Squashfs
from envbuild.inventory.trees import DirectoryTree, SquashfsTree, Tree

T = TypeVar("T")


@dataclass
class OpenImage:
    path: str
    tree: Tree
    layout: SifLayout | None = None  # None for a sandbox directory
    partition: SifObject | None = None
    fs: Squashfs | None = None


@contextmanager
def open_image(path: str) -> Iterator[OpenImage]:
    """Yield a readable view of the image's root file system. Errors name the file and say what to do."""
    if os.path.isdir(path):
        yield OpenImage(path=path, tree=DirectoryTree(path))
        return
    layout = read_sif_layout(path)
    partition = layout.primary_partition()
    if partition.fs_type == "encrypted-squashfs":
        raise ImageFormatError(path, "the root file system is encrypted",
                               "envbuild packages --via-runtime lists it (the runtime decrypts it)")
    if partition.fs_type != "squashfs":
        raise ImageFormatError(path, f"the root file system is {partition.fs_type}, not squashfs",
                               "use --via-runtime, or convert it: apptainer build new.sif old.sif")
    fs = guarded(path, lambda: Squashfs(path, partition.offset, partition.size))
    try:
        tree = guarded(path, lambda: SquashfsTree(fs))
        yield OpenImage(path=path, tree=tree, layout=layout, partition=partition, fs=fs)
    finally:
        fs.close()


def guarded(path: str, action: Callable[[], T]) -> T:
    """Run `action`; turn what a damaged file makes the decoders raise into one clear error for this image."""
    try:
        return action()
    except DECODE_ERRORS as exc:
        raise ImageFormatError(path, f"the squashfs file system is damaged ({type(exc).__name__}: {exc})",
                               "the file is corrupt or truncated: copy or download it again") from None


def read_inventory(path: str) -> Inventory:
    """Environments and packages of one image, read from the file."""
    with open_image(path) as image:
        inventory = guarded(path, lambda: take_inventory(image.tree))
        for obj in image.layout.objects if image.layout else ():
            if obj.data_type == "partition" and obj.part_type == "overlay":
                # A writable overlay (apptainer overlay create IMG.sif) is an ext3 file system on top
                # of the squashfs; what was installed into it is only visible to the runtime.
                inventory.problems.append(Problem(
                    f"SIF object {obj.id} ({obj.fs_type} overlay, {obj.size} bytes)",
                    "packages installed into the embedded overlay are not read from the file: compare with --via-runtime"))
        return inventory
