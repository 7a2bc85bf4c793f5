"""A spec's env_shell (an imported %environment's conditional lines) run by the real runtime at a container's start,
after env and as bash would: a conditional export only where its condition holds, and a NAME=value without export
a shell variable of the script (later lines read it), not a variable of the program the container runs."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO, seeded_store

pytestmark = [pytest.mark.apptainer, pytest.mark.slow]

SPEC = """\
name: env-shell
system: local
base: debootstrap:bookworm
env:
  A: "1"
env_shell: |
  if [ -n "$A" ]; then
      export WHEN_A=yes
  fi
  if [ -n "$NOT_SET_ANYWHERE" ]; then
      export WHEN_UNSET=yes
  fi
  LOCAL=2
  export FROM_LOCAL=$LOCAL/x
"""


def test_env_shell_runs_at_start_with_the_shells_export_meaning(tmp_path: Path, build_cache: Path) -> None:
    (tmp_path / "env-shell.yaml").write_text(SPEC)
    image = tmp_path / "out" / "env-shell.sif"
    env = {**os.environ, "ENVBUILD_CACHE_DIR": str(seeded_store(tmp_path / "store", build_cache, uv_cache=False))}
    built = subprocess.run([str(REPO / "bin/envbuild"), "build", "env-shell.yaml", "-o", str(image), "--compression", "lz4"],
                           capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert built.returncode == 0, built.stdout + built.stderr[-4000:]
    shown = subprocess.run(["apptainer", "exec", "--cleanenv", str(image), "sh", "-c",
                            'printf "%s|" "$A" "$WHEN_A" "${WHEN_UNSET-unset}" "${LOCAL-unset}" "$FROM_LOCAL"'],
                           capture_output=True, text=True, timeout=120)
    assert shown.stdout == "1|yes|unset|unset|2/x|", shown.stderr
