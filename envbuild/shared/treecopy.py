"""The command that copies a directory tree the build makes from a store entry (a base's root file system, a
parent env layer, a layered image's lower tree), in one home: pure, so the build plan shows it. A hard-linked
copy (`cp -al`) is instant but only for a copy whose files are never rewritten in place; whether this user may
link a tree's files is decided where files are touched (envbuild.shared.safefiles.linked_copy_argv), and
tests/builder/test_copy_tree_owner.py fails on a linked copy written anywhere else."""

from __future__ import annotations


def copy_tree_argv(src: str, dest: str, *, linked: bool) -> tuple[str, ...]:
    """The copy of `src` to `dest` preserving owners, modes, links and xattrs: with `linked`, its files are hard
    links to the source's; else a full copy, by reflink where the file system has them."""
    return ("cp", "-al", src, dest) if linked else ("cp", "-a", "--reflink=auto", src, dest)
