"""The tree manifest and the difference a layered image holds (envbuild.build.treemanifest)."""

from __future__ import annotations

import os
from pathlib import Path

from envbuild.build.treemanifest import compute_delta, read_manifest, write_manifest


def _tree(root: Path) -> None:
    (root / "venv/lib").mkdir(parents=True)
    (root / "venv/lib/shared.py").write_text("shared\n")
    (root / "venv/lib/same-size.py").write_text("aaaa\n")
    (root / "venv/lib/gone.py").write_text("gone\n")
    (root / "olddir/sub").mkdir(parents=True)
    (root / "olddir/sub/x").write_text("x")
    (root / "link").symlink_to("venv/lib/shared.py")


def test_delta_lists_new_changed_and_removed_paths(tmp_path: Path) -> None:
    parent, child = tmp_path / "parent", tmp_path / "child"
    _tree(parent)
    manifest = tmp_path / "m.json.gz"
    write_manifest(str(parent), str(manifest), compression="gzip:6", all_root=False)
    document = read_manifest(str(manifest))
    assert document and document["compression"] == "gzip:6"

    # The child shares the parent's unchanged files by hard links (as env layers and sandboxes do).
    os.system(f"cp -al {parent} {child}")
    stat = os.stat(child / "venv/lib/same-size.py")
    (child / "venv/lib/same-size.py").unlink()  # replaced, as installers do: same size and time, new content
    (child / "venv/lib/same-size.py").write_text("bbbb\n")
    os.utime(child / "venv/lib/same-size.py", ns=(stat.st_atime_ns, stat.st_mtime_ns))
    (child / "venv/lib/gone.py").unlink()
    os.system(f"rm -rf {child / 'olddir'}")
    (child / "venv/lib/new.py").write_text("new\n")
    (child / "link").unlink()
    (child / "link").symlink_to("venv/lib/new.py")
    os.utime(child / "venv/lib", ns=(1, 1))
    os.utime(child / "venv", ns=(os.stat(parent / "venv").st_atime_ns, os.stat(parent / "venv").st_mtime_ns))
    os.utime(child, ns=(os.stat(parent).st_atime_ns, os.stat(parent).st_mtime_ns))

    delta = compute_delta(str(child), document["entries"])  # type: ignore[arg-type]
    # The parent's file was the only link to its inode when the manifest was made, so it has a digest.
    assert delta.paths == ("/link", "/venv/lib", "/venv/lib/new.py", "/venv/lib/same-size.py")
    # A removed directory needs one whiteout; what was under it is hidden with it.
    assert delta.whiteouts == ("/olddir", "/venv/lib/gone.py")
    assert delta.bytes == len("new\n") + len("bbbb\n")


def test_unchanged_tree_has_an_empty_delta(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    _tree(root)
    manifest = tmp_path / "m.json.gz"
    write_manifest(str(root), str(manifest), compression="zstd", all_root=True)
    document = read_manifest(str(manifest))
    assert document is not None
    delta = compute_delta(str(root), document["entries"])  # type: ignore[arg-type]
    assert delta.paths == () and delta.whiteouts == ()
    assert read_manifest(str(tmp_path / "missing.json.gz")) is None
