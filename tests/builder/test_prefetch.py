"""The env layer copied while a stale lock is resolved again (envbuild.builder.sessions.prefetch), and the plan that takes it.

The whole path (a stale lock, the copy taken by the env step) runs in tests/e2e/test_layered_plus_one.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

from envbuild.builder.plan.actions import CopyTree, Rename
from envbuild.builder.sessions.prefetch import ParentPrefetch
from tests.support.plan_fixtures import fixed_plan


def _prefetch(tmp_path: Path) -> ParentPrefetch:
    work = tmp_path / "work/spec-1-abc-prefetch"
    return ParentPrefetch(parent="env-parent", store_root=str(tmp_path), work_dir=str(work), tree=f"{work}/rootfs",
                          snapshot=f"{work}/parent.snapshot")


def test_the_copy_shares_the_parents_files_and_records_the_guards_snapshot(tmp_path: Path) -> None:
    source = tmp_path / "parent/rootfs"
    (source / "opt/venv").mkdir(parents=True)
    (source / "opt/venv/a.py").write_text("a\n")
    prefetch = _prefetch(tmp_path).start(str(source))
    taken = prefetch.take()
    assert taken is not None
    tree, snapshot = taken
    assert os.stat(f"{tree}/opt/venv/a.py").st_ino == os.stat(source / "opt/venv/a.py").st_ino
    assert "opt/venv/a.py" in json.dumps(json.loads(Path(snapshot).read_text()))
    prefetch.remove()
    assert not os.path.exists(prefetch.work_dir) and (source / "opt/venv/a.py").exists()


def test_a_copy_that_failed_is_not_taken(tmp_path: Path) -> None:
    prefetch = _prefetch(tmp_path).start(str(tmp_path / "no-such-layer"))
    assert prefetch.take() is None
    prefetch.remove()
    assert not os.path.exists(prefetch.work_dir)


def test_the_env_step_renames_a_copy_made_ahead_instead_of_copying() -> None:
    plain = fixed_plan("envs/local-cpu-pytorch.yaml", env_parent="local-cpu-pytorch-parent")
    ahead = fixed_plan("envs/local-cpu-pytorch.yaml", env_parent="local-cpu-pytorch-parent",
                       env_parent_copy=("/cache/envbuild/work/x-prefetch/rootfs", "/cache/envbuild/work/x-prefetch/parent.snapshot"))
    copies = [a for a in plain.steps[0].actions if isinstance(a, CopyTree)]
    assert len(copies) == 1 and copies[0].hardlink and copies[0].snapshot
    assert not any(isinstance(a, CopyTree) for a in ahead.steps[0].actions)
    renames = [a for a in ahead.steps[0].actions if isinstance(a, Rename)][:2]
    assert [(r.src, r.dest) for r in renames] == [
        ("/cache/envbuild/work/x-prefetch/rootfs", copies[0].dest),
        ("/cache/envbuild/work/x-prefetch/parent.snapshot", copies[0].snapshot),
    ]
    # Without a parent (a first build) a copy made ahead means nothing: the base is copied as always.
    first = fixed_plan("envs/local-cpu-pytorch.yaml", env_parent_copy=("/x/rootfs", "/x/snap"))
    assert any(isinstance(a, CopyTree) for a in first.steps[0].actions)


def _env_layer(tmp_path: Path, name: str) -> Path:
    entry = tmp_path / "store/envs" / name
    (entry / "rootfs/opt/venv").mkdir(parents=True)
    (entry / "rootfs/opt/venv/a.py").write_text("a\n")
    from envbuild.shared.treedigest import tree_digest

    (entry / "digest").write_text(tree_digest(str(entry / "rootfs")) + "\n")
    return entry


def test_the_layer_is_checked_against_its_record_meanwhile_in_a_shared_store(tmp_path: Path) -> None:
    """The verdict is for the layer checked only: another parent chosen later is checked by the build."""
    entry = _env_layer(tmp_path, "env-parent")
    clean = _prefetch(tmp_path).check(str(entry))
    assert clean.verdict("env-parent") == (None,) and clean.verdict("another-parent") is None
    (entry / "rootfs/opt/venv/a.py").write_text("b\n")
    tampered = _prefetch(tmp_path).check(str(entry))
    (problem,) = tampered.verdict("env-parent") or (None,)
    assert problem and problem.startswith("rootfs has sha256:")
    assert _prefetch(tmp_path).verdict("env-parent") is None, "not checked: the build checks it itself"
