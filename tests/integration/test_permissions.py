"""Modes of what `envbuild build` makes, under the umasks of a project group (0007) and of a default account
(0022): one tiny image and one venv overlay on it per umask, in a store envbuild creates.

- the image, the overlay, the wrappers and the log: readable by the group, never writable by others, and
  no more open to others than the umask allows;
- inside the image and the overlay: every file readable and no file writable by every user of the image,
  whatever the builder's umask (0007 used to leave the venv 0770 root:root: `python` not found for anyone
  but root);
- the store: closed to others when envbuild creates it; its entries, records and lock files readable by the
  group (and writable by it where the umask says so), none writable by others."""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from envbuild.store.layout import kind_dir
from tests.conftest import REPO

pytestmark = [pytest.mark.apptainer]
ENVBUILD = str(REPO / "bin/envbuild")

IMAGE_SPEC = """\
name: tiny
system: local
base: debootstrap:bookworm
python:
  packages: [six]
files:
  - {src: vocab.txt, dest: /opt/data/nested/vocab.txt, mode: "0644"}  # without it the umask's 0660 would stay (never widened)
"""
OVERLAY_SPEC = """\
name: extras
system: local
base: localimage:out/tiny.sif
overlay: {}
python:
  packages: [tabulate]
"""


@dataclass
class Built:
    mask: int
    project: Path
    store: Path

    @property
    def out(self) -> Path:
        return self.project / "out"


@pytest.fixture(scope="module", params=[0o007, 0o022], ids=["umask-0007", "umask-0022"])
def built(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, debootstrap_base: Path) -> Iterator[Built]:
    from envbuild.host.buildhost import gather_host_facts

    mask = request.param
    work = tmp_path_factory.mktemp(f"umask{mask:04o}")
    store, project = work / "store", work / "project"
    previous = os.umask(mask)
    try:
        gather_host_facts(cache_dir=store)  # what every build does first: the store's root is made here
        kind_dir(store, "base").mkdir()
        subprocess.run(["cp", "-al", str(debootstrap_base.parent), str(kind_dir(store, "base"))], check=True)
        project.mkdir()
        (project / "vocab.txt").write_text("a\nb\n")
        (project / "tiny.yaml").write_text(IMAGE_SPEC)
        (project / "extras.yaml").write_text(OVERLAY_SPEC)
    finally:
        os.umask(previous)
    env = {**os.environ, "ENVBUILD_CACHE_DIR": str(store)}
    for spec, output in (("tiny.yaml", "out/tiny.sif"), ("extras.yaml", "out/extras.sqsh")):
        result = subprocess.run([ENVBUILD, "build", spec, "-o", output, "--compression", "zstd"], cwd=project, env=env,
                                capture_output=True, text=True, timeout=900, umask=mask)
        assert result.returncode == 0, f"{spec} under umask {mask:04o}: {result.stdout}{result.stderr[-6000:]}"
    yield Built(mask, project, store)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def assert_shared_with_the_group(path: Path, mask: int, *, follows_umask: bool = True) -> None:
    """Readable (a directory: usable) by the group, not writable by others; with `follows_umask`, no more
    open to others than the umask lets files be."""
    bits = mode(path)
    wanted = stat.S_IRGRP | (stat.S_IXGRP if path.is_dir() else 0)
    assert bits & wanted == wanted, f"{path}: {bits:04o} is not readable by the group"
    assert not bits & stat.S_IWOTH, f"{path}: {bits:04o} is writable by others"
    assert not (follows_umask and bits & 0o007 & mask), f"{path}: {bits:04o} is more open to others than umask {mask:04o}"


def squashfs_modes(path: Path, offset: int = 0) -> dict[str, str]:
    """path inside -> `ls -l` mode text, for every entry of a squashfs file system (unsquashfs -lln)."""
    listing = subprocess.run(["unsquashfs", "-lln", "-o", str(offset), str(path)], capture_output=True, text=True, check=True)
    modes = {}
    for line in listing.stdout.splitlines():
        fields = line.split(None, 5)
        if len(fields) == 6 and fields[5].startswith("squashfs-root"):
            name = fields[5].removeprefix("squashfs-root").split(" -> ")[0]
            modes[name or "/"] = fields[0]
    return modes


def unusable_for_others(modes: dict[str, str], under: tuple[str, ...]) -> list[str]:
    """Entries (at or below `under`) another user cannot read (files) or enter (directories), or can write."""
    bad = []
    for path, text in modes.items():
        if not any(path == top or path.startswith(top.rstrip("/") + "/") for top in under) or text[0] == "l":
            continue
        others = text[7:10]
        if others[0] != "r" or (text[0] == "d" and others[2] not in "xt") or (others[1] == "w" and text[0] != "d"):
            bad.append(f"{text} {path}")
    return bad


def test_image_overlay_wrappers_and_log_are_shared_with_the_group_only_as_the_umask_says(built: Built) -> None:
    out = built.out
    for path in (out / "tiny.sif", out / "extras.sqsh", out / "tiny.sif.build.log", out / "bin"):
        assert_shared_with_the_group(path, built.mask)
    for wrapper in ("python", "tabulate"):
        bits = mode(out / "bin" / wrapper)
        assert bits & 0o050 == 0o050 and not bits & stat.S_IWOTH, f"{wrapper}: {bits:04o}"


def test_everything_envbuild_writes_into_the_image_is_usable_by_every_user(built: Built) -> None:
    from envbuild.sif.reader import read_sif_layout

    image = built.out / "tiny.sif"
    modes = squashfs_modes(image, read_sif_layout(image).primary_partition().offset)
    assert "/opt/envbuild/venv/bin/python" in modes and "/opt/data/nested/vocab.txt" in modes
    assert unusable_for_others(modes, ("/opt/envbuild", "/.envbuild", "/opt/data", "/.singularity.d/env")) == []
    writable = [f"{t} {p}" for p, t in modes.items() if t[8] == "w" and t[0] not in "l" and not t[0] == "d"]
    assert writable == [], "files in the image writable by others"


def test_everything_in_the_overlay_is_usable_by_every_user(built: Built) -> None:
    modes = squashfs_modes(built.out / "extras.sqsh")
    assert "/bin/tabulate" in modes and "/.envbuild/overlay.json" in modes
    assert unusable_for_others(modes, ("/",)) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="running the image as another user needs root (apptainer --security uid:)")
def test_another_user_can_run_the_image_and_its_overlay(built: Built) -> None:
    # The overlay bound as envrun and the wrappers bind it.
    argv = ["apptainer", "exec", "--security", "uid:65534,gid:65534", "--bind",
            f"{built.out / 'extras.sqsh'}:/user-software:image-src=/,ro", str(built.out / "tiny.sif"), "/user-software/bin/python", "-c",
            "import os, six, tabulate; print(os.getuid(), open('/opt/data/nested/vocab.txt').read().split())"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stdout.split() == ["65534", "['a',", "'b']"], result.stdout + result.stderr


def test_the_store_is_shared_with_the_group_and_closed_to_others(built: Built) -> None:
    store, mask = built.store, built.mask
    assert mode(store) & 0o007 == 0, f"store root {mode(store):04o}: open to others"
    assert_shared_with_the_group(store, mask)
    # What the builds made (the base was hard-linked in from the shared test cache); the records are 0644
    # whatever the umask: the closed root keeps others out.
    made = [store / "locks", *store.glob("locks/*.lock"), *store.glob("envs/*"), *store.glob("images/*"),
            *store.glob("overlays/*"), *store.glob("[eio]*/*/meta.json"), *store.glob("[eio]*/*/complete"),
            *store.glob("images/*/image.sif"), *store.glob("overlays/*/overlay.sqsh")]
    assert len([p for p in made if p.name.endswith(".lock")]) >= 3 and list(store.glob("images/*/image.sif"))
    for path in made:
        assert_shared_with_the_group(path, mask, follows_umask=False)
    for lock in store.glob("locks/*.lock"):  # 0o666 less the umask: every member can take the lock
        assert mode(lock) & 0o060 == 0o060 & ~mask, f"{lock}: {mode(lock):04o}"
