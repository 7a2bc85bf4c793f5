"""Which commands get run wrappers, and which existing files a wrapper may replace."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from envbuild.builder.plan.actions import WriteRunWrappers


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
    from envbuild.inventory.overlayfile import is_overlay_file

    if is_overlay_file(venv_bin):  # a stored overlay: its root is the venv
        from envbuild.inventory.squashfs import Squashfs
        from envbuild.inventory.trees import SquashfsTree

        with Squashfs(venv_bin) as fs:
            children = SquashfsTree(fs).children("/bin") or {}
        return [name for name, kind in children.items() if kind in ("file", "symlink")]
    from envbuild.envspec.specmodel import VENV_PREFIX
    from envbuild.inventory.image import open_image

    with open_image(venv_bin) as image:
        children = image.tree.children(f"{VENV_PREFIX}/bin") or {}
    return [name for name, kind in children.items() if kind in ("file", "symlink")]


def is_replaceable_wrapper(path: Path) -> bool:
    """A wrapper may replace `path` only when nothing is there or envbuild wrote it."""
    from envbuild.shared.safefiles import open_dir

    fd = open_dir(path.parent)
    try:
        return _replaceable_in(fd, path.name)
    finally:
        os.close(fd)


def _replaceable_in(dir_fd: int, name: str) -> bool:
    """is_replaceable_wrapper of the name `name` in the held directory: its first KB read without following a
    link (a link, a device or anything but a regular file is someone else's)."""
    import stat

    from envbuild.launch.wrappers import GENERATED_MARK
    from envbuild.shared.errors import EnvbuildError
    from envbuild.shared.safefiles import read_file_nofollow

    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return True
    if not stat.S_ISREG(info.st_mode):
        return False
    try:
        data, _ = read_file_nofollow(dir_fd, name)
    except (OSError, EnvbuildError):
        return False
    return GENERATED_MARK in data[:1024].decode("utf-8", errors="replace")


def write_run_wrappers(action: WriteRunWrappers) -> tuple[list[str], list[str]]:
    """Write a wrapper per command of the venv (and the extra commands) into `action.dest`; returns the
    names written and the names kept because a file envbuild did not write was there.

    `dest` is OUTPUT_DIR/bin: its last component, envbuild's own name in the user's directory (a group
    project, maybe), is opened without following a link and refused when another user made it, and every
    wrapper is written through that descriptor: a bin/ planted as a link never gets wrappers in its target."""
    from envbuild.launch.wrappers import render_wrapper, wrapped_commands
    from envbuild.recipes.loadrecipe import load_recipe
    from envbuild.shared.safefiles import open_below, write_file

    entries = [*(venv_commands(action.venv_bin, action.venv_root) if action.venv_bin else ()), *action.extra_commands]
    recipe = load_recipe(action.system)
    out_dir, bin_name = os.path.split(os.path.normpath(action.dest))
    fd = open_below(out_dir or ".", (bin_name,), create=True)
    names, kept = [], []
    try:
        for name in wrapped_commands(entries):
            if not _replaceable_in(fd, name):
                kept.append(name)  # someone else's file: never overwrite it
                continue
            write_file(name, render_wrapper(name, action.image, recipe, action.runtime_name, overlays=action.overlays),
                       mode=0o755, dir_fd=fd)
            names.append(name)
    finally:
        os.close(fd)
    return names, kept
