"""`envrun --strict-net` (and a recipe's network.strict_net) set NCCL_NET from the recipe, so that NCCL/RCCL fail at
start instead of falling back to TCP sockets; the dry run shows it with its reason."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def dry_run(tmp_path: Path, system: str, *options: str, env: dict[str, str] | None = None) -> str:
    image = tmp_path / "env.sif"
    image.write_bytes(b"")
    done = subprocess.run([sys.executable, "-m", "envbuild.cli.envrun_main", "--system", system, "--image", str(image),
                           *options, "--dry-run", "python", "train.py"], capture_output=True, text=True, cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **(env or {})})
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize(("system", "value"), [("lumi-g", "'AWS Libfabric'"), ("puhti", "IB")])
def test_strict_net_sets_nccl_net(tmp_path: Path, system: str, value: str) -> None:
    script = dry_run(tmp_path, system, "--strict-net")
    assert f"NCCL_NET={value}" in script and "--strict-net" in script and "network.nccl_net" in script
    assert "NCCL_NET" not in dry_run(tmp_path, system)


def test_users_own_nccl_net_wins(tmp_path: Path) -> None:
    assert "NCCL_NET=Socket" not in dry_run(tmp_path, "lumi-g", "--strict-net", env={"NCCL_NET": "Socket"})
    assert "NCCL_NET='AWS Libfabric'" not in dry_run(tmp_path, "lumi-g", "--strict-net", env={"NCCL_NET": "Socket"})
