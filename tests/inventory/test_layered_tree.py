"""Reading a SIF overlay partition over the root file system as overlayfs shows it (envbuild.inventory.layered)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from envbuild.inventory.layered import LayeredTree
from envbuild.inventory.squashfs import Squashfs
from envbuild.inventory.trees import DirectoryTree

pytestmark = pytest.mark.skipif(shutil.which("mksquashfs") is None, reason="needs mksquashfs")


def test_upper_wins_whiteouts_hide_and_directories_merge(tmp_path: Path) -> None:
    lower, upper = tmp_path / "lower", tmp_path / "upper"
    for path, text in {"a/keep.txt": "old", "a/gone.txt": "gone", "b/x": "x", "c": "file", "d/y": "y"}.items():
        (lower / path).parent.mkdir(parents=True, exist_ok=True)
        (lower / path).write_text(text)
    for path, text in {"a/keep.txt": "new", "a/new.txt": "added", "c/inside": "dir now"}.items():
        (upper / path).parent.mkdir(parents=True, exist_ok=True)
        (upper / path).write_text(text)
    image = tmp_path / "upper.sqsh"
    # Whiteouts as pseudo files: character devices 0/0, made without the right to mknod.
    subprocess.run(["mksquashfs", str(upper), str(image), "-noappend", "-quiet", "-no-progress",
                    "-p", "a/gone.txt c 000 0 0 0 0", "-p", "b c 000 0 0 0 0"], check=True, capture_output=True)
    with Squashfs(str(image)) as fs:
        tree = LayeredTree(DirectoryTree(lower), fs)
        assert tree.children("/") == {"a": "dir", "c": "dir", "d": "dir"}
        assert tree.children("/a") == {"keep.txt": "file", "new.txt": "file"}
        assert tree.read("/a/keep.txt", 100) == b"new"
        assert tree.read("/a/gone.txt", 100) is None and tree.children("/b") is None and tree.read("/b/x", 10) is None
        assert tree.children("/c") == {"inside": "file"}  # a directory above hides the file below
        assert tree.read("/d/y", 10) == b"y"  # untouched paths come from below
