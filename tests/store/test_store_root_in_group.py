"""A store not made yet below a group directory (`--cache-dir /project/stores/team`): the build makes its
parents and its root, never through a link another member planted on the way."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from envbuild.host.runtime import ensure_store_root
from envbuild.shared.safefiles import UnsafePlaceError
from envbuild.store.places import OpenStore
from tests.support.attacker import group_dir_with_strangers_link


def planted(tmp_path: Path) -> tuple[Path, Path]:
    """(the victim's directory, the group project) with `stores` in it a stranger's link to the victim's."""
    return group_dir_with_strangers_link(tmp_path, "stores", victims="data")


def test_a_new_store_is_never_made_through_a_strangers_link(tmp_path: Path) -> None:
    victim, project = planted(tmp_path)
    with pytest.raises(UnsafePlaceError, match="symbolic link made by uid"):
        ensure_store_root(str(project / "stores/team"))
    with pytest.raises(UnsafePlaceError, match="symbolic link made by uid"):
        OpenStore(project / "stores/team", create=True)
    assert list(victim.iterdir()) == []


def test_the_users_own_link_on_the_way_is_followed(tmp_path: Path) -> None:
    victim, project = planted(tmp_path)
    os.lchown(project / "stores", os.geteuid(), os.getegid())  # the user's own: /scratch -> /pfs/... works
    ensure_store_root(str(project / "stores/team"))
    with OpenStore(project / "stores/team", create=True) as store:
        assert store.dir("locks", create=True) is not None
    assert (victim / "team/locks").is_dir()


def test_a_new_store_and_its_parents_are_made(tmp_path: Path) -> None:
    ensure_store_root(str(tmp_path / "a/b/store"))
    assert (tmp_path / "a/b/store").is_dir()
    with OpenStore(tmp_path / "c/store", create=True):
        pass
    assert (tmp_path / "c/store").is_dir()
