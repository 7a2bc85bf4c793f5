"""Paths inside an image tree resolve as if its root were `/` (envbuild.imagetree.intree): with the kernel's openat2
(RESOLVE_IN_ROOT) and with the component walk used where the kernel lacks it, the same answers."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from envbuild.imagetree import intree

RESOLVERS = [pytest.param(False, id="openat2"), pytest.param(True, id="walk")]


@pytest.fixture(params=RESOLVERS)
def walk(request: pytest.FixtureRequest) -> bool:
    if not request.param and not intree.kernel_resolves_in_root():
        pytest.skip("this kernel has no openat2 RESOLVE_IN_ROOT (Linux >= 5.6); the walk is tested instead")
    return bool(request.param)


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    """(root of a tree, a host directory beside it that nothing may reach through the tree)."""
    root, host = tmp_path / "tree", tmp_path / "host"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "real.json").write_text('{"inside": true}')
    host.mkdir()
    (host / "secret.json").write_text('{"host": true}')
    return root, host


def test_the_kernel_resolves_in_root_from_linux_5_6_on() -> None:
    major, minor = (int(part) for part in os.uname().release.split(".")[:2])
    if (major, minor) < (5, 6):
        pytest.skip(f"Linux {os.uname().release} has no openat2: builds use the walk")
    assert intree.kernel_resolves_in_root()


def test_an_absolute_link_out_of_the_tree_starts_again_at_its_root(tree: tuple[Path, Path], walk: bool) -> None:
    root, host = tree
    (root / "record").symlink_to(host)  # /record -> /tmp/.../host: absolute, pointing at the host
    (root / "labels.json").symlink_to(host / "secret.json")
    assert intree.read_in_tree(str(root), "/labels.json", walk=walk) is None  # not the host's file
    intree.make_dirs_in_tree(str(root), "/record/sub", 0o755, walk=walk)
    intree.write_in_tree(str(root), "/record/sub/build.json", "{}", 0o644, walk=walk)
    assert sorted(p.name for p in host.iterdir()) == ["secret.json"]
    assert (root / str(host).lstrip("/") / "sub" / "build.json").read_text() == "{}"  # re-rooted inside


def test_a_relative_link_climbing_out_stops_at_the_root(tree: tuple[Path, Path], walk: bool) -> None:
    root, host = tree
    (root / "opt").symlink_to("../../../../../../../..")  # /opt -> far above the tree: clamped to /
    intree.write_in_tree(str(root), "/opt/written.txt", "x", 0o600, walk=walk)
    assert (root / "written.txt").read_text() == "x"
    assert not (host.parent.parent / "written.txt").exists()
    assert intree.read_in_tree(str(root), "/opt/etc/real.json", walk=walk) == (b'{"inside": true}', 0o644 & ~_umask())
    assert intree.read_in_tree(str(root), "/../../../etc/real.json", walk=walk) is not None


def test_a_link_loop_is_an_error(tree: tuple[Path, Path], walk: bool) -> None:
    root, _ = tree
    (root / "a").symlink_to("b")
    (root / "b").symlink_to("/a")
    with pytest.raises(OSError) as raised:
        intree.write_in_tree(str(root), "/a/file", "x", 0o644, walk=walk)
    assert raised.value.errno == errno.ELOOP


def test_a_dangling_link_is_missing_for_reads_and_gets_its_target_made_inside(tree: tuple[Path, Path], walk: bool) -> None:
    root, host = tree
    (root / "gone").symlink_to("/nowhere")
    assert intree.read_in_tree(str(root), "/gone", walk=walk) is None
    intree.make_dirs_in_tree(str(root), "/gone/sub", walk=walk)
    assert (root / "nowhere" / "sub").is_dir()
    (root / "gone-out").symlink_to(host / "new-dir")
    intree.make_dirs_in_tree(str(root), "/gone-out/sub", walk=walk)
    assert not (host / "new-dir").exists() and (root / str(host).lstrip("/") / "new-dir" / "sub").is_dir()
    (root / "file").write_text("")
    with pytest.raises(NotADirectoryError):
        intree.make_dirs_in_tree(str(root), "/file/sub", walk=walk)


def test_a_link_inside_pointing_inside_still_works(tree: tuple[Path, Path], walk: bool) -> None:
    root, _ = tree
    (root / "usr" / "lib").mkdir(parents=True)
    (root / "lib").symlink_to("usr/lib")  # as merged-/usr systems have it
    (root / "conf").symlink_to("/etc")
    intree.write_in_tree(str(root), "/lib/x.so", b"\x7fELF", 0o755, walk=walk)
    assert (root / "usr" / "lib" / "x.so").read_bytes() == b"\x7fELF"
    assert intree.read_in_tree(str(root), "/conf/real.json", walk=walk) == (b'{"inside": true}', 0o644 & ~_umask())


def test_a_write_replaces_a_link_in_the_last_component_instead_of_following_it(tree: tuple[Path, Path], walk: bool) -> None:
    root, host = tree
    (root / "etc" / "hosts").symlink_to(host / "secret.json")
    (root / "etc" / "inner").symlink_to("real.json")
    intree.write_in_tree(str(root), "/etc/hosts", "127.0.0.1 localhost\n", 0o644, walk=walk)
    intree.write_in_tree(str(root), "/etc/inner", "new", 0o640, walk=walk)
    assert (host / "secret.json").read_text() == '{"host": true}'
    assert not (root / "etc" / "hosts").is_symlink() and (root / "etc" / "hosts").read_text() == "127.0.0.1 localhost\n"
    assert (root / "etc" / "real.json").read_text() == '{"inside": true}'  # O_NOFOLLOW: the link went, not its target
    assert stat.S_IMODE((root / "etc" / "inner").stat().st_mode) == 0o640
    (root / "etc" / "secret-link").symlink_to(host / "secret.json")
    with pytest.raises(OSError) as raised:  # and opening a link itself for writing with O_NOFOLLOW refuses
        intree.open_in_tree(str(root), "/etc/secret-link", os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, walk=walk)
    assert raised.value.errno == errno.ELOOP


def test_removing_and_moving_out_act_on_the_entry_never_on_a_link_target(tree: tuple[Path, Path], walk: bool) -> None:
    root, host = tree
    (root / ".envbuild-host").symlink_to(host)
    intree.remove_in_tree(str(root), "/.envbuild-host", walk=walk)
    assert host.is_dir() and (host / "secret.json").exists() and not (root / ".envbuild-host").exists()
    (root / "opt").symlink_to(host)  # /opt/secret.json is /<host>/secret.json inside: missing, nothing removed
    intree.remove_in_tree(str(root), "/opt/secret.json", walk=walk)
    assert (host / "secret.json").exists()
    (root / "work").mkdir()
    (root / "work" / "freeze.txt").write_text("six==1.16.0\n")
    intree.rename_out_of_tree(str(root), "/work/freeze.txt", str(root.parent / "freeze.txt"), walk=walk)
    assert (root.parent / "freeze.txt").read_text() == "six==1.16.0\n"


def test_removing_a_tree_by_descriptor_removes_links_never_their_targets(tree: tuple[Path, Path]) -> None:
    """remove_tree_at: where shutil.rmtree has no dir_fd (Python 3.10), the tree's directories go this way."""
    root, host = tree
    (root / "old" / "deep").mkdir(parents=True)
    (root / "old" / "deep" / "file").write_text("x")
    (root / "old" / "to-host").symlink_to(host)
    (root / "old" / "deep" / "to-secret").symlink_to(host / "secret.json")
    parent = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        intree.remove_tree_at(parent, "old")
        (root / "link").symlink_to(host)
        with pytest.raises(OSError):  # a link named as the tree is refused (ENOTDIR or ELOOP), not followed
            intree.remove_tree_at(parent, "link")
    finally:
        os.close(parent)
    assert not (root / "old").exists() and (host / "secret.json").exists() and (root / "link").is_symlink()


def test_directories_get_exactly_the_mode_asked_and_existing_ones_keep_theirs(tree: tuple[Path, Path], walk: bool) -> None:
    root, _ = tree
    (root / "etc").chmod(0o700)
    intree.make_dirs_in_tree(str(root), "/etc/a/b", 0o755, walk=walk)
    assert [stat.S_IMODE((root / p).stat().st_mode) for p in ("etc", "etc/a", "etc/a/b")] == [0o700, 0o755, 0o755]


def test_a_directory_copy_keeps_modes_and_links_and_stays_inside(tree: tuple[Path, Path], walk: bool, tmp_path: Path) -> None:
    root, host = tree
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub").chmod(0o750)
    (src / "a.txt").write_text("a")
    (src / "a.txt").chmod(0o640)
    (src / "link").symlink_to("/etc/passwd")
    (root / "opt").symlink_to(host)  # the destination's parent is a link out of the tree
    intree.copy_into_tree(str(src), str(root), "/opt/conf", None, walk=walk)
    copied = root / str(host).lstrip("/") / "conf"
    assert not (host / "conf").exists()
    assert stat.S_IMODE((copied / "a.txt").stat().st_mode) == 0o640
    assert stat.S_IMODE((copied / "sub").stat().st_mode) == 0o750
    assert os.readlink(copied / "link") == "/etc/passwd"
    intree.copy_into_tree(str(src / "a.txt"), str(root), "/single.txt", 0o600, walk=walk)
    assert stat.S_IMODE((root / "single.txt").stat().st_mode) == 0o600
    assert (root / "single.txt").stat().st_mtime_ns == (src / "a.txt").stat().st_mtime_ns == (copied / "a.txt").stat().st_mtime_ns
    big = src / "big.bin"  # more than one chunk of the fallback, through copy_file_range
    big.write_bytes(os.urandom(3 << 20))
    intree.copy_into_tree(str(big), str(root), "/big.bin", None, walk=walk)
    assert (root / "big.bin").read_bytes() == big.read_bytes()


def test_listing_a_directory_finds_it_inside_the_tree_and_leaves_links_as_links(tree: tuple[Path, Path], walk: bool) -> None:
    root, host = tree
    (host / "bin").mkdir()
    (host / "bin" / "host-tool").write_text("")
    (root / "venv" / "bin").mkdir(parents=True)
    (root / "venv" / "bin" / "python").symlink_to("/usr/bin/python3")
    (root / "venv" / "bin" / "ok").write_text("")
    (root / "opt").symlink_to(host)  # /opt/bin is <root>/<host>/bin inside: missing
    found = dict(intree.list_in_tree(str(root), "/venv/bin", walk=walk))
    assert sorted(found) == ["ok", "python"] and stat.S_ISLNK(found["python"].st_mode)
    assert intree.list_in_tree(str(root), "/opt/bin", walk=walk) == []


def test_a_link_the_host_would_follow_out_of_the_tree_is_named(tree: tuple[Path, Path]) -> None:
    """For tools that take host paths into a tree (apptainer build): which link would lead them out."""
    root, host = tree
    (root / ".singularity.d").mkdir()
    assert intree.link_leading_out(str(root), "/.singularity.d/labels.json") is None
    (root / ".singularity.d" / "labels.json").symlink_to(host / "secret.json")
    assert intree.link_leading_out(str(root), "/.singularity.d/labels.json") == ("/.singularity.d/labels.json",
                                                                                  str(host / "secret.json"))
    (root / "env").symlink_to("etc")  # inside: fine
    assert intree.link_leading_out(str(root), "/env/real.json") is None
    (root / "up").symlink_to("../host")
    assert intree.link_leading_out(str(root), "/up/x") == ("/up", "../host")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
