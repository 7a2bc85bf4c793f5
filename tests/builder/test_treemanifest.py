"""The tree manifest and the difference a layered image holds (envbuild.sif.manifest)."""

from __future__ import annotations

import argparse
import gzip
import json
import os
from pathlib import Path

import pytest

from envbuild.sif.layeredwriter import Fallback, layered_squash
from envbuild.sif.manifest import MANIFEST_VERSION, compute_delta, read_manifest, write_manifest


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


def _upper(root: Path) -> None:
    """A user layer as envbuild.builder.plan.upperplan writes it: new files, a replaced one, a file over a directory."""
    (root / "venv/lib").mkdir(parents=True, mode=0o700)  # made only to hold files: its mode must not count
    (root / "venv/lib/shared.py").write_text("the user layer's\n")
    (root / ".envbuild").mkdir()
    (root / ".envbuild/build.json").write_text("{}\n")
    (root / "olddir").write_text("a file where the env layer has a directory\n")


def test_a_tree_view_shows_the_upper_files_over_the_lower_tree(tmp_path: Path) -> None:
    from envbuild.sif.manifest import TreeView

    lower, upper = tmp_path / "lower", tmp_path / "upper"
    _tree(lower)
    _upper(upper)
    view = TreeView(str(lower), str(upper))
    assert view.host("/venv/lib/shared.py") == str(upper / "venv/lib/shared.py")
    assert view.host("/venv/lib/gone.py") == str(lower / "venv/lib/gone.py")
    assert view.host("/venv/lib") == str(lower / "venv/lib")  # a directory of both: the lower one's attributes
    assert view.paths["/venv/lib"].st_mode & 0o777 == os.stat(lower / "venv/lib").st_mode & 0o777
    assert view.host("/.envbuild/build.json") == str(upper / ".envbuild/build.json")
    assert "/olddir/sub/x" not in view.paths and view.host("/olddir") == str(upper / "olddir")


def test_the_difference_of_a_tree_view_is_that_of_the_merged_sandbox(tmp_path: Path) -> None:
    """The layered squash compares the view with the parent's manifest; a fallback full squash merges the two
    into a sandbox (merge_upper). Both see the same files changed and removed."""
    from envbuild.sif.layeredwriter import merge_upper
    from envbuild.sif.manifest import TreeView

    lower, upper, merged = tmp_path / "lower", tmp_path / "upper", tmp_path / "merged"
    _tree(lower)
    manifest = tmp_path / "m.json.gz"
    write_manifest(str(lower), str(manifest), compression="zstd", all_root=False)
    document = read_manifest(str(manifest))
    assert document is not None
    _upper(upper)
    shared_before = (lower / "venv/lib/shared.py").read_text()
    merge_upper(str(lower), str(upper), str(merged))
    assert (lower / "venv/lib/shared.py").read_text() == shared_before  # replaced in the sandbox, not written through
    assert (merged / "venv/lib/shared.py").read_text() == "the user layer's\n"
    assert os.stat(merged / "venv/lib/gone.py").st_ino == os.stat(lower / "venv/lib/gone.py").st_ino

    over_view = compute_delta(TreeView(str(lower), str(upper)), document["entries"])  # type: ignore[arg-type]
    over_merged = compute_delta(str(merged), document["entries"])  # type: ignore[arg-type]
    files = {"/.envbuild/build.json", "/olddir", "/venv/lib/shared.py"}
    assert files <= set(over_view.paths) and files <= set(over_merged.paths)
    assert {p for p in over_view.paths if not os.path.isdir(lower / p.lstrip("/"))} == \
        {p for p in over_merged.paths if not os.path.isdir(lower / p.lstrip("/"))}
    assert over_view.whiteouts == over_merged.whiteouts == ()  # /olddir's content went with the directory
    assert over_view.bytes == over_merged.bytes


def test_a_manifest_without_entries_makes_the_layered_writer_fall_back(tmp_path: Path) -> None:
    manifest = tmp_path / "m.json.gz"
    manifest.write_bytes(gzip.compress(json.dumps({"version": MANIFEST_VERSION, "compression": "gzip:6",
                                                   "all_root": False}).encode()))
    (tmp_path / "sandbox").mkdir()
    (tmp_path / "upper").mkdir()
    args = argparse.Namespace(manifest=str(manifest), compression="gzip:6", all_root=False,
                              sandbox=str(tmp_path / "sandbox"), upper=str(tmp_path / "upper"))
    with pytest.raises(Fallback, match="lists no entries"):
        layered_squash(args)
