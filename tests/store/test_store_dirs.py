"""The directories a build's steps make below a group store (envbuild.store.places.make_store_dirs): by descriptor
from the store's own directory down, through the user's own link there (a download cache kept elsewhere), never
through another member's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from envbuild.shared.safefiles import UnsafePlaceError
from envbuild.store.places import make_store_dirs


def group_store(tmp_path: Path) -> Path:
    store = tmp_path / "store"
    store.mkdir()
    store.chmod(0o2770)  # as a project's group shares it: every member may create and remove names in it
    return store


def test_the_users_own_link_to_a_download_cache_is_made_in(tmp_path: Path) -> None:
    """`uv -> /scratch/me/uv`, the user's own link: what a step makes in the cache goes to the link's target,
    in a store others may write too (only listing and removal refuse it there)."""
    scratch = tmp_path / "scratch-uv"
    scratch.mkdir()
    store = group_store(tmp_path)
    (store / "uv").symlink_to(scratch)
    make_store_dirs(store, str(store / "uv/cache/wheels"), mode=0o750)
    assert (scratch / "cache/wheels").is_dir()
    assert (scratch / "cache").stat().st_mode & 0o7777 == 0o750


def test_a_members_link_at_a_store_directory_is_refused(tmp_path: Path) -> None:
    from tests.support.trust_accounts import stranger

    if os.geteuid() != 0:
        pytest.skip("needs root to plant another user's link")
    victim = tmp_path / "data"
    victim.mkdir()
    store = group_store(tmp_path)
    (store / "uv").symlink_to(victim)
    os.lchown(store / "uv", stranger().pw_uid, stranger().pw_gid)
    with pytest.raises(UnsafePlaceError, match="symbolic link") as caught:
        make_store_dirs(store, str(store / "uv/cache"))
    assert "fix:" in caught.value.render()
    assert list(victim.iterdir()) == []


def test_a_path_outside_the_store_is_not_made_here(tmp_path: Path) -> None:
    store = group_store(tmp_path)
    with pytest.raises(ValueError, match="not below the store"):
        make_store_dirs(store, str(tmp_path / "elsewhere"))
    with pytest.raises(ValueError, match="not below the store"):
        make_store_dirs(store, str(store / ".." / "elsewhere"))
