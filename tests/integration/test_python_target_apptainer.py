"""python.target on real apptainer: definition files of our own in the public shapes of NGC, conda and LUMI
AI Factory recipes (`Bootstrap: localimage` on the framework image, `pip install` in %post), imported, locked
and built on stand-ins of those images in their layout (tests/support/framework_bases.py: the torch there is a
small stand-in distribution, not the real one). The import installs into the base's own Python (python.target:
base); the image's `python` imports the base's torch and the added package; the lock keeps the base's torch.
A spec with python.target: venv-over-base on the NGC-style stand-in gets a venv that sees the base's torch; one
with python.target: base on a stand-in of LUMI's older images installs into the conda env $WITH_CONDA activates."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import run_cli
from tests.support.build_faults import ENVBUILD
from tests.support.framework_bases import TORCH_VERSION, WITH_CONDA, framework_base

pytestmark = [pytest.mark.apptainer, pytest.mark.slow]

DEF = """\
Bootstrap: localimage
From: {base}

%post
    {pip} install --no-cache-dir six
"""
# (the pip command of the recipe, where the base's torch is, where the added package goes)
CASES = {
    "ngc": ("pip", "/usr/local/lib/python3.11/dist-packages", "/usr/local/lib/python3.11/dist-packages"),
    "conda": ("python -m pip", "/opt/conda/lib/python3.11/site-packages", "/opt/conda/lib/python3.11/site-packages"),
    "lumi": ("pip", "/opt/venv/lib/python3.11/site-packages", "/opt/venv/lib/python3.11/site-packages"),
}


def _import_and_build(kind: str, tmp_path: Path, debootstrap_base: Path, *, lock: bool) -> tuple[Path, Path]:
    pip, _, _ = CASES[kind]
    base = framework_base(kind, debootstrap_base, tmp_path)
    recipe = tmp_path / f"{kind}.def"
    recipe.write_text(DEF.format(base=base, pip=pip))
    spec = tmp_path / f"{kind}.yaml"
    imported = run_cli([ENVBUILD, "import", str(recipe), "-o", str(spec)])
    assert imported.returncode == 0, imported.stderr
    python = yaml.safe_load(spec.read_text())["python"]
    assert python == {"target": "base", "packages": ["six"]}, spec.read_text()
    store = {"ENVBUILD_CACHE_DIR": str(tmp_path / "store")}
    if lock:
        locked = run_cli([ENVBUILD, "lock", str(spec)], env_extra=store, timeout=600)
        assert locked.returncode == 0, locked.stdout + locked.stderr[-4000:]
    image = tmp_path / f"{kind}.sif"
    built = run_cli([ENVBUILD, "build", str(spec), "-o", str(image), "--compression", "zstd",
                     *(["--locked"] if lock else [])], env_extra=store, timeout=900)
    assert built.returncode == 0, built.stdout + built.stderr[-4000:]
    return spec, image


def _python_in(image: Path) -> list[str]:
    shown = subprocess.run(["apptainer", "exec", "--cleanenv", str(image), "python", "-c",
                            "import torch, six, sys; print(torch.__version__, torch.__file__, six.__file__, sys.prefix)"],
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    return shown.stdout.split()


def test_an_ngc_style_def_installs_into_the_base_python_and_the_lock_keeps_its_torch(
        tmp_path: Path, debootstrap_base: Path) -> None:
    spec, image = _import_and_build("ngc", tmp_path, debootstrap_base, lock=True)
    lock = yaml.safe_load(spec.with_suffix(".lock").read_text())
    assert lock["kept-from-base"] == {"torch": TORCH_VERSION} and set(lock["packages"]) == {"six"}
    assert lock["inputs"]["python-target"] == "base"
    version, torch_file, six_file, _ = _python_in(image)
    _, torch_site, added_site = CASES["ngc"]
    assert version == TORCH_VERSION and torch_file.startswith(torch_site) and six_file.startswith(added_site)
    record = json.loads(subprocess.run(["apptainer", "exec", str(image), "cat", "/.envbuild/build.json"],
                                       capture_output=True, text=True, check=True).stdout)
    assert record["venv"] == "/usr/local" and record["python"] == "/usr/bin/python3"
    assert f"torch=={TORCH_VERSION}" in record["environments"]["/usr/bin/python3"]
    path = subprocess.run(["apptainer", "exec", "--cleanenv", str(image), "sh", "-c", 'echo "$PATH"'],
                          capture_output=True, text=True, check=True).stdout
    assert "/opt/envbuild" not in path
    verified = run_cli([ENVBUILD, "verify", str(image), str(spec)])
    assert verified.returncode == 0, verified.stdout + verified.stderr
    listed = run_cli([ENVBUILD, "packages", "--json", str(image)])
    assert listed.returncode == 0, listed.stderr
    names = {row["name"] for row in json.loads(listed.stdout)["packages"] if row["environment"] == "/usr/local"}
    assert {"torch", "six"} <= names, listed.stdout[:2000]


@pytest.mark.parametrize("kind", ["conda", "lumi"])
def test_a_conda_or_lumi_style_def_installs_into_the_environment_first_on_path(
        kind: str, tmp_path: Path, debootstrap_base: Path) -> None:
    _, image = _import_and_build(kind, tmp_path, debootstrap_base, lock=False)
    version, torch_file, six_file, prefix = _python_in(image)
    _, torch_site, added_site = CASES[kind]
    assert version == TORCH_VERSION and torch_file.startswith(torch_site) and six_file.startswith(added_site)
    assert prefix == {"conda": "/opt/conda", "lumi": "/opt/venv"}[kind]


def test_a_venv_over_an_ngc_style_base_sees_its_torch_and_the_lock_keeps_it(tmp_path: Path, debootstrap_base: Path) -> None:
    """python.target: venv-over-base, written in the spec: envbuild's venv made with --system-site-packages from
    the base's Python; the added package in the venv, torch from the base."""
    base = framework_base("ngc", debootstrap_base, tmp_path)
    spec = tmp_path / "over.yaml"
    spec.write_text(f"name: over\nbase: localimage:{base}\npython:\n  target: venv-over-base\n  packages: [six]\n")
    store = {"ENVBUILD_CACHE_DIR": str(tmp_path / "store")}
    locked = run_cli([ENVBUILD, "lock", str(spec)], env_extra=store, timeout=600)
    assert locked.returncode == 0, locked.stdout + locked.stderr[-4000:]
    assert yaml.safe_load(spec.with_suffix(".lock").read_text())["kept-from-base"] == {"torch": TORCH_VERSION}
    image = tmp_path / "over.sif"
    built = run_cli([ENVBUILD, "build", str(spec), "-o", str(image), "--compression", "zstd", "--locked"],
                    env_extra=store, timeout=900)
    assert built.returncode == 0, built.stdout + built.stderr[-4000:]
    version, torch_file, six_file, prefix = _python_in(image)
    assert version == TORCH_VERSION and torch_file.startswith(CASES["ngc"][1])
    assert six_file.startswith("/opt/envbuild/venv/") and prefix == "/opt/envbuild/venv"
    verified = run_cli([ENVBUILD, "verify", str(image), str(spec)])
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_a_base_target_on_a_with_conda_base_installs_where_with_conda_leads(tmp_path: Path, debootstrap_base: Path) -> None:
    """LUMI's older PyTorch images: the framework's Python is the conda env that $WITH_CONDA activates, the system
    python3 comes first without it. python.target: base locks against that env (its torch kept) and installs into
    it, as a user who runs $WITH_CONDA first (envrun does) gets it; the system Python is left alone."""
    base = framework_base("lumi-conda", debootstrap_base, tmp_path)
    spec = tmp_path / "lumi.yaml"
    spec.write_text(f"name: lumi\nbase: localimage:{base}\npython:\n  target: base\n  packages: [six]\n")
    store = {"ENVBUILD_CACHE_DIR": str(tmp_path / "store")}
    locked = run_cli([ENVBUILD, "lock", str(spec)], env_extra=store, timeout=600)
    assert locked.returncode == 0, locked.stdout + locked.stderr[-4000:]
    assert yaml.safe_load(spec.with_suffix(".lock").read_text())["kept-from-base"] == {"torch": TORCH_VERSION}
    image = tmp_path / "lumi.sif"
    built = run_cli([ENVBUILD, "build", str(spec), "-o", str(image), "--compression", "zstd", "--locked"],
                    env_extra=store, timeout=900)
    assert built.returncode == 0, built.stdout + built.stderr[-4000:]
    shown = subprocess.run(["apptainer", "exec", "--cleanenv", str(image), "bash", "-c",
                            'eval "$WITH_CONDA" && python -c "import torch, six, sys; print(six.__file__, sys.prefix)"'],
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    six_file, prefix = shown.stdout.split()
    assert prefix == "/opt/miniconda3/envs/pytorch" and six_file.startswith(prefix + "/lib/")
    system = subprocess.run(["apptainer", "exec", "--cleanenv", str(image), "python3", "-c", "import six"],
                            capture_output=True, text=True, timeout=120)
    assert system.returncode != 0  # the system Python, first without $WITH_CONDA, got nothing
    assert WITH_CONDA in subprocess.run(["apptainer", "exec", "--cleanenv", str(image), "sh", "-c", 'echo "$WITH_CONDA"'],
                                        capture_output=True, text=True, check=True).stdout

