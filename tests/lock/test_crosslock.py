"""A lock for another platform: `envbuild lock` for a system of aarch64 nodes on this x86_64 machine resolves
for aarch64 (uv --python-platform) from the spec's python.lock_target, without fetching or running the base."""

from __future__ import annotations

import os
import subprocess
import urllib.request
from pathlib import Path

import pytest
import tomllib
import yaml

from tests.conftest import REPO, run_cli
from tests.support.archfixtures import recipes_with_arm_system, recording_tools

ENVBUILD = str(REPO / "bin" / "envbuild")
TORCH = "2.9.1"

pytestmark = pytest.mark.skipif(os.uname().machine != "x86_64", reason="written for an x86_64 machine")


@pytest.fixture
def work(tmp_path: Path) -> dict[str, object]:
    record = tmp_path / "started.txt"
    tools = recording_tools(tmp_path / "tools", record)
    env = {"ENVBUILD_RECIPES": str(recipes_with_arm_system(tmp_path / "recipes")),
           "ENVBUILD_CACHE_DIR": str(tmp_path / "store"), "PATH": f"{tools}:{os.environ['PATH']}"}
    return {"dir": tmp_path, "env": env, "record": record}


def _spec(work: dict[str, object], target: str) -> Path:
    spec = Path(str(work["dir"])) / "arm.yaml"
    spec.write_text(f"name: armenv\nsystem: armsys\nbase: docker://nvcr.io/nvidia/pytorch:25.01-py3\n"
                    f"python:\n{target}  packages: [torch=={TORCH}]\n")
    return spec


def test_without_the_bases_python_and_glibc_the_error_says_what_to_add(work: dict[str, object]) -> None:
    spec = _spec(work, "")
    result = run_cli([ENVBUILD, "lock", str(spec)], env_extra=work["env"], timeout=60)  # type: ignore[arg-type]
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"error: {spec}: system armsys runs aarch64 and this machine is x86_64, so the base cannot be run here" in result.stderr
    assert "fix: add them to the spec: `python: {lock_target: {python: '3.12', glibc: '2.39'}}`" in result.stderr
    assert not Path(str(work["record"])).exists()


def _pypi_reachable() -> None:
    try:
        urllib.request.urlopen("https://pypi.org/simple/torch/", timeout=15).close()
    except OSError as exc:
        message = f"PyPI is not reachable from this machine ({exc}); the aarch64 lock resolves from it"
        if os.environ.get("ENVBUILD_ALLOW_SKIP") == "1":
            pytest.skip(message)
        pytest.fail(message, pytrace=False)


@pytest.mark.network
def test_an_aarch64_lock_resolves_here_and_pins_aarch64_wheels(work: dict[str, object]) -> None:
    """~10 s: uv reads torch's metadata from PyPI (no wheel is downloaded; nothing is built or run)."""
    _pypi_reachable()
    spec = _spec(work, "  lock_target: {python: '3.12', glibc: '2.39'}\n")
    result = run_cli([ENVBUILD, "lock", str(spec)], env_extra=work["env"], timeout=300)  # type: ignore[arg-type]
    assert result.returncode == 0, result.stdout + result.stderr
    assert "locking armenv for armsys (aarch64) on this x86_64 machine: the base is not fetched" in result.stdout + result.stderr
    assert not Path(str(work["record"])).exists(), "nothing runs the base"
    store = Path(str(work["env"]["ENVBUILD_CACHE_DIR"]))  # type: ignore[index]
    assert {p.name for p in store.iterdir()} <= {"recipes", "runtime", "uv"}, "the base is not fetched"
    lock = yaml.safe_load(spec.with_suffix(".lock").read_text())
    assert lock["target"] == {"python": "3.12", "platform": "aarch64-manylinux_2_39"}
    assert lock["base-digest"] is None
    packages = lock["packages"]
    assert packages["torch"]["version"] == TORCH
    # For x86_64, PyPI's torch pulls triton and the nvidia-* CUDA wheels; its aarch64 wheels do not.
    assert not [name for name in packages if name == "triton" or name.startswith("nvidia-")]
    # The hash of torch's cp312 manylinux aarch64 wheel is among the pinned ones: uv, asked for the files
    # it would install on that platform (pylock.toml names them), gives that wheel.
    wheel, digest = _chosen_torch_wheel(Path(str(work["dir"])), store)
    assert wheel.startswith(f"torch-{TORCH}-cp312-cp312-manylinux") and wheel.endswith("_aarch64.whl")
    assert f"sha256:{digest}" in packages["torch"]["hashes"]
    # A build of it on this machine stops before anything, naming both architectures.
    build = run_cli([ENVBUILD, "build", str(spec), "--locked"], env_extra=work["env"], timeout=60)  # type: ignore[arg-type]
    assert build.returncode == 1 and "system armsys runs aarch64" in build.stderr and "this machine is x86_64" in build.stderr


def _chosen_torch_wheel(directory: Path, store: Path) -> tuple[str, str]:
    from uv import find_uv_bin

    (directory / "in.txt").write_text(f"torch=={TORCH}\n")
    subprocess.run([find_uv_bin(), "pip", "compile", str(directory / "in.txt"), "-o", str(directory / "pylock.toml"),
                    "--python-version", "3.12", "--python-platform", "aarch64-manylinux_2_39", "--no-config", "--quiet",
                    "--cache-dir", str(store / "uv")], check=True, timeout=300)
    document = tomllib.loads((directory / "pylock.toml").read_text())
    torch = next(p for p in document["packages"] if p["name"] == "torch")
    (chosen,) = torch["wheels"]
    return chosen["url"].rsplit("/", 1)[1], chosen["hashes"]["sha256"]


@pytest.mark.parametrize(("target", "problem"), [
    ({"python": 3.12, "glibc": "2.39"}, "3.12 reads as a number in YAML; quote it"),
    ({"python": "3.12", "glibc": "239"}, "'239' is not a glibc version"),
    ({"python": "python3", "glibc": "2.39"}, "'python3' is not a Python 3 version"),
])
def test_lock_target_is_checked_in_the_spec(target: dict[str, object], problem: str) -> None:
    from pydantic import ValidationError

    from envbuild.envspec.specmodel import Spec

    with pytest.raises(ValidationError, match=problem):
        Spec.model_validate({"name": "x", "base": "debootstrap:bookworm", "python": {"lock_target": target}})
