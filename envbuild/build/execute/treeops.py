"""Whole-tree operations of a build: the states the hard-link guard compares, and clamping file times
for reproducible images."""

from __future__ import annotations

import os
import stat


def file_states(root: str) -> dict[str, tuple[int, int]]:
    """relative path -> (mtime in ns, size) of every regular file under `root` (lstat, no symlinks)."""
    states: dict[str, tuple[int, int]] = {}
    prefix = len(root.rstrip("/")) + 1
    for directory, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(directory, name)
            info = os.lstat(path)
            if stat.S_ISREG(info.st_mode):
                states[path[prefix:]] = (info.st_mtime_ns, info.st_size)
    return states


def clamp_times(root: str, epoch: int) -> None:
    """Times later than `epoch` become `epoch`, without following symlinks (children before parents:
    changing a directory's entries never touches its own times, but keep the order obvious)."""
    for directory, dirs, files in os.walk(root, topdown=False):
        for name in (*files, *dirs):
            path = os.path.join(directory, name)
            info = os.lstat(path)
            if info.st_mtime > epoch or info.st_atime > epoch:
                os.utime(path, (min(info.st_atime, epoch), min(info.st_mtime, epoch)), follow_symlinks=False)
    info = os.lstat(root)
    if info.st_mtime > epoch:
        os.utime(root, (min(info.st_atime, epoch), epoch), follow_symlinks=False)
