"""envbuild.shared.safefiles: a file is replaced whole, with the mode asked for, and nothing is left behind."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from envbuild.shared.errors import EnvbuildError
from envbuild.shared.safefiles import atomic_write
from tests.conftest import REPO


def test_atomic_write_replaces_the_file_and_leaves_no_partial(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    target.write_text("old", encoding="utf-8")
    link = tmp_path / "link.txt"
    os.link(target, link)
    atomic_write(target, "new\n", mode=0o640)
    assert target.read_text(encoding="utf-8") == "new\n"
    assert target.stat().st_mode & 0o777 == 0o640
    assert link.read_text(encoding="utf-8") == "old"  # a hard link is replaced, never written through
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.txt", "out.txt"]


def test_atomic_write_removes_its_partial_when_the_rename_fails(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    with pytest.raises(EnvbuildError, match="is a directory"):
        atomic_write(tmp_path / "dir", b"data")  # a directory cannot be replaced by a file
    assert [p.name for p in tmp_path.iterdir()] == ["dir"]


# --- the rules of the layer, each against the attack it stops -----------------------------------------------

from envbuild.shared import safefiles  # noqa: E402


def test_a_link_planted_at_the_target_is_replaced_never_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious", encoding="utf-8")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # a directory others may write: their link there is never followed
    (shared / "summary.txt").symlink_to(victim)
    safefiles.write_file(shared / "summary.txt", "report\n")
    assert victim.read_text(encoding="utf-8") == "precious"
    assert not (shared / "summary.txt").is_symlink()
    assert (shared / "summary.txt").read_text(encoding="utf-8") == "report\n"


def test_partial_names_cannot_be_guessed(tmp_path: Path) -> None:
    """The old layer wrote `.NAME.partial-PID`: links planted for the coming PIDs caught the write."""
    victim = tmp_path / "bashrc"
    victim.write_text("mine", encoding="utf-8")
    for pid in range(os.getpid() - 5, os.getpid() + 50):
        os.symlink(victim, tmp_path / f".out.partial-{pid}")
    safefiles.write_file(tmp_path / "out", "x")
    assert victim.read_text(encoding="utf-8") == "mine"


def test_a_device_target_is_written_in_place_never_replaced(tmp_path: Path) -> None:
    safefiles.write_file("/dev/null", "nothing\n")
    assert Path("/dev/null").is_char_device()


def test_a_fifo_target_is_written_in_place(tmp_path: Path) -> None:
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    safefiles.write_file(fifo, b"through the pipe")
    reader.join(5)
    assert got == [b"through the pipe"]
    assert fifo.is_fifo()


def test_dash_is_standard_output(capfd: pytest.CaptureFixture[str]) -> None:
    safefiles.write_file("-", "to stdout\n")
    assert capfd.readouterr().out == "to stdout\n"


def test_remove_tree_never_crosses_a_link(tmp_path: Path) -> None:
    victim = tmp_path / "data"
    victim.mkdir()
    (victim / "thesis.tex").write_text("years", encoding="utf-8")
    store = tmp_path / "store"
    (store / "trash" / "entry" / "ro").mkdir(parents=True)
    (store / "trash" / "entry" / "link").symlink_to(victim)
    (store / "trash" / "entry" / "ro" / "f").write_text("x", encoding="utf-8")
    (store / "trash" / "entry" / "ro").chmod(0o500)
    safefiles.remove_tree(store / "trash")
    assert (victim / "thesis.tex").read_text(encoding="utf-8") == "years"
    assert not (store / "trash").exists()
    (store / "trash").symlink_to(victim)
    safefiles.remove_tree(store / "trash")  # the link goes, its target stays
    assert not (store / "trash").is_symlink() and (victim / "thesis.tex").exists()


def test_a_subdirectory_that_is_a_link_is_refused_with_a_fix(tmp_path: Path) -> None:
    victim = tmp_path / "data"
    victim.mkdir()
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "trash").symlink_to(victim)
    fd = safefiles.open_dir(tmp_path / "store")
    try:
        with pytest.raises(safefiles.UnsafePlaceError, match="symbolic link") as caught:
            safefiles.subdir(fd, "trash", create=True, where=str(tmp_path / "store" / "trash"))
        assert "fix:" in caught.value.render()
    finally:
        os.close(fd)


def test_open_dir_create_never_follows_a_link_planted_below(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    project = tmp_path / "project"
    project.mkdir()
    (project / ".envrun").symlink_to(victim)
    with pytest.raises(safefiles.UnsafePlaceError):
        safefiles.open_below(project, (".envrun", "jobs"), create=True)
    # the path the user gave is theirs: a link above the part we make is followed
    (tmp_path / "mine").symlink_to(project)
    safefiles.make_dirs(tmp_path / "mine" / "out" / "jobs")
    assert (project / "out" / "jobs").is_dir()
    assert list(victim.iterdir()) == []


def test_a_directory_the_user_may_only_pass_through_still_works(tmp_path: Path) -> None:
    """A directory without read permission (0711, 0300): opened O_PATH, which serves every name lookup in it."""
    from tests.support.trust_accounts import as_user, unprivileged

    if os.geteuid() != 0:
        pytest.skip("needs root to make the directory another user's")
    import shutil
    import tempfile

    account = unprivileged()
    top = Path(tempfile.mkdtemp(prefix="envbuild-passthrough-", dir="/tmp"))  # pytest's own tmp is root's 0700
    try:
        top.chmod(0o755)
        outer = top / "passthrough"
        (outer / "inner").mkdir(parents=True)
        os.chown(outer / "inner", account.pw_uid, account.pw_gid)
        (outer / "inner").chmod(0o300)  # the user's own, to write in but not to list: no O_RDONLY descriptor
        outer.chmod(0o711)
        code = ("import sys; sys.path.insert(0, sys.argv[1]); from envbuild.shared import safefiles; "
                "safefiles.write_file(sys.argv[2], 'ok'); print(open(sys.argv[2]).read())")
        done = as_user(account, [sys.executable, "-I", "-c", code, str(REPO), str(outer / "inner" / "f")], cwd=Path("/"))
        assert done.returncode == 0, done.stderr
        assert done.stdout == "ok\n"
    finally:
        shutil.rmtree(top)


def test_a_link_a_stranger_planted_in_a_group_directory_is_not_followed(tmp_path: Path) -> None:
    """`--report reports/job-1` in a group project: another member made `reports` a link to the victim's files."""
    from tests.support.attacker import group_dir_with_strangers_link

    victim, project = group_dir_with_strangers_link(tmp_path, "reports")
    with pytest.raises(safefiles.UnsafePlaceError, match="symbolic link made by uid"):
        safefiles.write_file(project / "reports" / "summary.txt", "x")
    with pytest.raises(safefiles.UnsafePlaceError):
        safefiles.make_dirs(project / "reports" / "job-1")
    assert list(victim.iterdir()) == []
    os.lchown(project / "reports", os.geteuid(), os.getegid())  # the user's own link is theirs to follow
    safefiles.write_file(project / "reports" / "summary.txt", "x")
    assert (victim / "summary.txt").read_text(encoding="utf-8") == "x"


def test_remove_tree_of_a_very_deep_tree_needs_no_recursion(tmp_path: Path) -> None:
    """A member can make trash/ thousands of levels deep: the removal is iterative (600 levels, beyond what a
    recursive walk of three frames a level allows under Python's limit of 1000)."""
    top = tmp_path / "trash"
    top.mkdir()
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    for _level in range(600):
        os.mkdir("d", dir_fd=fd)
        (Path(f"/proc/self/fd/{fd}") / "f").write_text("x", encoding="utf-8")
        inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(fd)
    safefiles.remove_tree(top)
    assert not top.exists()


def test_remove_file_of_a_name_whose_directory_is_not_there_yet(tmp_path: Path) -> None:
    """`envbuild build --log logs/build/x.log` removes the previous log first: before logs/ exists, there is
    nothing to remove (it crashed with FileNotFoundError); without missing_ok the error stays."""
    safefiles.remove_file(tmp_path / "logs/build/x.log")
    assert not (tmp_path / "logs").exists()
    with pytest.raises(FileNotFoundError):
        safefiles.remove_file(tmp_path / "logs/build/x.log", missing_ok=False)


def test_make_dirs_at_makes_beneath_a_held_directory_never_through_a_link(tmp_path: Path) -> None:
    """A build's directories below the store's own: each component made or opened by descriptor, a link at one of
    them refused (here the user's own: below a held directory no link is followed), exact modes for what it
    makes, `new` refusing a name already there, `trusted` judging the owner of what is there."""
    victim = tmp_path / "data"
    victim.mkdir()
    store = tmp_path / "store"
    store.mkdir()
    (store / "work").symlink_to(victim)
    fd = safefiles.open_dir(store)
    try:
        with pytest.raises(safefiles.UnsafePlaceError, match="work is a symbolic link") as caught:
            safefiles.make_dirs_at(fd, "work/build-1/tmp", where=str(store))
        assert "fix:" in caught.value.render()
        os.close(safefiles.make_dirs_at(fd, "envs/entry/rootfs", mode=0o750, where=str(store)))
        assert all((store / sub).stat().st_mode & 0o7777 == 0o750 for sub in ("envs", "envs/entry", "envs/entry/rootfs"))
        os.close(safefiles.make_dirs_at(fd, "envs/entry/rootfs", where=str(store)))  # there already: opened
        with pytest.raises(safefiles.UnsafePlaceError, match="already there"):
            safefiles.make_dirs_at(fd, "envs/entry", where=str(store), new=True)
        with pytest.raises(safefiles.UnsafePlaceError, match="belongs to another user"):
            safefiles.make_dirs_at(fd, "envs/entry", where=str(store), trusted=lambda info: False)
    finally:
        os.close(fd)
    assert list(victim.iterdir()) == []


def test_set_mode_changes_the_entry_itself_never_through_a_link(tmp_path: Path) -> None:
    """A directory output's mode after its copy: a link planted at its name is refused, its target keeps its mode;
    a directory the user may not read is still changed (through an O_PATH descriptor)."""
    victim = tmp_path / "data"
    victim.mkdir(mode=0o700)
    (tmp_path / "out").symlink_to(victim)
    with pytest.raises(safefiles.UnsafePlaceError, match="symbolic link") as caught:
        safefiles.set_mode(tmp_path / "out", 0o777)
    assert "fix:" in caught.value.render()
    assert victim.stat().st_mode & 0o777 == 0o700
    (tmp_path / "tree").mkdir(mode=0o311)
    (tmp_path / "tree").chmod(0o311)
    safefiles.set_mode(tmp_path / "tree", 0o755)
    assert (tmp_path / "tree").stat().st_mode & 0o777 == 0o755
