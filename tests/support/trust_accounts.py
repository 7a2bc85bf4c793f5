"""The two users of the trust tests (issue 28): the owner (the test's own uid, root in CI, or the unprivileged
account provision/users.sh makes) and a stranger who plants files. Tests run as root in CI, so planting is a
chown to the stranger; running as the unprivileged user is setpriv with a login-like environment."""

from __future__ import annotations

import os
import pwd
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO

ENVRUN = str(REPO / "bin/envrun")
USER = os.environ.get("ENVBUILD_TEST_USER", "envbuild-ci")
STRANGER = os.environ.get("ENVBUILD_TEST_STRANGER", "envbuild-stranger")


def stranger() -> pwd.struct_passwd:
    """The stranger's account: provision/users.sh's, else nobody (any uid that is not the owner's will do)."""
    for name in (STRANGER, "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    pytest.fail(f"no stranger account ({STRANGER} or nobody): run provision/users.sh", pytrace=False)


def plant(path: Path, text: str, *, mode: int = 0o644) -> Path:
    """`path` written with `text`, then given to the stranger (needs root, as CI runs)."""
    if os.geteuid() != 0:
        pytest.fail("planting a stranger's file needs root (CI runs the tests as root)", pytrace=False)
    path.write_text(text)
    account = stranger()
    os.chown(path, account.pw_uid, account.pw_gid)
    path.chmod(mode)
    return path


def unprivileged() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(USER)
    except KeyError:
        pytest.fail(f"no user {USER}: provision/users.sh makes it (bash provision/all.sh)", pytrace=False)


def as_user(account: pwd.struct_passwd, args: list[str], *, cwd: Path,
            env_extra: dict[str, str] | None = None, timeout: int = 120) -> subprocess.CompletedProcess[str]:
    """`args` run as `account`, with its own HOME (its own config and caches) and nothing of root's."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": account.pw_dir, "USER": account.pw_name,
           "LOGNAME": account.pw_name, "ENVBUILD_SYSTEM": "local", **(env_extra or {})}
    command = ["setpriv", f"--reuid={account.pw_uid}", f"--regid={account.pw_gid}", "--init-groups",
               "env", "-i", *(f"{k}={v}" for k, v in env.items()), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=cwd)
