"""What killed builds left, told apart from running builds by their locks (no tools needed)."""

from __future__ import annotations

from pathlib import Path

from envbuild.store.debris import KEPT, abandoned, remove_stale_partials, sweep_abandoned
from envbuild.store.entries import list_entries
from envbuild.store.locks import entry_lock


def make(store: Path, relative: str, *files: str) -> Path:
    path = store / relative
    path.mkdir(parents=True)
    for name in files:
        (path / name).write_text("x" * 1000)
    return path


def test_only_unlocked_unfinished_entries_work_dirs_and_trash_are_abandoned(tmp_path: Path) -> None:
    store = tmp_path / "store"
    make(store, "work/dead-1-aaaaaa", "file")
    make(store, "work/running-2-bbbbbb", "file")
    make(store, "work/kept-3-cccccc", KEPT)
    make(store, "envs/half-0123", "rootfs.partial")
    make(store, "envs/done-4567", "complete")
    make(store, "images/building-89ab")
    make(store, "trash/gone-1234", "file")
    with entry_lock(store, "work", "running-2-bbbbbb"), entry_lock(store, "image", "building-89ab"):
        found = abandoned(store, list_entries(store, with_sizes=False))
        assert found == {"work/dead-1-aaaaaa", "env/half-0123", "trash/gone-1234"}
        removed = sweep_abandoned(store)
    assert sorted(Path(path).name for path, _ in removed) == ["dead-1-aaaaaa", "gone-1234", "half-0123"]
    assert all(size > 0 for _, size in removed)
    left = sorted(p.relative_to(store).as_posix() for kind in ("work", "envs", "images") for p in (store / kind).iterdir())
    assert left == ["envs/done-4567", "images/building-89ab", "work/kept-3-cccccc", "work/running-2-bbbbbb"]
    assert not (store / "locks" / "work-dead-1-aaaaaa.lock").exists()  # a finished build's lock file goes too


def test_partial_outputs_of_dead_builds_go_and_a_running_builds_stays(tmp_path: Path) -> None:
    store, out = tmp_path / "store", tmp_path / "out"
    out.mkdir()
    (out / "img.sif.partial-11-aaaaaa").write_text("half")
    (out / "img.sif.partial-22-bbbbbb").write_text("half")
    with entry_lock(store, "work", "spec-22-bbbbbb"):
        removed = remove_stale_partials(out / "img.sif", store, "spec")
    assert [Path(p).name for p in removed] == ["img.sif.partial-11-aaaaaa"]
    assert sorted(p.name for p in out.iterdir()) == ["img.sif.partial-22-bbbbbb"]
