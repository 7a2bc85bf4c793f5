"""What `envbuild build` prints, and what it does with SPEC.lock, on a tiny spec (one store, three small
builds, about a minute here): without a terminal plain lines and `still running:` heartbeats during a slow
step, under a pseudo-terminal a live line with the step's clock; a lock written by --upgrade, a stale
one resolved again and rewritten, -q, --frozen and --locked as uv has them."""

from __future__ import annotations

import os
import pty
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli, seeded_store

ENVBUILD = str(REPO / "bin/envbuild")

pytestmark = [pytest.mark.apptainer]

SPEC = """\
name: tiny
system: local
base: debootstrap:bookworm
python:
  packages: [{packages}]
post:
  - sleep {sleep}
"""


@pytest.fixture
def store(tmp_path: Path, build_cache: Path) -> Path:
    """A fresh store with the shared cache's debootstrap bases (hard links) and uv download cache."""
    return seeded_store(tmp_path / "store", build_cache)


def write_spec(directory: Path, packages: str = "six", sleep: int = 3) -> Path:
    path = directory / "tiny.yaml"
    path.write_text(SPEC.format(packages=packages, sleep=sleep))
    return path


def build(spec: Path, store: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli([ENVBUILD, "build", str(spec), "-o", str(spec.with_suffix(".sif")), "--compression", "zstd", *args],
                   env_extra={"ENVBUILD_CACHE_DIR": str(store)}, timeout=900)


def build_on_a_terminal(spec: Path, store: Path) -> tuple[int, str]:
    """The build with stdout and stderr on a pseudo-terminal, as a user at a shell sees it."""
    main, child = pty.openpty()
    env = dict(os.environ, ENVBUILD_CACHE_DIR=str(store), TERM="xterm")
    process = subprocess.Popen([ENVBUILD, "build", str(spec), "-o", str(spec.with_suffix(".sif")), "--compression", "zstd"],
                               stdin=child, stdout=child, stderr=child, env=env, cwd=REPO, close_fds=True)
    os.close(child)
    data = b""
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the child side closed: the build has ended
            break
        if not chunk:
            break
        data += chunk
    os.close(main)
    return process.wait(timeout=900), data.decode(errors="replace")


def test_progress_off_and_on_a_terminal_and_the_lock_by_default(tmp_path: Path, store: Path) -> None:
    spec = write_spec(tmp_path)
    lock = tmp_path / "tiny.lock"

    # No lock: the build says so and resolves from the spec (a dry run); --upgrade resolves and writes one.
    assert build(spec, store, "--dry-run").stdout.startswith(f"# lock: no lock file {lock}: resolving from the spec")
    # No terminal: plain lines, and heartbeats during the sleep.
    first = build(spec, store, "--upgrade", "--heartbeat", "1")
    assert first.returncode == 0, first.stderr[-4000:]
    text = first.stderr
    assert "\x1b" not in text and "\r" not in text, "a batch log gets plain lines only"
    assert "--upgrade: resolving every package anew" in text and f"wrote {lock} (1 packages)" in text
    assert "six" in lock.read_text()
    assert "still running: [build 4/" in text and "run 1 post command(s), 2 s" in text, text
    assert "steps: " in text and "from the store" in text, "the table of steps at the end"
    assert f"built {spec.with_suffix('.sif')} in " in text and "(log: " in text

    # Unchanged: the current lock is used; -q prints the result only.
    quiet = build(spec, store, "-q")
    assert quiet.returncode == 0 and quiet.stderr.splitlines() == [
        line for line in quiet.stderr.splitlines() if "is up to date" in line], quiet.stderr
    assert "using" in build(spec, store, "--dry-run").stdout.splitlines()[0]

    # The spec changed: on a terminal, the stale lock is named, resolved again and rewritten; a live line ticks.
    write_spec(tmp_path, packages="six, idna", sleep=2)
    code, screen = build_on_a_terminal(spec, store)
    assert code == 0, screen[-4000:]
    assert "is stale (requirement added: idna)" in screen and "+ idna" in screen
    assert "idna" in lock.read_text()
    assert "\r\x1b[K[build 4/" in screen and "run 1 post command(s)  1 s" in screen, screen[-3000:]
    assert "steps: " in screen

    # --locked refuses a stale lock; --frozen takes it unchecked; --upgrade re-resolves (dry runs write nothing).
    write_spec(tmp_path, packages="six, idna, certifi", sleep=2)
    before = lock.read_text()
    refused = build(spec, store, "--locked")
    assert refused.returncode != 0 and "is stale" in refused.stderr and "requirement added: certifi" in refused.stderr
    frozen = build(spec, store, "--frozen", "--dry-run")
    assert frozen.returncode == 0 and frozen.stdout.startswith("# lock: --frozen: installing"), frozen.stderr
    upgrade = build(spec, store, "--upgrade", "--dry-run")
    assert upgrade.stdout.startswith("# lock: --upgrade: resolving every package anew")
    stale = build(spec, store, "--dry-run")
    assert stale.stdout.startswith("# lock: ") and "is stale (requirement added: certifi)" in stale.stdout
    assert lock.read_text() == before, "a dry run never writes the lock"
    both = build(spec, store, "--frozen", "--upgrade")
    assert both.returncode == 2 and "--frozen and --upgrade exclude each other" in both.stderr
