"""A conda env file in the shape of the LUMI course's (torch 2.2.2+rocm5.6 wheels in its pip part) on
lumi-g, whose cotainr base has ROCm 6.2: `envbuild validate --system` and `envbuild build --dry-run
--system` accept it with a warning that says what must match (envbuild.builder.plan.condacheck). No network."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import REPO, run_cli

ENVBUILD = str(REPO / "bin" / "envbuild")

COURSE_SHAPED = """\
name: pytorch-rocm56
channels:
  - conda-forge
dependencies:
  - python=3.10
  - pip
  - pip:
    - --extra-index-url https://download.pytorch.org/whl/rocm5.6
    - torch==2.2.2+rocm5.6
    - torchvision==0.17.2+rocm5.6
    - transformers==4.40.0
"""


def env_file(directory: Path) -> Path:
    path = directory / "pytorch-rocm56.yml"
    path.write_text(COURSE_SHAPED)
    return path


def assert_the_rocm_warning(text: str) -> None:
    assert "torch==2.2.2+rocm5.6 is built for ROCm 5.6; the lumi-g base image for conda builds has ROCm 6.2" in text
    assert "carry their own ROCm runtime" in text and "aws-ofi-rccl" in text
    assert "fix: if torch sees no GPU" in text


def test_validate_takes_system_and_warns_about_the_rocm(tmp_path: Path) -> None:
    path = env_file(tmp_path)
    result = run_cli([ENVBUILD, "validate", "--system", "lumi-g", str(path)],
                     env_extra={"ENVBUILD_CACHE_DIR": str(tmp_path / "store")}, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{path}: ok (pytorch-rocm56, system lumi-g)" in result.stdout
    assert_the_rocm_warning(result.stderr)


def test_validate_refuses_system_for_a_spec(tmp_path: Path) -> None:
    result = run_cli([ENVBUILD, "validate", "--system", "lumi-g", str(REPO / "envs/local-cpu-pytorch.yaml")],
                     env_extra={"ENVBUILD_CACHE_DIR": str(tmp_path / "store")}, timeout=120)
    assert result.returncode == 2 and "--system applies to conda environment files" in result.stderr


def test_validate_reports_a_pip_part_that_cannot_work(tmp_path: Path) -> None:
    path = tmp_path / "cuda.yml"
    path.write_text(COURSE_SHAPED.replace("rocm5.6", "cu121"))
    result = run_cli([ENVBUILD, "validate", "--system", "lumi-g", str(path)],
                     env_extra={"ENVBUILD_CACHE_DIR": str(tmp_path / "store")}, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "is for NVIDIA GPUs; lumi-g has AMD GPUs" in result.stderr


def test_the_dry_run_plans_it_for_lumi_g_with_the_warning(tmp_path: Path) -> None:
    path = env_file(tmp_path)
    result = run_cli([ENVBUILD, "build", "--dry-run", "--system", "lumi-g", "--accept-licenses", str(path), "-o",
                      str(tmp_path / "out.sif")],
                     env_extra={"ENVBUILD_CACHE_DIR": str(tmp_path / "store")}, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert_the_rocm_warning(result.stdout)
    assert "--base-image docker://rocm/dev-ubuntu-22.04:6.2.4-complete" in result.stdout
    assert "torch==2.2.2+rocm5.6" in result.stdout
