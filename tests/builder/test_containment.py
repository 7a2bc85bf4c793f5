"""What of the host reaches a build: the tools' environment (no APPTAINERENV_/SINGULARITYENV_ variables, which
the runtime would carry past --cleanenv into the container) and the modes of directories made inside an
image's root (0755 whatever the builder's umask), and the store's root (closed to others when envbuild makes it)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from envbuild.builder.execute.fsactions import make_host_dirs
from envbuild.builder.execute.tools import tool_environment
from envbuild.builder.plan.actions import MakeDirs
from envbuild.host.runtime import ensure_store_root


@contextmanager
def umask(mask: int) -> Iterator[None]:
    previous = os.umask(mask)
    try:
        yield
    finally:
        os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_tool_environment_drops_what_the_runtime_would_carry_into_the_container() -> None:
    host = {"PATH": "/usr/bin", "HF_TOKEN": "t", "APPTAINERENV_HF_TOKEN": "t", "SINGULARITYENV_WANDB_API_KEY": "k",
            "APPTAINER_CACHEDIR": "/c"}
    env = tool_environment(host, (("APPTAINERENV_https_proxy", "http://p:3128"),))
    assert env == {"PATH": "/usr/bin", "HF_TOKEN": "t", "APPTAINER_CACHEDIR": "/c", "APPTAINERENV_https_proxy": "http://p:3128"}


@pytest.mark.parametrize("in_store", [False, True], ids=["users-path", "store-path"])
@pytest.mark.parametrize("mask", [0o007, 0o022, 0o077])
def test_make_dirs_gives_every_new_directory_the_mode_and_leaves_existing_ones(tmp_path: Path, mask: int,
                                                                                in_store: bool) -> None:
    existing = tmp_path / "root"
    existing.mkdir(mode=0o700)
    store_root = tmp_path if in_store else None  # below a store: made from the store's own directory down
    with umask(mask):
        make_host_dirs(str(existing / "a" / "b"), 0o755, store_root=store_root)
        make_host_dirs(str(tmp_path / "plain"), None, store_root=store_root)
    assert mode(existing) == 0o700
    assert mode(existing / "a") == mode(existing / "a" / "b") == 0o755
    assert mode(tmp_path / "plain") == 0o777 & ~mask


def test_make_dirs_describes_its_mode() -> None:
    assert MakeDirs(("/s/.envbuild",), 0o755).describe() == "mkdir -p -m 0755 /s/.envbuild"
    assert MakeDirs(("/s/x",)).describe() == "mkdir -p /s/x"


@pytest.mark.parametrize(("mask", "expected"), [(0o007, 0o770), (0o022, 0o750), (0o002, 0o770)])
def test_a_new_store_root_is_closed_to_others(tmp_path: Path, mask: int, expected: int) -> None:
    root = tmp_path / "project" / "envbuild-store"
    with umask(mask):
        ensure_store_root(str(root))
    assert mode(root) == expected


def test_an_existing_store_root_keeps_its_mode(tmp_path: Path) -> None:
    root = tmp_path / "store"
    root.mkdir()
    root.chmod(0o2775)
    ensure_store_root(str(root))
    assert stat.S_IMODE(root.stat().st_mode) == 0o2775


def test_copied_files_without_a_mode_keep_the_sources_bits_and_links_are_left_alone(tmp_path: Path) -> None:
    """files[] without a mode: never widened (a 0640 file used to become 0644 through chmod a+rX)."""
    from envbuild.builder.execute.fsactions import copy_file
    from envbuild.builder.plan.actions import CopyFile

    outside = tmp_path / "host-secret"
    outside.write_text("x")
    outside.chmod(0o600)
    src, sandbox = tmp_path / "src", tmp_path / "sandbox"
    (src / "sub").mkdir(parents=True)
    (src / "sub").chmod(0o770)
    (src / "a.txt").write_text("a")
    (src / "a.txt").chmod(0o640)
    (src / "run.sh").write_text("#!/bin/sh\n")
    (src / "run.sh").chmod(0o750)
    (src / "link").symlink_to(outside)
    (sandbox / "opt").mkdir(parents=True)
    copy_file(None, None, CopyFile(str(src), f"{sandbox}/opt/conf", dest_root=str(sandbox)))  # type: ignore[arg-type]
    dest = sandbox / "opt" / "conf"
    assert (mode(dest / "a.txt"), mode(dest / "run.sh"), mode(dest / "sub")) == (0o640, 0o750, 0o770)
    assert mode(outside) == 0o600 and (dest / "link").is_symlink()
    copy_file(None, None, CopyFile(str(src / "a.txt"), f"{sandbox}/one.txt", 0o600, dest_root=str(sandbox)))  # type: ignore[arg-type]
    assert mode(sandbox / "one.txt") == 0o600
