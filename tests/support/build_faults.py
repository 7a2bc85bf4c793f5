"""Helpers of the fault tests that run real builds (interrupted, concurrent, disk full): a tiny spec on a
`localimage:` base directory, builds started as a user's shell would, and the check that nothing was
left behind."""

from __future__ import annotations

import fcntl
import json
import os
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from envbuild.store.layout import kind_dir
from tests.conftest import REPO, run_cli

ENVBUILD = str(REPO / "bin/envbuild")

SPEC = """\
name: {name}
system: local
base: localimage:{base}
python:
  packages: [{packages}]
post:
  - {post}
tests:
  - python -c "import {first}"
"""


def write_spec(directory: Path, base: Path, *, name: str = "fault", post: str = "echo post-step",
               packages: str = "six") -> Path:
    path = directory / f"{name}.yaml"
    path.write_text(SPEC.format(name=name, base=base, post=post, packages=packages, first=packages.split(',')[0].strip()))
    return path


def start_build(spec: Path, output: Path, store: Path, **env: str) -> subprocess.Popen[str]:
    environ = dict(os.environ, ENVBUILD_CACHE_DIR=str(store), **env)
    # Its own process group, like a command started from a shell: a terminal's Ctrl-C reaches the group.
    return subprocess.Popen([ENVBUILD, "build", str(spec), "-o", str(output), "--compression", "zstd"],
                            env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def wait_for(condition: Callable[[], bool], timeout: float, what: str, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if process.poll() is not None:
            pytest.fail(f"the build ended before {what}:\n{process.stdout.read() if process.stdout else ''}")
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def log_has(log: Path, text: str) -> Callable[[], bool]:
    return lambda: log.exists() and text in log.read_text(errors="replace")


def assert_nothing_left(store: Path, out_dir: Path, output: Path) -> None:
    """No partial output, no work directory, no partial file in the store, every entry complete, every
    lock free, no tool still running on the store."""
    assert not output.exists()
    assert sorted(p.name for p in out_dir.iterdir() if "partial" in p.name) == []
    assert not any(kind_dir(store, "work").iterdir()) if kind_dir(store, "work").exists() else True
    assert sorted(str(p) for p in store.rglob("*partial*") if re.search(r"\.partial(-|$)|envbuild-partial", p.name)
                  and "/rootfs/" not in str(p) and "/uv/" not in str(p)) == []
    listed = run_cli([ENVBUILD, "cache", "ls", "--json"], env_extra={"ENVBUILD_CACHE_DIR": str(store)})
    entries = json.loads(listed.stdout)
    assert [e for e in entries if e["kind"] != "download" and not e["complete"]] == []
    for lock in (store / "locks").glob("*.lock"):
        with open(lock) as handle:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises when a lock is still held
    tools = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert [line for line in tools.splitlines() if str(store) in line and "ps -eo" not in line] == []
