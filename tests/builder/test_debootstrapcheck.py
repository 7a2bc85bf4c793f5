"""A debootstrap base where debootstrap cannot run: the fix says what works for the user who ran the build. A user
without root is pointed at an image base (docker://, localimage:) with a line for the spec, told that debootstrap
needs root, and told to install it only where it is really absent."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from envbuild.builder.execute import debootstrapcheck
from envbuild.builder.execute.debootstrapcheck import debootstrap_problem
from tests.conftest import REPO
from tests.support.trust_accounts import as_user, unprivileged

ARGV = ("debootstrap", "--variant=minbase", "--include=python3", "bookworm", "/store/base/tree")
# What a Debian login shell gives a user: no sbin directories.
USER_PATH = "/usr/local/bin:/usr/bin:/bin"


def host(monkeypatch: pytest.MonkeyPatch, *, uid: int, on_path: str | None, in_sbin: str | None) -> None:
    """This host as the test wants it: the user's uid, and where `which` finds debootstrap."""
    monkeypatch.setattr(debootstrapcheck.os, "geteuid", lambda: uid)

    def which(name: str, path: str | None = None) -> str | None:
        return in_sbin if path is not None else on_path

    monkeypatch.setattr(debootstrapcheck.shutil, "which", which)


def test_root_with_debootstrap_on_path_runs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    host(monkeypatch, uid=0, on_path="/usr/sbin/debootstrap", in_sbin="/usr/sbin/debootstrap")
    assert debootstrap_problem(ARGV) is None


def test_a_user_is_told_root_is_needed_and_what_works_without_it(monkeypatch: pytest.MonkeyPatch) -> None:
    host(monkeypatch, uid=4242, on_path=None, in_sbin="/usr/sbin/debootstrap")
    message, fix = debootstrap_problem(ARGV) or ("", "")
    assert message.startswith("a `debootstrap:bookworm` base is made by debootstrap (/usr/sbin/debootstrap), which needs root")
    assert "`base: docker://python:3.12-slim`" in fix and "`base: localimage:base.sif`" in fix
    assert "install" not in fix  # it is installed: installing it again is no fix


def test_a_user_with_sbin_on_path_is_stopped_before_debootstrap_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    host(monkeypatch, uid=4242, on_path="/usr/sbin/debootstrap", in_sbin="/usr/sbin/debootstrap")
    message, _fix = debootstrap_problem(ARGV) or ("", "")
    assert "which needs root" in message


def test_installing_is_mentioned_only_where_it_is_absent(monkeypatch: pytest.MonkeyPatch) -> None:
    host(monkeypatch, uid=4242, on_path=None, in_sbin=None)
    message, fix = debootstrap_problem(ARGV) or ("", "")
    assert "which needs root and is not installed here" in message
    assert "`base: docker://python:3.12-slim`" in fix and fix.endswith("as root, apt-get install debootstrap and run the build as root")
    host(monkeypatch, uid=0, on_path=None, in_sbin=None)
    assert debootstrap_problem(ARGV) == ("debootstrap is not installed",
                                         f"apt-get install debootstrap; or {debootstrapcheck.IMAGE_BASE_FIX}")


def test_root_without_sbin_on_path_is_told_to_add_it(monkeypatch: pytest.MonkeyPatch) -> None:
    host(monkeypatch, uid=0, on_path=None, in_sbin="/usr/sbin/debootstrap")
    message, fix = debootstrap_problem(ARGV) or ("", "")
    assert message == "debootstrap is installed (/usr/sbin/debootstrap) but /usr/sbin is not on PATH"
    assert fix.startswith('add it: export PATH="$PATH:/usr/sbin"')


@pytest.mark.apptainer
@pytest.mark.skipif(os.geteuid() != 0, reason="running as the unprivileged user needs root to switch to it")
@pytest.mark.skipif(shutil.which("debootstrap", path="/usr/sbin:/sbin") is None, reason="debootstrap is not installed")
@pytest.mark.parametrize("path", [USER_PATH, f"{USER_PATH}:/usr/sbin:/sbin"], ids=["user-path", "sbin-on-path"])
def test_reference_spec_built_by_a_user_without_root(path: str) -> None:
    """`envbuild build` of the reference spec as provision/users.sh's user, with a store of its own: the base
    step stops before debootstrap with the fix that works without root."""
    account = unprivileged()
    project = Path(tempfile.mkdtemp(prefix="envbuild-debootstrap-user-", dir="/var/tmp"))
    try:
        shutil.copy(REPO / "envs/local-cpu-pytorch.yaml", project / "env.yaml")
        os.chown(project, account.pw_uid, account.pw_gid)
        os.chown(project / "env.yaml", account.pw_uid, account.pw_gid)
        result = as_user(account, [str(REPO / ".venv/bin/envbuild"), "build", "--cache-dir", str(project / "store"),
                                   "env.yaml"], cwd=project, env_extra={"PATH": path})
    finally:
        shutil.rmtree(project, ignore_errors=True)
    assert result.returncode != 0
    assert "a `debootstrap:bookworm` base is made by debootstrap (/usr/sbin/debootstrap), which needs root; " \
           f"this build runs as {account.pw_name} (uid {account.pw_uid})" in result.stderr, result.stderr
    assert "write `base: docker://python:3.12-slim` in the spec" in result.stderr
    assert "apt-get install" not in result.stderr and "can only run as root" not in result.stderr
