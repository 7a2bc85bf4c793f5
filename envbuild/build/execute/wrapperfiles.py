"""Which commands get run wrappers, and which existing files a wrapper may replace."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from envbuild.build.actions import WriteRunWrappers


def venv_commands(venv_bin: str, root: str | None = None) -> list[str]:
    """Executables in the venv's bin/: from a sandbox directory, or read from a finished image (a
    cached image reused for a new output has no sandbox). `root`: the tree `venv_bin` lies in, whose links
    are resolved inside it (a base's bin/ linked to a host directory lists nothing of the host)."""
    if root is not None:
        import stat

        from envbuild.imagetree.intree import list_in_tree

        inside = venv_bin[len(root.rstrip("/")):]
        # As an image's listing: links (python -> the base's interpreter, which this tree may not hold) and
        # executable files.
        return [name for name, info in list_in_tree(root, inside)
                if stat.S_ISLNK(info.st_mode) or (stat.S_ISREG(info.st_mode) and info.st_mode & 0o111)]
    if os.path.isdir(venv_bin):
        return [e.name for e in os.scandir(venv_bin) if os.access(e.path, os.X_OK) and not e.is_dir()]
    from envbuild.inventory.overlay import is_overlay_file

    if is_overlay_file(venv_bin):  # a stored overlay: its root is the venv
        from envbuild.inventory.squashfs import Squashfs
        from envbuild.inventory.trees import SquashfsTree

        with Squashfs(venv_bin) as fs:
            children = SquashfsTree(fs).children("/bin") or {}
        return [name for name, kind in children.items() if kind in ("file", "symlink")]
    from envbuild.inventory.image import open_image
    from envbuild.spec.model import VENV_PREFIX

    with open_image(venv_bin) as image:
        children = image.tree.children(f"{VENV_PREFIX}/bin") or {}
    return [name for name, kind in children.items() if kind in ("file", "symlink")]


def is_replaceable_wrapper(path: Path) -> bool:
    """A wrapper may replace `path` only when nothing is there or envbuild wrote it."""
    from envbuild.launch.wrappers import GENERATED_MARK

    if not path.exists() and not path.is_symlink():
        return True
    if path.is_symlink() or not path.is_file():
        return False
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return GENERATED_MARK in handle.read(1024)
    except OSError:
        return False


def write_run_wrappers(action: WriteRunWrappers) -> tuple[list[str], list[str]]:
    """Write a wrapper per command of the venv (and the extra commands) into `action.dest`; returns the
    names written and the names kept because a file envbuild did not write was there."""
    from envbuild.safefiles import atomic_write
    from envbuild.launch.wrappers import render_wrapper, wrapped_commands
    from envbuild.recipes.load import load_recipe

    entries = [*venv_commands(action.venv_bin, action.venv_root), *action.extra_commands]
    recipe = load_recipe(action.system)
    dest = Path(action.dest)
    dest.mkdir(parents=True, exist_ok=True)
    names, kept = [], []
    for name in wrapped_commands(entries):
        target = dest / name
        if not is_replaceable_wrapper(target):
            kept.append(name)  # someone else's file: never overwrite it
            continue
        atomic_write(target, render_wrapper(name, action.image, recipe, action.runtime_name, overlays=action.overlays),
                     mode=0o755)
        names.append(name)
    return names, kept
