"""Files envrun finds without being told (issue 28, envbuild.launch.trust): an envrun.yaml found by walking up,
the one *.sif here. Tried as the two users of a shared machine: the owner (root in CI, and the unprivileged
account) and a stranger who plants files. A planted file is ignored with one line naming it, its owner and
the fix; the walk stops at a directory like /tmp and at another file system; ENVRUN_TRUST_DIR and the user's
trusted_dirs bring a shared project's file back."""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from envbuild.launch.project import find_environment, project_settings
from envbuild.launch.trust import Ignored, TrustedDirs, walk_up
from envbuild.shared.errors import UsageError
from tests.support.trust_accounts import ENVRUN, as_user, plant, stranger, unprivileged

PLANTED = "image: /evil.sif\nbinds: ['/:/hostroot']\nenv: {LD_PRELOAD: /tmp/evil.so}\n"


@pytest.fixture(autouse=True)
def own_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The owner's config and caches in the test's directory, never the real home's."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    return home


def find(cwd: Path, environ: dict[str, str] | None = None, image: str | None = "x.sif"):
    """find_environment as envrun calls it, with the ignored files collected instead of printed."""
    ignored: list[Ignored] = []
    environ = {"HOME": os.environ["HOME"], **(environ or {})}
    found = find_environment(image=image, overlays=(), environ=environ, cwd=str(cwd), warn=ignored.append)
    return found, ignored


def owner_of(uid: int) -> str:
    account = stranger()
    return f"{account.pw_name} (uid {uid})"


def fix_for(directory: Path) -> str:
    return (f"fix: if you trust it, add {directory} to $ENVRUN_TRUST_DIR (colon-separated) or to trusted_dirs: in "
            "your envrun config; else remove it or run elsewhere")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "src").mkdir(parents=True)
    return root


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    """A scratch root: the stranger's (or the site's), world-writable and sticky, like /tmp."""
    root = tmp_path / "scratch"
    root.mkdir()
    account = stranger()
    os.chown(root, account.pw_uid, account.pw_gid)
    root.chmod(0o1777)
    (root / "alice" / "run").mkdir(parents=True)  # the owner's directory in it
    return root


def test_a_strangers_envrun_yaml_is_ignored_with_a_warning(project: Path) -> None:
    planted = plant(project / "envrun.yaml", PLANTED)
    found, ignored = find(project / "src")
    assert found.project_file is None and found.project is None
    assert project_settings(found, "local") == ((), {}), "its binds and env must not apply"
    uid = planted.stat().st_uid
    assert [i.warning() for i in ignored] == [
        f"ignoring {planted}: owned by {owner_of(uid)}, not by you or root; {fix_for(project)}"]


def test_own_file_that_others_may_write_is_ignored(project: Path) -> None:
    path = project / "envrun.yaml"
    path.write_text("image: a.sif\n")
    path.chmod(0o666)
    assert [i.why for i in find(project)[1]] == ["everyone may write it"]
    account = stranger()  # a group with another member than the owner
    os.chown(path, os.geteuid(), account.pw_gid)
    path.chmod(0o664)
    group = grp.getgrgid(account.pw_gid).gr_name
    assert [i.why for i in find(project)[1]] == [f"group {group} (gid {account.pw_gid}) may write it"]


def test_group_write_by_the_users_own_private_group_is_fine(project: Path) -> None:
    """umask 002 with user private groups (Debian's default) makes every file group-writable."""

    me = pwd.getpwuid(os.geteuid())
    group = grp.getgrgid(me.pw_gid)
    if group.gr_name != me.pw_name or set(group.gr_mem) - {me.pw_name}:
        pytest.fail(f"the test user's primary group {group.gr_name} is no private group here", pytrace=False)
    path = project / "envrun.yaml"
    path.write_text("image: a.sif\n")
    os.chown(path, me.pw_uid, me.pw_gid)
    path.chmod(0o664)
    found, ignored = find(project)
    assert ignored == [] and found.project_file == str(path)


def test_a_file_planted_in_a_sticky_world_writable_directory_above_is_ignored(tmp_path: Path, scratch: Path) -> None:
    (tmp_path / "envrun.yaml").write_text("image: /above.sif\n")  # the owner's, above the scratch root
    planted = plant(scratch / "envrun.yaml", PLANTED)
    with pytest.raises(UsageError) as caught:
        find(scratch / "alice" / "run", image=None)
    why = (f"owned by {owner_of(planted.stat().st_uid)}, not by you or root; its directory is "
           f"{owner_of(planted.stat().st_uid)}'s and everyone may write it (mode 1777)")
    lines = caught.value.message.splitlines()
    assert lines[0] == "no image to run in; envrun looked at:"
    assert lines[3:] == [f"  {scratch}/alice/run/envrun.yaml: absent", f"  {scratch}/alice/envrun.yaml: absent",
                         f"  {planted}: ignored: {why}", f"  {scratch}/alice/run/*.sif: none"]
    assert f"{tmp_path}/envrun.yaml" not in caught.value.message, "the walk must stop at the scratch root"


def test_the_walk_stops_at_a_directory_others_may_write(tmp_path: Path, scratch: Path) -> None:
    (tmp_path / "envrun.yaml").write_text("image: /above.sif\n")
    walk = walk_up(str(scratch / "alice" / "run"), "envrun.yaml", TrustedDirs({}))
    assert walk.found is None and walk.ignored == []
    assert walk.checked[-1] == f"{scratch}/envrun.yaml"
    assert walk.stopped == f"{scratch} is not yours and others may write it"


def test_the_owners_own_file_in_a_directory_others_may_write_is_ignored(scratch: Path) -> None:
    """The file is the owner's, but anyone could have put it there (or replace it in a non-sticky one)."""
    (scratch / "envrun.yaml").write_text("image: /mine.sif\n")
    found, ignored = find(scratch / "alice" / "run")
    assert found.project_file is None
    assert [i.why for i in ignored] == [
        f"its directory is {owner_of(scratch.stat().st_uid)}'s and everyone may write it (mode 1777)"]


def test_envrun_trust_dir_and_trusted_dirs_bring_a_shared_projects_file_back(project: Path, own_home: Path) -> None:
    planted = plant(project / "envrun.yaml", "image: shared.sif\nenv: {HF_HOME: /shared/hf}\n")
    found, ignored = find(project / "src", {"ENVRUN_TRUST_DIR": f"/nowhere:{project}"})
    assert ignored == [] and found.project_file == str(planted)
    assert project_settings(found, "local") == ((), {"HF_HOME": "/shared/hf"})
    assert find(project / "src", {"ENVRUN_TRUST_DIR": str(project.parent)})[0].project_file == str(planted), \
        "a trusted directory covers what is below it"
    assert find(project / "src", {"ENVRUN_TRUST_DIR": "relative/dir"})[1] != [], "only absolute directories"
    config = own_home / ".config" / "envbuild" / "envrun.yaml"
    config.parent.mkdir(parents=True)
    config.write_text(f"trusted_dirs: [{project}]\n")
    found, ignored = find(project / "src")
    assert ignored == [] and found.project_file == str(planted)


def test_a_project_file_cannot_trust_directories_itself(project: Path) -> None:
    (project / "envrun.yaml").write_text("image: a.sif\ntrusted_dirs: [/]\n")
    with pytest.raises(UsageError) as caught:
        find(project)
    assert caught.value.message == f"{project}/envrun.yaml:2:1: trusted_dirs: Extra inputs are not permitted"


def test_a_link_is_judged_by_where_it_leads(project: Path, scratch: Path) -> None:
    planted = plant(scratch / "target.yaml", PLANTED)
    (project / "envrun.yaml").symlink_to(planted)
    found, ignored = find(project)
    assert found.project_file is None and len(ignored) == 1
    assert ignored[0].path == f"{project}/envrun.yaml"
    assert ignored[0].why.endswith(f"(it is where the link {project}/envrun.yaml leads)")
    assert ignored[0].why.startswith(f"owned by {owner_of(planted.stat().st_uid)}")


def test_a_strangers_only_sif_here_is_not_picked_up(project: Path) -> None:
    sif = plant(project / "env.sif", "not a real image")
    with pytest.raises(UsageError) as caught:
        find(project, image=None)
    why = f"owned by {owner_of(sif.stat().st_uid)}, not by you or root"
    assert caught.value.message.splitlines()[-1] == f"  {sif}: ignored: {why}"
    own = project / "src" / "mine.sif"
    own.write_text("the owner's")
    assert find(project / "src", image=None)[0].image == str(own)


def test_the_walk_stops_at_another_file_system() -> None:
    """/proc is a file system of its own on every Linux: / above it is not looked at."""
    walk = walk_up("/proc", "envrun.yaml", TrustedDirs({}))
    assert walk.checked == ["/proc/envrun.yaml"] and walk.stopped == "/ is another file system"


def test_the_walk_costs_one_stat_per_directory_more(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Launch latency: a stat of each directory and an lstat of each candidate, nothing else when all is fine."""
    deep = tmp_path / "a" / "b" / "c"
    deep.mkdir(parents=True)
    calls: list[str] = []
    real_stat, real_lstat = os.stat, os.lstat
    monkeypatch.setattr(os, "stat", lambda path, *a, **k: calls.append(f"stat {path}") or real_stat(path, *a, **k))
    monkeypatch.setattr(os, "lstat", lambda path, *a, **k: calls.append(f"lstat {path}") or real_lstat(path, *a, **k))
    walk = walk_up(str(deep), "envrun.yaml", TrustedDirs({}))
    monkeypatch.undo()
    assert len(calls) == 2 * len(walk.checked)


# -- the unprivileged user, a real envrun -------------------------------------------------------------------


@pytest.fixture
def shared_scratch() -> Iterator[Path]:
    """A scratch root outside root's 0700 pytest directory: root's, world-writable and sticky (as /tmp)."""
    root = Path(tempfile.mkdtemp(prefix="envrun-trust-", dir="/var/tmp"))
    root.chmod(0o1777)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_as_an_unprivileged_user_a_planted_file_above_is_ignored_and_trust_brings_it_back(shared_scratch: Path) -> None:
    user = unprivileged()
    planted = plant(shared_scratch / "envrun.yaml", PLANTED)
    home = shared_scratch / "alice"
    work = home / "run"
    work.mkdir(parents=True)
    for path in (home, work):
        os.chown(path, user.pw_uid, user.pw_gid)
    home.chmod(0o700)
    environ = {"HOME": str(home)}

    result = as_user(user, [ENVRUN, "--dry-run", "python", "-V"], cwd=work, env_extra=environ)
    assert result.returncode == 2 and result.stdout == "", result.stderr
    why = (f"owned by {owner_of(planted.stat().st_uid)}, not by you or root; its directory is root (uid 0)'s and "
           "everyone may write it (mode 1777)")
    lines = result.stderr.splitlines()
    assert lines[0] == f"envrun: warning: ignoring {planted}: {why}; {fix_for(shared_scratch)}"
    assert lines[1] == "error: no image to run in; envrun looked at:" and f"  {planted}: ignored: {why}" in lines
    assert "Traceback" not in result.stderr

    own = work / "envrun.yaml"  # the user's own file in the user's own directory: obeyed, no warning
    own.write_text("image: mine.sif\n")
    (work / "mine.sif").write_text("x")
    for path in (own, work / "mine.sif"):
        os.chown(path, user.pw_uid, user.pw_gid)
    result = as_user(user, [ENVRUN, "--dry-run", "python", "-V"], cwd=work, env_extra=environ)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert f" {work}/mine.sif /bin/sh -c " in result.stdout

    own.unlink()  # the group project that really shares the file above: trusted on purpose
    result = as_user(user, [ENVRUN, "--dry-run", "python", "-V"], cwd=work,
                     env_extra={**environ, "ENVRUN_TRUST_DIR": str(shared_scratch)})
    assert result.returncode == 2 and "warning" not in result.stderr
    assert f"error: image /evil.sif does not exist (named by {planted})" in result.stderr

    cache = home / ".cache" / "envrun"  # the user's own cache: made private, in the user's home
    assert cache.stat().st_uid == user.pw_uid and cache.stat().st_mode & 0o777 == 0o700
    files = list(cache.iterdir())
    assert files and all(f.stat().st_uid == user.pw_uid and f.stat().st_mode & 0o777 == 0o600 for f in files)


def test_a_relative_trusted_dir_in_the_config_is_a_located_error(own_home: Path, project: Path) -> None:
    config = own_home / ".config" / "envbuild" / "envrun.yaml"
    config.parent.mkdir(parents=True)
    config.write_text("trusted_dirs:\n  - proj\n")
    plant(project / "envrun.yaml", "image: a.sif\n")
    with pytest.raises(UsageError) as caught:
        find(project)
    assert caught.value.message == (f"{config}:2:5: trusted_dirs.0: 'proj' is not an absolute directory (a trusted "
                                    "directory is named in full, e.g. /project/proj_123)")


def test_envbuild_build_leaves_a_strangers_project_file_alone(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rewriting it would make it the user's own, and envrun would then obey what the stranger wrote in it."""
    from envbuild.launch.projectfile import update_project_file

    planted = plant(project / "envrun.yaml", PLANTED)
    monkeypatch.chdir(project)
    messages = update_project_file(project, image=str(project / "env.sif"), overlays=(), spec="env.yaml")
    assert messages == [f"{planted}: not updated: owned by {owner_of(planted.stat().st_uid)}, not by you or root "
                        f"(envrun ignores it too); {fix_for(project)[len('fix: '):]}"]
    assert planted.read_text() == PLANTED and planted.stat().st_uid == stranger().pw_uid
    monkeypatch.setenv("ENVRUN_TRUST_DIR", str(project))  # trusted on purpose: edited as any project file
    assert update_project_file(project, image=str(project / "env.sif"), overlays=(), spec="env.yaml") == [
        f"{planted}: kept image: /evil.sif set by hand (envbuild built env.sif)"]


def test_a_link_above_the_file_is_no_link_to_judge(tmp_path: Path) -> None:
    """/scratch -> /lustre/scratch: the file is judged where it is, with no word about a link."""
    from envbuild.launch.trust import untrusted_because

    real = tmp_path / "lustre"
    real.mkdir()
    (tmp_path / "scratch").symlink_to(real)
    (real / "envrun.yaml").write_text("image: a.sif\n")
    assert untrusted_because(str(tmp_path / "scratch" / "envrun.yaml")) is None
    (real / "envrun.yaml").chmod(0o666)
    assert untrusted_because(str(tmp_path / "scratch" / "envrun.yaml")) == "everyone may write it"
