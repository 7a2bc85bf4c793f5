"""envbuild.atomicfile: a file is replaced whole, with the mode asked for, and nothing is left behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from envbuild.atomicfile import atomic_write


def test_atomic_write_replaces_the_file_and_leaves_no_partial(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    target.write_text("old", encoding="utf-8")
    link = tmp_path / "link.txt"
    os.link(target, link)
    atomic_write(target, "new\n", mode=0o640)
    assert target.read_text(encoding="utf-8") == "new\n"
    assert target.stat().st_mode & 0o777 == 0o640
    assert link.read_text(encoding="utf-8") == "old"  # a hard link is replaced, never written through
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.txt", "out.txt"]


def test_atomic_write_removes_its_partial_when_the_rename_fails(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    with pytest.raises(OSError):
        atomic_write(tmp_path / "dir", b"data")  # a directory cannot be replaced by a file
    assert [p.name for p in tmp_path.iterdir()] == ["dir"]
