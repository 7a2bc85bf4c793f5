"""A walked-up envrun.yaml and the one *.sif here, as a member of the same project would attack them (issue 40):
a link is judged itself (owner, directory) and where it leads; relative paths lead from the real file's
directory; the file is judged and read through one descriptor; another user's directory (even 0755) or one
others may write is not the user's to trust, unless trusted on purpose."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from envbuild.launch.project import Environment, find_environment, project_settings
from envbuild.launch.trust import Ignored
from envbuild.shared.errors import UsageError
from tests.support.trust_accounts import ENVRUN, as_user, plant, stranger, unprivileged

PLANTED = "image: /evil.sif\nbinds: ['/:/hostroot']\n"


@pytest.fixture(autouse=True)
def own_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    return home


def find(cwd: Path, environ: dict[str, str] | None = None, image: str | None = None) -> tuple[Environment, list[Ignored]]:
    ignored: list[Ignored] = []
    environ = {"HOME": os.environ["HOME"], **(environ or {})}
    found = find_environment(image=image, overlays=(), environ=environ, cwd=str(cwd), warn=ignored.append)
    return found, ignored


def name_of(uid: int) -> str:
    return f"{stranger().pw_name} (uid {uid})"


def strangers_link(link: Path, target: Path) -> Path:
    link.symlink_to(target)
    account = stranger()
    os.lchown(link, account.pw_uid, account.pw_gid)
    return link


def strangers_dir(path: Path, mode: int) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    account = stranger()
    os.chown(path, account.pw_uid, account.pw_gid)
    path.chmod(mode)
    return path


@pytest.fixture
def victims_project(tmp_path: Path) -> Path:
    """The user's own project: envrun.yaml naming build/env.sif relative to itself, and that image."""
    project = tmp_path / "victim" / "proj"
    (project / "build").mkdir(parents=True)
    (project / "envrun.yaml").write_text("image: build/env.sif\nbinds: [data]\n")
    (project / "build" / "env.sif").write_text("the user's image")
    return project


def test_a_strangers_link_to_the_users_own_file_is_ignored(tmp_path: Path, victims_project: Path) -> None:
    """The issue's reproduction: the link leads to the user's own file, but its `image: build/env.sif` would
    have been resolved beside the link, where the stranger put their image."""
    shared = strangers_dir(tmp_path / "shared", 0o1777)
    link = strangers_link(shared / "envrun.yaml", victims_project / "envrun.yaml")
    plant(strangers_dir(shared / "build", 0o755) / "env.sif", "the stranger's image")
    with pytest.raises(UsageError) as caught:
        find(shared)
    assert str(shared / "build" / "env.sif") not in caught.value.message
    uid = stranger().pw_uid
    assert f"  {link}: ignored: it is a link owned by {name_of(uid)}, not by you or root; its directory is " \
           f"{name_of(uid)}'s and everyone may write it (mode 1777)" in caught.value.message.splitlines()


def test_relative_paths_lead_from_the_real_files_directory(tmp_path: Path, victims_project: Path) -> None:
    """The user's own link: the file obeyed is the one judged, and `build/env.sif` is the one beside it."""
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "build").mkdir(parents=True)
    (elsewhere / "build" / "env.sif").write_text("not the one the file means")
    (elsewhere / "envrun.yaml").symlink_to(victims_project / "envrun.yaml")
    found, ignored = find(elsewhere)
    assert ignored == []
    assert found.project_file == str(elsewhere / "envrun.yaml")
    assert found.image == str(victims_project / "build" / "env.sif")
    assert project_settings(found, "local")[0] == (str(victims_project / "data"),)


def test_a_link_in_a_directory_others_may_write_is_ignored_even_when_the_user_made_it(
        tmp_path: Path, victims_project: Path) -> None:
    """Anyone who may write the directory may replace the link, between the check and the read too."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    (shared / "envrun.yaml").symlink_to(victims_project / "envrun.yaml")
    found, ignored = find(shared, image="x.sif")
    assert found.project_file is None
    assert [i.why for i in ignored] == ["its directory is yours and everyone may write it (mode 0777)"]
    shared.chmod(0o775)  # umask 002 with user private groups (root's group is root alone): only the user writes
    found, ignored = find(shared, image="x.sif")
    assert ignored == [] and found.project_file == str(shared / "envrun.yaml")


def test_a_link_to_a_strangers_file_names_both_problems(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    scratch = strangers_dir(tmp_path / "scratch", 0o755)
    planted = plant(scratch / "target.yaml", PLANTED)
    strangers_link(project / "envrun.yaml", planted)
    found, ignored = find(project, image="x.sif")
    uid = stranger().pw_uid
    assert found.project_file is None
    assert [i.why for i in ignored] == [
        f"it is a link owned by {name_of(uid)}, not by you or root; owned by {name_of(uid)}, not by you or root; "
        f"its directory is {name_of(uid)}'s, not yours or root's (mode 0755) (it is where the link "
        f"{project}/envrun.yaml leads)"]


def test_a_directory_of_another_user_is_not_trusted_even_0755(tmp_path: Path) -> None:
    """Its owner may put any file there, or swap the images its file names relative to it."""
    theirs = strangers_dir(tmp_path / "theirs", 0o755)
    (theirs / "envrun.yaml").write_text("image: a.sif\n")  # the user's own file (root's in CI) in it
    found, ignored = find(theirs, image="x.sif")
    assert found.project_file is None
    assert [i.why for i in ignored] == [f"its directory is {name_of(stranger().pw_uid)}'s, not yours or root's (mode 0755)"]
    found, ignored = find(theirs, {"ENVRUN_TRUST_DIR": str(theirs)}, image="x.sif")
    assert ignored == [] and found.project_file == str(theirs / "envrun.yaml"), "trusted on purpose: obeyed"


def test_the_file_obeyed_is_the_one_judged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Check and read through one descriptor: the user's file is swapped for a stranger's right after it was
    looked at (the moment a racer aims for); envrun must not obey what it did not judge."""
    project = tmp_path / "proj"
    project.mkdir()
    path = project / "envrun.yaml"
    path.write_text("image: mine.sif\n")
    planted = plant(project / ".planted", PLANTED)
    real_lstat = os.lstat

    def lstat_then_swap(name, *args, **kwargs):  # type: ignore[no-untyped-def]
        result = real_lstat(name, *args, **kwargs)
        if os.fspath(name) == str(path) and planted.exists():
            planted.rename(path)
        return result

    monkeypatch.setattr(os, "lstat", lstat_then_swap)
    found, ignored = find(project, image="x.sif")
    monkeypatch.undo()
    assert path.read_text() == PLANTED, "the swap happened"
    assert found.project is None or found.project.get("image") != "/evil.sif", "obeyed a file it never judged"
    assert [i.why for i in ignored] == [f"owned by {name_of(stranger().pw_uid)}, not by you or root"]


def test_a_strangers_link_as_the_only_sif_is_not_picked_up(tmp_path: Path) -> None:
    mine = tmp_path / "images" / "env.sif"
    mine.parent.mkdir()
    mine.write_text("the user's image")
    work = tmp_path / "work"
    work.mkdir()
    link = strangers_link(work / "env.sif", mine)
    with pytest.raises(UsageError) as caught:
        find(work)
    assert caught.value.message.splitlines()[-1] == \
        f"  {link}: ignored: it is a link owned by {name_of(stranger().pw_uid)}, not by you or root"
    os.lchown(link, os.geteuid(), os.getegid())  # the user's own link to the user's own image: fine
    assert find(work)[0].image == str(link)


# -- the attacker and the victim as two real users, through bin/envrun -----------------------------------------


@pytest.fixture
def shared_root() -> Iterator[Path]:
    """Outside root's 0700 pytest directory, so that both users reach it."""
    root = Path(tempfile.mkdtemp(prefix="envrun-links-", dir="/var/tmp"))
    root.chmod(0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_as_two_users_the_strangers_link_does_not_choose_the_image(shared_root: Path) -> None:
    victim = unprivileged()
    home = shared_root / "victim"
    project = home / "proj"
    (project / "build").mkdir(parents=True)
    (project / "envrun.yaml").write_text("image: build/env.sif\n")
    (project / "build" / "env.sif").write_text("the victim's image")
    for path in (home, project, project / "build", project / "envrun.yaml", project / "build" / "env.sif"):
        os.chown(path, victim.pw_uid, victim.pw_gid)
    shared = strangers_dir(shared_root / "shared", 0o1777)  # where both work: the stranger's, anyone may write
    strangers_link(shared / "envrun.yaml", project / "envrun.yaml")
    plant(strangers_dir(shared / "build", 0o755) / "env.sif", "the stranger's image")

    result = as_user(victim, [ENVRUN, "--dry-run", "python", "-V"], cwd=shared, env_extra={"HOME": str(home)})
    assert f"{shared}/build/env.sif" not in result.stdout, "the stranger's image ran as the victim"
    assert result.returncode == 2 and result.stdout == "", result.stderr
    assert result.stderr.startswith(f"envrun: warning: ignoring {shared}/envrun.yaml: it is a link owned by "
                                    f"{name_of(stranger().pw_uid)}, not by you or root;"), result.stderr

    result = as_user(victim, [ENVRUN, "--dry-run", "python", "-V"], cwd=project, env_extra={"HOME": str(home)})
    assert result.returncode == 0 and f" {project}/build/env.sif /bin/sh -c " in result.stdout, result.stderr
