"""The issue's spec against the real tools: torch 2.13.0's CPU build with torchvision listed next to it.

On this machine the host's package sources (pip.conf and PIP_*: find-links /opt/wheels with torch-2.13.0+cpu,
extra indexes with PyPI's torchvision 0.28.0, a CUDA build) hold no CPU torchvision, so `envbuild lock` and
`envbuild build` stop with the torch family message (before the spec's import test and squashing, and
leaving no image and no env layer). With a CPU torchvision reachable through find-links the same spec
builds. No real torchvision+cpu wheel is reachable here: the test makes a STAND-IN, a pure-Python wheel
named torchvision-0.28.0+cpu (Requires-Dist torch==2.13.0, a torchvision/version.py saying cuda = None),
which is what the check reads; it has none of torchvision's operators.

One failing lock, one failing build, one passing build, in a store seeded with the shared test cache's
debootstrap base (hard links) and uv download cache."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import zipfile
from pathlib import Path

import pytest

from envbuild.host.pip import read_host_pip_settings
from envbuild.store.layout import kind_dir
from tests.conftest import REPO, run_cli, seeded_store

ENVBUILD = str(REPO / "bin/envbuild")

pytestmark = [pytest.mark.apptainer]

ISSUE_SPEC = """\
name: torch-family
system: local
base: debootstrap:bookworm
python:
  pytorch: {version: "2.13.0", variant: cpu}
  packages: [torchvision]
tests:
  - python -c "import torchvision, importlib.metadata as m; print('torchvision', m.version('torchvision'))"
"""


@pytest.fixture
def store(tmp_path: Path, build_cache: Path, debootstrap_base: Path) -> Path:
    """A fresh store holding the shared cache's debootstrap base (hard-linked) and its uv download cache."""
    return seeded_store(tmp_path / "store", build_cache)  # the debootstrap_base fixture made the base there first


def standin_torchvision_wheel(directory: Path) -> Path:
    """A STAND-IN for PyTorch's torchvision-0.28.0+cpu wheel: pure Python, no operators; what the family
    check reads (its version's label and version.py) is as the real wheel has it."""
    version = "0.28.0+cpu"
    info = f"torchvision-{version}.dist-info"
    files = {
        "torchvision/__init__.py": "# stand-in for torchvision's CPU build (envbuild's tests)\nfrom .version import __version__\n",
        "torchvision/version.py": f"__version__ = '{version}'\ngit_version = 'standin'\ncuda = None\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: torchvision\nVersion: {version}\nRequires-Dist: torch==2.13.0\n"
                            "Summary: stand-in for torchvision's CPU build in envbuild's tests\n\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: envbuild-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }

    def digest(text: str) -> str:
        return base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()

    record = "".join(f"{path},sha256={digest(text)},{len(text.encode())}\n" for path, text in files.items())
    files[f"{info}/RECORD"] = record + f"{info}/RECORD,,\n"
    directory.mkdir(parents=True, exist_ok=True)
    wheel = directory / f"torchvision-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel


def envbuild(args: list[str], store: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return run_cli([ENVBUILD, *args], env_extra={"ENVBUILD_CACHE_DIR": str(store), **env}, timeout=1800)


def test_a_torchvision_of_another_variant_stops_lock_and_build_and_a_matching_one_builds(tmp_path: Path, store: Path) -> None:
    spec = tmp_path / "torch-family.yaml"
    spec.write_text(ISSUE_SPEC)
    image = tmp_path / "torch-family.sif"

    lock = envbuild(["lock", str(spec)], store)
    assert lock.returncode == 1, lock.stdout + lock.stderr[-4000:]
    assert f"error: torch family mismatch in the resolution of {spec}" in lock.stderr, lock.stderr[-4000:]
    assert not (tmp_path / "torch-family.lock").exists()

    failed = envbuild(["build", str(spec), "-o", str(image), "--compression", "zstd"], store)
    said = failed.stdout + failed.stderr
    assert failed.returncode == 1, said[-6000:]
    assert "error: torch family mismatch in the Python environment of torch-family" in failed.stderr, said[-6000:]
    assert ("torchvision 0.28.0 is PyPI's default build (no variant label; on Linux x86_64 a CUDA build), but torch "
            "2.13.0+cpu is the CPU-only build (cpu)") in failed.stderr
    assert "fix: make torchvision 0.28.0+cpu reachable" in failed.stderr and "Traceback" not in said
    assert "inside the image" not in said  # stopped before the spec's tests (and squashing)
    assert not image.exists()
    assert not list(kind_dir(store, "env").glob("torch-family-*/complete")), "a mismatched env layer was kept as complete"

    wheels = standin_torchvision_wheel(tmp_path / "standin-wheels")
    find_links = " ".join([*read_host_pip_settings().find_links, str(wheels.parent)])
    built = envbuild(["build", str(spec), "-o", str(image), "--compression", "zstd"], store, PIP_FIND_LINKS=find_links)
    assert built.returncode == 0, (built.stdout + built.stderr)[-6000:]
    assert image.is_file()
    verified = envbuild(["verify", str(image)], store)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert ("torch family: the image has torch 2.13.0+cpu (cpu), torchvision 0.28.0+cpu (cpu), all built for torch's variant"
            in verified.stdout)
