"""Open an image for reading: a SIF file (its primary squashfs partition), a sandbox directory, or a
venv overlay (a bare squashfs whose root is shown at the mount point its record names)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from envbuild.inventory.layered import LayeredTree
from envbuild.inventory.overlayfile import is_overlay_file, record_in_tree
from envbuild.inventory.overlayvenv import OverlayVenv, read_overlay_venv
from envbuild.inventory.pyenvs import Inventory, Problem, take_inventory
from envbuild.inventory.squashfs import DECODE_ERRORS, Squashfs
from envbuild.inventory.trees import DirectoryTree, MountedTree, SquashfsTree, Tree
from envbuild.inventory.walkguard import WalkLimitError
from envbuild.shared.errors import ImageFormatError
from envbuild.shared.overlayformat import RECORD_FILE
from envbuild.sif.reader import SifLayout, SifObject, read_sif_layout

T = TypeVar("T")


@dataclass
class OpenImage:
    path: str
    tree: Tree  # the file system as the container sees it (an overlay's root at its mount point)
    layout: SifLayout | None = None  # None for a sandbox directory or an overlay
    partition: SifObject | None = None
    fs: Squashfs | None = None
    overlay: dict[str, Any] | None = None  # an envbuild overlay's record
    venv: OverlayVenv | None = None  # ... and what its Python sees besides its own packages
    bare_squashfs: bool = False  # a squashfs file, with or without a record


@contextmanager
def open_image(path: str) -> Iterator[OpenImage]:
    """Yield a readable view of the image's root file system. Errors name the file and say what to do."""
    if os.path.isdir(path):
        yield OpenImage(path=path, tree=DirectoryTree(path))
        return
    if is_overlay_file(path):
        with _open_overlay(path) as image:
            yield image
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
    uppers: list[Squashfs] = []
    try:
        tree: Tree = guarded(path, lambda: SquashfsTree(fs))
        for part in squashfs_overlays(layout, partition):  # envbuild build --layered: the difference on top
            upper = guarded(path, partial(Squashfs, path, part.offset, part.size))
            uppers.append(upper)
            tree = LayeredTree(tree, upper)
        yield OpenImage(path=path, tree=tree, layout=layout, partition=partition, fs=fs)
    finally:
        for upper in uppers:
            upper.close()
        fs.close()


def squashfs_overlays(layout: SifLayout, root: SifObject) -> list[SifObject]:
    """The read-only squashfs overlay partitions the runtime stacks on the root file system, lowest first:
    those of the root's group (apptainer and SingularityCE ignore other groups), in descriptor order."""
    return [o for o in layout.objects if o.data_type == "partition" and o.part_type == "overlay"
            and o.fs_type == "squashfs" and o.group_id == root.group_id and o is not root]


@contextmanager
def _open_overlay(path: str) -> Iterator[OpenImage]:
    fs = guarded(path, lambda: Squashfs(path))
    try:
        root = guarded(path, lambda: SquashfsTree(fs))
        record = guarded(path, lambda: record_in_tree(root, path))
        if record is None:  # someone's own squashed venv: shown as the file holds it, at /
            yield OpenImage(path=path, tree=root, fs=fs, bare_squashfs=True)
            return
        venv = guarded(path, lambda: read_overlay_venv(root, record))
        yield OpenImage(path=path, tree=MountedTree(root, record["mount"]), fs=fs, overlay=record, venv=venv,
                        bare_squashfs=True)
    finally:
        fs.close()


def guarded(path: str, action: Callable[[], T]) -> T:
    """Run `action`; turn what a damaged file makes the decoders raise, and a walk past its budget, into one
    clear error for this image."""
    try:
        return action()
    except WalkLimitError as exc:
        raise ImageFormatError(path, exc.message, exc.hint) from None
    except DECODE_ERRORS as exc:
        raise ImageFormatError(path, f"the squashfs file system is damaged ({type(exc).__name__}: {exc})",
                               "the file is corrupt or truncated: copy or download it again") from None


def inventory_of(image: OpenImage) -> Inventory:
    """Environments and packages of an opened image, with what the file cannot tell noted as problems."""
    inventory = guarded(image.path, lambda: take_inventory(image.tree))
    inventory.overlay = image.venv
    if image.bare_squashfs and image.overlay is None:
        inventory.problems.append(Problem(
            f"/{RECORD_FILE}", "absent: not an envbuild overlay, so its mount point is unknown; shown at its own "
                               "root (mounted with --bind FILE:/MOUNT:image-src=/ its paths start with /MOUNT)"))
    for obj in image.layout.objects if image.layout else ():
        if obj.data_type == "partition" and obj.part_type == "overlay" and obj.fs_type != "squashfs":
            # A writable overlay (apptainer overlay create IMG.sif) is an ext3 file system on top
            # of the squashfs; what was installed into it is only visible to the runtime.
            inventory.problems.append(Problem(
                f"SIF object {obj.id} ({obj.fs_type} overlay, {obj.size} bytes)",
                "packages installed into the embedded overlay are not read from the file: compare with --via-runtime"))
    return inventory


def read_inventory(path: str) -> Inventory:
    """Environments and packages of one image or overlay, read from the file."""
    with open_image(path) as image:
        return inventory_of(image)


def sif_image_id(path: str) -> str | None:
    """The image id in a SIF file's header (a few hundred bytes read); None for a sandbox directory or a
    squashfs file, which have none. ImageFormatError when the file is neither and no SIF."""
    if os.path.isdir(path) or is_overlay_file(path):
        return None
    return read_sif_layout(path).header.image_id


def image_arch(path: str) -> str:
    """The image's architecture, normalised (x86_64, aarch64): a SIF's header, a sandbox's programs; "" for an
    overlay (a squashfs records none; it runs on its base's) and for what cannot be read."""
    from envbuild.host.arch import normalise_arch, programs_arch
    from envbuild.sif.format import read_sif_arch

    if os.path.isdir(path):
        tree = DirectoryTree(path)  # its links resolved inside it: /bin/sh -> /usr/bin/dash is the sandbox's dash
        return programs_arch(lambda program: tree.read(program, 20))
    if is_overlay_file(path):
        return ""
    return normalise_arch(read_sif_arch(path) or "")
