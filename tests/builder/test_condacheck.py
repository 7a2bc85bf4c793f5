"""The pip part of a conda env against the system, before anything is downloaded (envbuild.builder.plan.condacheck)."""

from __future__ import annotations

import pytest

from envbuild.builder.plan.condacheck import conda_pip_problems, conda_pip_warnings, index_variant, requirement_variant
from envbuild.envspec.conda import CondaEnv
from envbuild.recipes.loadrecipe import load_recipe

LUMI_BASE = "docker://rocm/dev-ubuntu-22.04:6.2.4-complete"


def found(pip: list[str], system: str = "lumi-g", base: str = LUMI_BASE) -> list[tuple[str, str]]:
    return conda_pip_problems(CondaEnv(dependencies=("python=3.12",), pip=tuple(pip)), load_recipe(system), system, base)


COURSE_PIP = ["--extra-index-url https://download.pytorch.org/whl/rocm6.2/", "torch==2.5.1+rocm6.2",
              "torchvision==0.20.1+rocm6.2", "accelerate==1.3.0"]


def test_the_course_pip_list_fits_lumi_g() -> None:
    assert found(COURSE_PIP) == []


def test_variants_are_read_from_pins_and_indexes() -> None:
    assert requirement_variant("torch==2.5.1+rocm6.2") == ("torch", "rocm6.2")
    assert requirement_variant("torch>=2.5") == ("torch", None)
    assert index_variant("https://download.pytorch.org/whl/cu126") == "cu126"
    assert index_variant("https://download.pytorch.org/whl/nightly/rocm6.4/") == "rocm6.4"
    assert index_variant("https://download.pytorch.org/whl/") is None


def test_mixed_variants_are_refused() -> None:
    (what, fix), = found(["--extra-index-url https://download.pytorch.org/whl/rocm6.1", "torch==2.5.1+rocm6.2"])
    assert "mixes PyTorch variants" in what and "rocm6.1" in what and "one variant" in fix


def test_a_pin_without_an_index_that_has_it() -> None:
    (what, fix), = found(["torch==2.5.1+rocm6.2"])
    assert "only on PyTorch's wheel index" in what and "https://download.pytorch.org/whl/rocm6.2" in fix


COURSE_ROCM56_PIP = ["--extra-index-url https://download.pytorch.org/whl/rocm5.6", "torch==2.2.2+rocm5.6",
                     "torchvision==0.17.2+rocm5.6"]


def warned(pip: list[str], system: str = "lumi-g", base: str = LUMI_BASE) -> list[tuple[str, str]]:
    return conda_pip_warnings(CondaEnv(dependencies=("python=3.10",), pip=tuple(pip)), load_recipe(system), system, base)


def test_a_rocm_other_than_the_base_image_is_a_warning_not_a_refusal() -> None:
    """The LUMI course's torch 2.2.2+rocm5.6 wheels on cotainr's ROCm 6.2 lumi-g base: the wheels carry
    their own ROCm; what matters is the host's driver and plugins built against the base's ROCm."""
    assert found(COURSE_ROCM56_PIP) == []
    (what, fix), = warned(COURSE_ROCM56_PIP)
    assert "torch==2.2.2+rocm5.6 is built for ROCm 5.6" in what and "has ROCm 6.2" in what
    assert "carry their own ROCm runtime" in what and "AMD GPU driver (amdgpu)" in what and "aws-ofi-rccl" in what
    assert "https://download.pytorch.org/whl/rocm6.2" in fix and "user-kernel-space-compat-matrix" in fix
    assert "pytorch.org/get-started" in fix


def test_the_base_image_rocm_gives_no_warning() -> None:
    assert warned(COURSE_PIP) == []
    assert warned(["--extra-index-url https://download.pytorch.org/whl/rocm6.2/", "torch==2.5.1+rocm6.2.4"]) == []


def test_another_base_image_is_not_judged_by_the_recipe_rocm() -> None:
    assert found(["--extra-index-url https://download.pytorch.org/whl/rocm5.7", "torch==2.3.1+rocm5.7"],
                 base="docker://rocm/dev-ubuntu-22.04:5.7-complete") == []
    assert warned(COURSE_ROCM56_PIP, base="docker://rocm/dev-ubuntu-22.04:5.7-complete") == []


@pytest.mark.parametrize(("system", "pip", "expected"), [
    ("lumi-g", ["--extra-index-url https://download.pytorch.org/whl/cu126", "torch==2.7.0+cu126"], "for NVIDIA GPUs"),
    ("puhti", ["--extra-index-url https://download.pytorch.org/whl/rocm6.2", "torch==2.5.1+rocm6.2"], "for AMD GPUs"),
    ("lumi-g", ["torch==2.5.1"], "from PyPI is the CUDA build"),
])
def test_a_variant_for_the_other_gpu_vendor(system: str, pip: list[str], expected: str) -> None:
    (what, _), = found(pip, system=system, base="docker://x/y:1")
    assert expected in what


def test_nothing_torch_nothing_to_check() -> None:
    assert found(["six==1.16.0"]) == [] and found([]) == []
