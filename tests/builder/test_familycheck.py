"""The torch family check after installing (CheckTorchFamily): run by the executor inside the env step as
the planner lays it out, a mismatch stops the step before the layer is renamed complete, and the step's
cleanup removes the half-made layer, so nothing is left in the store to be reused as if it were good."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from envbuild.builder.execute.executor import BuildExecutor
from envbuild.builder.plan.actions import CheckTorchFamily, Remove, Rename, Step, WriteFile
from envbuild.envspec.specmodel import VENV_PREFIX
from envbuild.inventory.installedtorch import check_torch_family
from envbuild.shared.errors import EnvbuildError
from tests.inventory.test_torchbuilds import SITE, install


def env_step(entry: Path, check: CheckTorchFamily) -> Step:
    """The end of the planner's env step: check, rename the tree complete, write the marker."""
    partial, rootfs = entry / "rootfs.partial", entry / "rootfs"
    return Step("env", "Python env layer", (check, Rename(str(partial), str(rootfs)), WriteFile(str(entry / "complete"), "x\n")),
                skip_if_exists=str(entry / "complete"), cleanup=(Remove((str(partial),)),))


def test_a_mismatch_stops_the_step_and_leaves_no_layer(tmp_path: Path) -> None:
    entry = tmp_path / "store/envs/issue14-0123"
    partial = entry / "rootfs.partial"
    install(partial, SITE, "torch", "2.13.0+cpu", "cuda = None\nhip = None\n")
    install(partial, SITE, "torchvision", "0.28.0", "from torchvision.extension import _check_cuda_version\n")
    executor = BuildExecutor(tmp_path / "log", store_root=tmp_path / "store", out=io.StringIO())
    check = CheckTorchFamily(str(partial), VENV_PREFIX, "the Python environment of issue14")
    with pytest.raises(EnvbuildError) as caught:
        executor.execute_steps((env_step(entry, check),), None, "build")
    assert caught.value.message.startswith("torch family mismatch in the Python environment of issue14:")
    assert "torchvision 0.28.0 is PyPI's default build" in caught.value.message
    assert "torch 2.13.0+cpu is the CPU-only build (cpu)" in caught.value.message
    assert "https://download.pytorch.org/whl/cpu" in (caught.value.hint or "")
    assert not partial.exists() and not (entry / "rootfs").exists() and not (entry / "complete").exists()


def test_an_agreeing_family_passes_and_is_logged(tmp_path: Path) -> None:
    entry = tmp_path / "store/envs/good-0123"
    partial = entry / "rootfs.partial"
    install(partial, SITE, "torch", "2.13.0+cpu", "cuda = None\nhip = None\n")
    install(partial, SITE, "torchvision", "0.28.0+cpu", "cuda = None\n")
    executor = BuildExecutor(tmp_path / "log", store_root=tmp_path / "store", out=io.StringIO())
    executor.execute_steps((env_step(entry, CheckTorchFamily(str(partial), VENV_PREFIX, "x")),), None, "build")
    assert (entry / "complete").exists() and (entry / "rootfs").is_dir()
    assert "torch family: torch 2.13.0+cpu (cpu), torchvision 0.28.0+cpu (cpu)" in (tmp_path / "log").read_text()


def test_an_overlay_is_checked_against_the_torch_of_its_base(tmp_path: Path) -> None:
    """The overlay's venv holds only what it adds; torch comes from the base (`given`)."""
    venv = tmp_path / "venv"
    install(venv, "/lib/python3.12/site-packages", "torchvision", "0.21.0")
    check = CheckTorchFamily(str(venv), "/", "the overlay x on base.sif", ("torch==2.6.0+rocm6.2.4", "pytorch-triton-rocm==3.2.0"))
    with pytest.raises(EnvbuildError, match=r"torchvision 0\.21\.0 is PyPI's default build .* but torch 2\.6\.0\+rocm6\.2\.4 "
                                            r"is the ROCm 6\.2\.4 build"):
        check_torch_family(check)
    install(venv, "/lib/python3.12/site-packages", "torch", "2.6.0+rocm6.2.4")  # the overlay's own torch wins
    (venv / "lib/python3.12/site-packages/torchvision-0.21.0.dist-info").rename(
        venv / "lib/python3.12/site-packages/torchvision-0.21.0+rocm6.2.4.dist-info")
    (venv / "lib/python3.12/site-packages/torchvision-0.21.0+rocm6.2.4.dist-info/METADATA").write_text(
        "Metadata-Version: 2.1\nName: torchvision\nVersion: 0.21.0+rocm6.2.4\n\n")
    assert check_torch_family(check) == "torch family: torch 2.6.0+rocm6.2.4 (rocm6.2.4), torchvision 0.21.0+rocm6.2.4 (rocm6.2.4)"
    assert check_torch_family(CheckTorchFamily(str(tmp_path / "empty"), "/", "x")) == \
        "torch family: no torch, torchvision or torchaudio installed"


def test_the_bases_own_python_is_checked_where_its_sys_path_says(tmp_path: Path) -> None:
    """python.target: base: the packages went into the base's Python, whose prefix (/usr, dist-packages under
    /usr/local, a PYTHONPATH directory) is known only inside the container; the install step listed its sys.path
    (BASE_SYS_PATH), and the check reads the family from those directories, the first of each name first."""
    from envbuild.builder.plan.install import BASE_SYS_PATH

    entry = tmp_path / "store/envs/ngc-0123"
    partial = entry / "rootfs.partial"
    dist = "/usr/local/lib/python3.12/dist-packages"
    install(partial, dist, "torch", "2.13.0+cpu", "cuda = None\nhip = None\n")
    install(partial, dist, "torchvision", "0.28.0", "from torchvision.extension import _check_cuda_version\n")
    listing = partial / BASE_SYS_PATH.lstrip("/")
    listing.parent.mkdir(parents=True)
    listing.write_text(f"/usr/lib/python312.zip\n{dist}\n")
    executor = BuildExecutor(tmp_path / "log", store_root=tmp_path / "store", out=io.StringIO())
    check = CheckTorchFamily(str(partial), "/", "the base's own Python in ngc (just installed into)",
                             sys_path_file=BASE_SYS_PATH)
    assert "of the Python whose sys.path is listed in /.envbuild-host/base-sys-path.txt" in check.describe()
    with pytest.raises(EnvbuildError) as caught:
        executor.execute_steps((env_step(entry, check),), None, "build")
    assert caught.value.message.startswith("torch family mismatch in the base's own Python in ngc (just installed into):")
    assert "torchvision 0.28.0 is PyPI's default build" in caught.value.message
    assert not partial.exists() and not (entry / "complete").exists()
    # the family as it should be: checked and logged; a listing that names nothing with torch: none installed
    install(partial, dist, "torch", "2.13.0+cpu", "cuda = None\nhip = None\n")
    listing.parent.mkdir(parents=True, exist_ok=True)
    listing.write_text(f"{dist}\n")
    assert check_torch_family(check) == "torch family: torch 2.13.0+cpu (cpu)"
    listing.write_text("/usr/lib/python3/dist-packages\n")
    assert check_torch_family(check) == "torch family: no torch, torchvision or torchaudio installed"
