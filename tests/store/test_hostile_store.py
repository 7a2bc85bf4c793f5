"""A group build store (setgid 2770, umask 007) with a member who plants links (issue 40): the victim's sweep of
abandoned entries (what every `envbuild build`, even a no-op, runs first), `cache prune` and `cache verify` never
delete, truncate or create anything outside the store through them, and say which link to remove.

The victim is the unprivileged account, the attacker the stranger; both are in the project group
(tests/support/attacker.py). Planting needs root, as CI runs the tests; a few checks of the rules themselves
run in this process and need nothing.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from envbuild.shared.safefiles import UnsafePlaceError
from envbuild.store.entries import list_entries, touch_used
from envbuild.store.layout import kind_dir
from envbuild.store.prune import remove_entry
from tests.support.attacker import (
    ENVBUILD,
    PYTHON,
    Scene,
    attacker,
    changes,
    give,
    give_tree,
    plant_link,
    scene_fixture,
    victim,
)

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="planting another user's link needs root (CI runs as root)")

SWEEP = """
import sys
from envbuild.store.debris import sweep_abandoned
from envbuild.shared.errors import EnvbuildError
try:
    removed = sweep_abandoned(sys.argv[1])
except EnvbuildError as exc:
    print(exc.render(), file=sys.stderr)
    sys.exit(1)
print("removed", *sorted(path for path, _ in removed))
"""


@pytest.fixture
def scene() -> Iterator[Scene]:
    yield from scene_fixture()


def group_store(scene: Scene) -> Path:
    """A store in the group directory with what a killed build left: an abandoned work directory."""

    store = scene.mkdir_shared("store")
    scene.write_shared("store/work/dead-1-aaaaaa/sandbox/etc/hostname", "sandbox\n")
    scene.write_shared("store/trash/image-old-3f2a9c/image.sif", "old image bytes\n")
    scene.mkdir_shared("store/images")
    scene.mkdir_shared("store/envs")
    scene.mkdir_shared("store/bases")
    scene.mkdir_shared("store/locks")
    give_tree(store, victim(), scene.gid)
    return store


def sweep_as_victim(scene: Scene, store: Path) -> tuple[int, str, str]:

    ran = scene.run([PYTHON, "-c", SWEEP, str(store)], env={"PYTHONPATH": str(Path(__file__).parents[2])})
    return ran.returncode, ran.stdout, ran.stderr


# --- a store directory planted as a link ---------------------------------------------------------------------

@needs_root
@pytest.mark.parametrize("place", ["trash", "work", "bases", "envs", "images", "locks"])
def test_a_store_directory_planted_as_a_link_deletes_nothing_of_the_victims(scene: Scene, place: str) -> None:
    """Before: `trash`, `work` or a kind directory as a link to ~victim/canary had the sweep list the victim's
    directories as debris and delete them; `locks` as a link had lock files made in the victim's directory."""

    store = group_store(scene)
    before = scene.snapshot()
    plant_link(store / place, scene.canary, scene.gid)
    code, out, err = sweep_as_victim(scene, store)
    assert changes(before, scene.snapshot()) == []
    assert code == 1, out + err
    assert f"{store / place} is a symbolic link" in err and "made by user envbuild-stranger" in err
    assert f"fix: check who made it (ls -l {store / place}); remove the link (rm {store / place})" in err


@needs_root
def test_a_store_root_planted_as_a_link_in_the_group_directory_is_refused(scene: Scene) -> None:
    """Before: `project/store` replaced by a link to ~victim/canary/data had the build's locks, bases and
    trash made among the victim's files, and their directories listed as the store's."""
    store = group_store(scene)
    before = scene.snapshot()
    plant_link(store, scene.canary / "data", scene.gid)
    code, out, err = sweep_as_victim(scene, store)
    assert changes(before, scene.snapshot()) == []
    assert code == 1, out + err
    assert f"the store {store} is a symbolic link made by user envbuild-stranger" in err and "--cache-dir" in err


@needs_root
def test_cache_prune_refuses_a_trash_planted_as_a_link(scene: Scene) -> None:

    store = group_store(scene)
    before = scene.snapshot()
    plant_link(store / "trash", scene.canary, scene.gid)
    ran = scene.run([ENVBUILD, "cache", "prune", "--cache-dir", str(store)])
    assert changes(before, scene.snapshot()) == []
    assert ran.returncode != 0 and f"{store / 'trash'} is a symbolic link" in ran.stderr, ran.stdout + ran.stderr


# --- links planted inside what is removed --------------------------------------------------------------------

@needs_root
def test_links_inside_abandoned_entries_are_removed_never_followed(scene: Scene) -> None:
    """The attacker, a member, made `work` and the dead build's directory (a member's: accepted) and put links
    in it and in trash; the sweep removes the links themselves and the debris, and nothing of the victim's."""

    store = group_store(scene)
    give_tree(store / "work", attacker(), scene.gid)
    sandbox = store / "work" / "dead-1-aaaaaa" / "sandbox"
    for name, target in (("data", scene.canary / "data"), ("thesis", scene.canary_file),
                         ("home", scene.canary)):
        (sandbox / name).symlink_to(target)
        os.lchown(sandbox / name, attacker().pw_uid, scene.gid)
    (store / "trash" / "image-old-3f2a9c" / "docs").symlink_to(scene.canary / "Documents")
    before = scene.snapshot()
    code, out, err = sweep_as_victim(scene, store)
    assert code == 0, out + err
    assert changes(before, scene.snapshot()) == []
    assert not (store / "work" / "dead-1-aaaaaa").exists() and list((store / "trash").iterdir()) == []
    assert f"{store}/work/dead-1-aaaaaa" in out and f"{store}/trash/image-old-3f2a9c" in out


@needs_root
def test_a_directory_of_someone_outside_the_group_is_refused(scene: Scene) -> None:
    """`trash` owned by a user who is not a member (its group is not the store's): refused before anything in it
    is removed; the same directory with the store's group is a member's and is swept."""

    store = group_store(scene)
    give(store / "trash", attacker(), gid=attacker().pw_gid, mode=0o2777)
    code, out, err = sweep_as_victim(scene, store)
    assert code == 1, out + err
    assert f"{store / 'trash'} belongs to user envbuild-stranger" in err and "nor a member of its group" in err
    assert (store / "trash" / "image-old-3f2a9c" / "image.sif").exists()
    give(store / "trash", attacker(), gid=scene.gid, mode=0o2770)
    code, out, err = sweep_as_victim(scene, store)
    assert code == 0, out + err
    assert list((store / "trash").iterdir()) == []


@needs_root
def test_a_lock_file_planted_as_a_link_is_never_written_through(scene: Scene) -> None:
    """Before: the sweep took the dead build's lock through the link and wrote its pid over ~/.bashrc."""

    store = group_store(scene)
    before = scene.snapshot()
    plant_link(store / "locks" / "work-dead-1-aaaaaa.lock", scene.canary / ".bashrc", scene.gid)
    code, out, err = sweep_as_victim(scene, store)
    assert changes(before, scene.snapshot()) == []
    assert code == 1 and "work-dead-1-aaaaaa.lock is a symbolic link" in err, out + err


# --- cache verify ----------------------------------------------------------------------------------------------

@needs_root
def test_cache_verify_fails_on_an_unrecorded_image_a_member_put_in_a_group_store(scene: Scene) -> None:
    """Before: an image.sif without a content record, owned by another member, was "unrecorded" and verify
    exited 0: the store looked clean while anything could be in it."""

    store = group_store(scene)
    for name, text in (("image.sif", "the attacker's image\n"), ("meta.json", "{}\n"), ("complete", "")):
        scene.write_shared(f"store/images/tiny-0123456789abcdef/{name}", text, owner=attacker())
    ran = scene.run([ENVBUILD, "cache", "verify", "--cache-dir", str(store)])
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert "UNVERIFIABLE  image/tiny-0123456789abcdef  no content record for image.sif" in ran.stdout
    assert "it cannot be verified" in ran.stderr and "fix: remove it" in ran.stderr


# --- the rules, in this process ----------------------------------------------------------------------------------

def test_the_users_own_kind_directory_link_in_a_private_store_is_still_followed(tmp_path: Path) -> None:
    """A kind directory kept on another file system through the user's own link, in a store only they may
    write: listed and removed as before (no atomic rename across file systems: the entry is deleted in place)."""
    elsewhere = Path(tempfile.mkdtemp(prefix="envbuild-images-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    try:
        root = tmp_path / "store"
        root.mkdir(mode=0o700)
        (root / "images").symlink_to(elsewhere)
        entry = elsewhere / "tiny-0123"
        entry.mkdir()
        (entry / "image.sif").write_text("sif")
        (entry / "complete").write_text("")
        listed = list_entries(root)
        assert [e.qualified_name for e in listed] == ["image/tiny-0123"]
        assert listed[0].path == kind_dir(root, "image") / "tiny-0123"
        remove_entry(root, listed[0])
        assert not entry.exists() and elsewhere.is_dir() and (root / "images").is_symlink()
    finally:
        shutil.rmtree(elsewhere, ignore_errors=True)


def test_the_same_link_in_a_store_others_may_write_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "tiny-0123").mkdir(parents=True)
    root = tmp_path / "store"
    root.mkdir()
    root.chmod(0o777)
    (root / "images").symlink_to(elsewhere)
    with pytest.raises(UnsafePlaceError) as refused:
        list_entries(root)
    assert f"{root / 'images'} is a symbolic link (to {elsewhere}" in refused.value.message
    assert refused.value.hint and f"rm {root / 'images'}" in refused.value.hint
    assert (elsewhere / "tiny-0123").is_dir()


def test_touching_an_entry_never_follows_a_link_at_its_marker(tmp_path: Path) -> None:
    """Before: last-used planted as a link had the victim's file touched (or created where it was missing)."""
    entry = kind_dir(tmp_path, "image") / "tiny-0123"
    entry.mkdir(parents=True)
    victims_file = tmp_path / "thesis.tex"
    victims_file.write_text("thesis")
    os.utime(victims_file, (1_000_000, 1_000_000))
    (entry / "last-used").symlink_to(victims_file)
    (entry / "complete").write_text("")
    touch_used(entry)
    assert victims_file.stat().st_mtime == 1_000_000
    (entry / "last-used").unlink()
    (entry / "last-used").symlink_to(tmp_path / "made-through-the-link")
    touch_used(entry)
    assert not (tmp_path / "made-through-the-link").exists()
    (entry / "last-used").unlink()
    touch_used(entry)
    assert (entry / "last-used").is_file() and time.time() - (entry / "last-used").stat().st_mtime < 60


def test_the_users_own_link_as_the_store_is_followed(tmp_path: Path) -> None:
    """~/.cache/envbuild as the user's link to a scratch file system: their own, so followed wherever it is."""
    scratch = tmp_path / "scratch"
    (scratch / "work" / "dead-1-aaaaaa").mkdir(parents=True)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    (shared / "store").symlink_to(scratch)
    assert [e.qualified_name for e in list_entries(shared / "store")] == ["work/dead-1-aaaaaa"]
