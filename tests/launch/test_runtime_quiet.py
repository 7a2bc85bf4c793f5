"""The runtime's INFO lines say nothing to the user (apptainer without setuid prints `INFO: gocryptfs not found, will
not be able to use gocryptfs` at every start): envrun starts it with --quiet, which keeps its warnings and errors,
and -v (or --explain) keeps the INFO lines too. Planned, and as the unprivileged user on the real apptainer."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from envbuild.host.buildhost import Runtime
from envbuild.launch.launchplan import LaunchRequest, plan_launch
from envbuild.recipes.loadrecipe import load_recipe
from tests.conftest import REPO
from tests.support.envrun_overlays import FIXTURE_SIF
from tests.support.trust_accounts import as_user, unprivileged

RUNTIME = Runtime("/usr/bin/apptainer", "apptainer")
INFO_LINE = "INFO:    gocryptfs not found"


def planned(*, runtime_info: bool, runscript: str = "") -> tuple[tuple[str, ...], str]:
    plan = plan_launch(LaunchRequest(command=("python", "train.py"), image="/img/env.sif", recipe=load_recipe("local"),
                                     runtime=RUNTIME, cwd="/work/proj", runscript=runscript, runtime_info=runtime_info))
    return plan.argv, "\n".join(plan.reasons)


@pytest.mark.parametrize("runscript", ["", "its runscript runs the command it is given"], ids=["exec", "run"])
def test_the_runtime_starts_quiet(runscript: str) -> None:
    argv, reasons = planned(runtime_info=False, runscript=runscript)
    start = argv.index("/usr/bin/apptainer")
    assert argv[start + 1] == "--quiet" and argv[start + 2] == ("run" if runscript else "exec")  # a global option
    assert "apptainer --quiet: without its INFO lines" in reasons


def test_explain_keeps_the_runtime_info_lines() -> None:
    argv, reasons = planned(runtime_info=True)
    assert "--quiet" not in argv and "--quiet" not in reasons


@pytest.fixture
def user_image() -> Iterator[Path]:
    """A directory the unprivileged user can read, holding a small image (no /bin/sh in it: envrun's shim then
    fails inside, an error the runtime must still show)."""
    directory = Path(tempfile.mkdtemp(prefix="envrun-quiet-", dir="/var/tmp"))
    directory.chmod(0o755)
    shutil.copy(FIXTURE_SIF, directory / "env.sif")
    (directory / "env.sif").chmod(0o644)
    try:
        yield directory / "env.sif"
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.apptainer
@pytest.mark.skipif(os.geteuid() != 0, reason="running as the unprivileged user needs root to switch to it")
def test_envrun_as_a_user_shows_errors_but_no_info_lines(user_image: Path) -> None:
    account = unprivileged()
    directory = user_image.parent

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return as_user(account, list(args), cwd=directory, env_extra={"PATH": "/usr/local/bin:/usr/bin:/bin"})

    bare = run("apptainer", "exec", str(user_image), "/bin/true")
    quiet = run(str(REPO / "bin/envrun"), "--image", str(user_image), "python", "-c", "pass")
    assert quiet.returncode != 0
    assert "INFO:" not in quiet.stderr, quiet.stderr
    assert "FATAL:   stat /bin/sh: no such file or directory" in quiet.stderr, quiet.stderr  # the error still shows
    assert "WARNING:" in quiet.stderr  # and the runtime's warnings (no passwd file in this image)
    for flag in ("--explain", "-v"):
        explained = run(str(REPO / "bin/envrun"), flag, "--image", str(user_image), "python", "-c", "pass")
        assert "FATAL:   stat /bin/sh" in explained.stderr
        if INFO_LINE in bare.stderr:  # this apptainer prints it for a user (no gocryptfs installed, no setuid)
            assert INFO_LINE in explained.stderr, (flag, explained.stderr)
