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

from envbuild.build.actions import MakeDirs
from envbuild.build.containment import make_dirs, tool_environment
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


@pytest.mark.parametrize("mask", [0o007, 0o022, 0o077])
def test_make_dirs_gives_every_new_directory_the_mode_and_leaves_existing_ones(tmp_path: Path, mask: int) -> None:
    existing = tmp_path / "root"
    existing.mkdir(mode=0o700)
    with umask(mask):
        make_dirs(str(existing / "a" / "b"), 0o755)
        make_dirs(str(tmp_path / "plain"), None)
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


def test_copied_files_without_a_mode_become_readable_by_everyone_and_links_are_left_alone(tmp_path: Path) -> None:
    import subprocess

    from envbuild.build.plan import READABLE_COPY_SCRIPT

    outside = tmp_path / "host-secret"
    outside.write_text("x")
    outside.chmod(0o600)
    src, dest = tmp_path / "src", tmp_path / "sandbox" / "opt" / "conf"
    (src / "sub").mkdir(parents=True)
    (src / "sub").chmod(0o770)
    (src / "a.txt").write_text("a")
    (src / "a.txt").chmod(0o660)
    (src / "run.sh").write_text("#!/bin/sh\n")
    (src / "run.sh").chmod(0o770)
    (src / "link").symlink_to(outside)
    dest.parent.mkdir(parents=True)
    subprocess.run(["cp", "-a", "-T", str(src), str(dest)], check=True)  # as CopyFile copies a directory
    subprocess.run(["/bin/sh", "-c", READABLE_COPY_SCRIPT, "envbuild-modes", str(src), str(dest)], check=True)
    assert (mode(dest / "a.txt"), mode(dest / "run.sh"), mode(dest / "sub")) == (0o644, 0o755, 0o755)
    assert mode(outside) == 0o600 and (dest / "link").is_symlink()
    single = tmp_path / "sandbox" / "one.txt"
    single.write_text("1")
    single.chmod(0o660)
    subprocess.run(["/bin/sh", "-c", READABLE_COPY_SCRIPT, "envbuild-modes", str(src / "a.txt"), str(single)], check=True)
    assert mode(single) == 0o644
