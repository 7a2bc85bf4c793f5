"""Issue 17 P3 for real: the reference spec plus tabulate, built --layered over the reference image (the
difference as a SIF overlay partition), runs under the local Slurm through envrun, and its packages are
those of a full rebuild of the same spec. A private store seeded with the shared cache's base and
reference env layer and image (hard links: the session's reference_image put them there) keeps the shared
cache as it is; the reference build is then taken from the store with its tree manifest (what --layered
needs), and only the layered and the full +1 images are built."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from envbuild.store.layout import kind_dir
from tests.conftest import REPO, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.apptainer, pytest.mark.slurm]


def _seed(store: Path, build_cache: Path) -> None:
    for kind in ("bases", "envs", "images"):
        (store / kind).mkdir(parents=True)
        for entry in sorted((build_cache / kind).iterdir()) if (build_cache / kind).is_dir() else []:
            if (entry / "complete").exists() and (kind == "bases" or entry.name.startswith("local-cpu-pytorch-")):
                subprocess.run(["cp", "-al", str(entry), str(store / kind / entry.name)], check=True)
    (store / "uv").symlink_to(build_cache / "uv")


def _build(spec: Path, output: Path, store: Path, *extra: str) -> str:
    result = run_cli([str(REPO / "bin/envbuild"), "build", str(spec), "-o", str(output), *extra],
                     env_extra={"ENVBUILD_CACHE_DIR": str(store)}, timeout=1200)
    assert result.returncode == 0, result.stdout + result.stderr[-5000:]
    return result.stderr


def _packages(image: Path) -> list[tuple[str, str, str]]:
    result = run_cli([str(REPO / "bin/envbuild"), "packages", "--json", "--no-cache", str(image)], timeout=120)
    assert result.returncode == 0, result.stderr
    return sorted((r["environment"], r["name"], r["version"]) for r in json.loads(result.stdout)["packages"])


def test_reference_plus_tabulate_layered_runs_under_slurm_and_lists_the_full_rebuilds_packages(
        reference_image: Path, build_cache: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    _seed(store, build_cache)
    text = (REPO / "envs/local-cpu-pytorch.yaml").read_text()
    reference, plus = tmp_path / "local-cpu-pytorch.yaml", tmp_path / "plus.yaml"
    reference.write_text(text)
    plus.write_text(text.replace("    - accelerate", "    - accelerate\n    - tabulate", 1))
    # The reference is built against its lock, as in the repository (the shared env layer's key); the +1 spec
    # starts from the same lock, which the build finds stale and resolves again keeping every pin.
    lock = (REPO / "envs/local-cpu-pytorch.lock").read_bytes()
    (tmp_path / "local-cpu-pytorch.lock").write_bytes(lock)
    (tmp_path / "plus.lock").write_bytes(lock)

    _build(reference, tmp_path / "reference.sif", store)
    layered = tmp_path / "plus-layered.sif"
    log = _build(plus, layered, store, "--layered")
    assert "as a SIF overlay partition over image local-cpu-pytorch-" in log, log[-3000:]
    # Run as root with no post commands: the user layer lay in a directory over the env layer (no sandbox),
    # and the reference env layer was hard-linked while the stale lock was resolved (envbuild.builder.sessions.prefetch).
    build_log = Path(f"{layered}.build.log").read_text()
    assert "in a directory over the env layer" in build_log and "/sandbox" not in build_log
    assert "-prefetch/rootfs " in build_log, build_log[:3000]
    assert not [p for p in kind_dir(store, "work").iterdir()], "the build's work directories were left behind"

    launch = run_cli([str(REPO / "bin/envrun"), "--image", str(layered), "srun", "-n1", "python", "-c",
                      "import tabulate, torch; print('LAYERED_OK', tabulate.__version__)"],
                     env_extra={"ENVBUILD_CACHE_DIR": str(store)}, timeout=300)
    assert launch.returncode == 0, launch.stdout + launch.stderr
    assert "LAYERED_OK" in launch.stdout

    full = tmp_path / "plus-full.sif"
    _build(plus, full, store)
    assert _packages(layered) == _packages(full)
    assert any(name == "tabulate" for _env, name, _version in _packages(layered))
