"""Reading a venv overlay file (`NAME.sqsh`): its record, without mounting or starting anything.

Used by envrun (is this overlay made for this base?), the build (is the output up to date?) and the
inventory. Reading the record touches a few metadata blocks, however large the overlay.
This module imports nothing heavy (no dataclasses) at import time: envrun checks files with it on its
way to exec. What the inventory needs beyond the record is in overlayvenv.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from envbuild.shared.errors import ImageFormatError
from envbuild.shared.overlayformat import RECORD_FILE, check_record, is_squashfs_file

if TYPE_CHECKING:
    from envbuild.inventory.trees import Tree

_RECORD_LIMIT = 4 << 20


def is_overlay_file(path: str) -> bool:
    """True when `path` is a bare squashfs file (what envbuild writes as an overlay), not a SIF."""
    try:
        with open(path, "rb") as handle:
            return is_squashfs_file(handle.read(4))
    except OSError:
        return False


def record_in_tree(tree: Tree, path: str) -> dict[str, Any] | None:
    """The record of the overlay whose root `tree` is; None when there is no record file (a squashfs
    not made by envbuild); ImageFormatError when the record is unreadable."""
    data = tree.read("/" + RECORD_FILE, _RECORD_LIMIT)
    if data is None:
        return None
    import json  # an overlay's record only: a SIF's listing needs none

    try:
        return check_record(json.loads(data), path)
    except ValueError as exc:
        raise ImageFormatError(path, f"unreadable overlay record: {exc}", "build the overlay again") from None


def read_overlay_record(path: str) -> dict[str, Any]:
    """The overlay's record (envbuild.shared.overlayformat). ImageFormatError when `path` is no envbuild overlay."""
    from envbuild.inventory.squashfs import DECODE_ERRORS, Squashfs
    from envbuild.inventory.trees import SquashfsTree

    if not is_overlay_file(path):
        raise ImageFormatError(path, "not a squashfs file (an overlay starts with 'hsqs')",
                               "pass the .sqsh file that `envbuild build` wrote for an overlay spec")
    try:
        with Squashfs(path) as fs:
            record = record_in_tree(SquashfsTree(fs), path)
    except DECODE_ERRORS as exc:
        raise ImageFormatError(path, f"the squashfs file system is damaged ({type(exc).__name__}: {exc})",
                               "the file is corrupt or truncated: build or copy it again") from None
    if record is None:
        raise ImageFormatError(path, f"a squashfs without {RECORD_FILE}: not made by envbuild",
                               "build the overlay with `envbuild build SPEC` (a spec with an overlay: section), "
                               "or mount it yourself with --bind FILE:/mount:image-src=/")
    return record
