"""The build's output directory (-o) and the executor's log (beside the output, or the store's logs/ for
`envbuild lock`) in a group directory: their directories are never made through a link another member planted
there."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from envbuild.builder.execute.executor import BuildExecutor
from envbuild.builder.sessions.outputpath import ensure_can_write
from envbuild.shared.safefiles import UnsafePlaceError
from tests.support.attacker import group_dir_with_strangers_link


def test_the_log_directory_is_never_made_through_a_strangers_link(tmp_path: Path) -> None:
    """`envbuild lock --cache-dir /project/store`: another member made `store` a link to the victim's files; the
    log's directories (store/logs) were made in the link's target by a plain mkdir -p."""
    victim, project = group_dir_with_strangers_link(tmp_path, "store")
    executor = BuildExecutor(project / "store/logs/lock-tiny.log", store_root=project / "store", quiet=True,
                             out=io.StringIO())
    with pytest.raises(UnsafePlaceError, match="symbolic link made by uid"):
        executor.execute_steps((), None, "base")
    assert list(victim.iterdir()) == []


def test_the_log_directories_are_made_where_there_is_no_link(tmp_path: Path) -> None:
    executor = BuildExecutor(tmp_path / "logs/build/tiny.log", store_root=tmp_path / "store", quiet=True,
                             out=io.StringIO())
    executor.execute_steps((), None, "build")
    assert (tmp_path / "logs/build/tiny.log").is_file()


def test_the_output_directories_are_never_made_through_a_strangers_link(tmp_path: Path) -> None:
    """`envbuild build spec.yaml -o images/v1/env.sif` in a group project where another member made `images` a
    link to the victim's files: the build made images/v1 in the link's target before anything slow ran."""
    victim, project = group_dir_with_strangers_link(tmp_path, "images")
    with pytest.raises(UnsafePlaceError, match="symbolic link made by uid"):
        ensure_can_write(project / "images/v1/env.sif")
    assert list(victim.iterdir()) == []
    ensure_can_write(project / "mine/v1/env.sif")
    assert (project / "mine/v1").is_dir()
