"""Conda builds through the real cotainr (2025.7.1, installed with envbuild).

Here cotainr cannot download Miniforge (GitHub) or conda packages (conda-forge), so: a base-image-only
cotainr build runs end to end (the base is the debootstrap:bookworm root filesystem of the shared test
store, standing in for a site base image), and envbuild's packages / verify / envrun read the result; a
conda env file like the LUMI course's fails at once, naming what it could not reach, with its env file
kept next to the image."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli

pytestmark = pytest.mark.apptainer
ENVBUILD, ENVRUN = str(REPO / "bin/envbuild"), str(REPO / "bin/envrun")
COURSE_LIKE = REPO / "tests/fixtures/conda/lumi-course-like.yml"


@pytest.fixture(scope="module")
def cotainr_image(tmp_path_factory: pytest.TempPathFactory, debootstrap_base: Path, build_cache: Path) -> Path:
    work = tmp_path_factory.mktemp("cotainr")
    (work / "base-only.yaml").write_text(
        "name: base-only\n"
        f"base: localimage:{debootstrap_base}\n"
        "conda: {}   # no conda environment: cotainr takes the base image only\n"
        "env:\n  GREETING: from-the-spec\n"
        "tests:\n  - python3 -c \"import os; assert os.environ['GREETING'] == 'from-the-spec'\"\n")
    result = run_cli([ENVBUILD, "build", "base-only.yaml", "-o", "base-only.sif"], cwd=work,
                     env_extra={"ENVBUILD_CACHE_DIR": str(build_cache)}, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    assert "with cotainr 2025.7.1" in result.stderr and "build the base image with cotainr" in result.stderr
    return work / "base-only.sif"


def test_the_image_carries_envbuild_and_cotainr_metadata(cotainr_image: Path) -> None:
    labels = json.loads(subprocess.run(["apptainer", "inspect", "--json", "--labels", str(cotainr_image)],
                                       capture_output=True, text=True, check=True).stdout)["data"]["attributes"]["labels"]
    assert labels["cotainr.version"] == "2025.7.1"  # cotainr's own labels are kept
    assert labels["org.envbuild.installer"] == "cotainr 2025.7.1" and labels["org.envbuild.spec-name"] == "base-only"
    assert labels["org.envbuild.base-digest"].startswith("sha256:")
    log = cotainr_image.with_name("base-only.sif.build.log").read_text()
    assert "Creating Singularity Sandbox" in log and "\x1b[" not in log  # cotainr's output, without its spinner codes


def test_packages_and_verify_read_it(cotainr_image: Path) -> None:
    spec = cotainr_image.with_name("base-only.yaml")
    verified = run_cli([ENVBUILD, "verify", str(cotainr_image), str(spec)])
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "cotainr 2025.7.1 added no Python environment" in verified.stdout
    assert "is the spec the image was built from" in verified.stdout
    listed = run_cli([ENVBUILD, "packages", str(cotainr_image), "--json"])
    assert listed.returncode == 0, listed.stderr
    record = run_cli([ENVBUILD, "inspect", str(cotainr_image)])
    assert "GREETING=from-the-spec" in record.stdout


def test_envrun_runs_in_it(cotainr_image: Path) -> None:
    result = run_cli([ENVRUN, "--image", str(cotainr_image), "python3", "-c", "import os; print(os.environ['GREETING'])"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "from-the-spec"


def test_a_rebuild_of_the_unchanged_spec_is_up_to_date(cotainr_image: Path, build_cache: Path) -> None:
    result = run_cli([ENVBUILD, "build", "base-only.yaml", "-o", "base-only.sif"], cwd=cotainr_image.parent,
                     env_extra={"ENVBUILD_CACHE_DIR": str(build_cache)})
    assert result.returncode == 0 and "is up to date" in result.stderr, result.stderr


def test_a_course_env_file_fails_fast_naming_what_it_cannot_reach(tmp_path: Path) -> None:
    started = time.monotonic()
    result = run_cli([ENVBUILD, "build", str(COURSE_LIKE), "--system", "lumi-g", "--accept-licenses",
                      "-o", str(tmp_path / "course.sif")], env_extra={"ENVBUILD_CACHE_DIR": str(tmp_path / "store")}, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert time.monotonic() - started < 30  # the check has a 5 s timeout; cotainr alone would retry and wait
    err = result.stderr
    assert "cannot reach" in err and "before downloading anything" in err
    assert "Miniforge3-Linux-x86_64.sh (the Miniforge installer cotainr downloads)" in err
    assert "https://conda.anaconda.org/conda-forge/ (the conda channel conda-forge)" in err
    assert "CONDA_CHANNEL_ALIAS" in err and "python.packages" in err  # the ways on: a mirror, a pip-only spec
    kept = tmp_path / "course.conda-env.yml"
    assert kept.is_file() and "torch==2.5.1+rocm6.2" in kept.read_text()
    assert not (tmp_path / "course.sif").exists()


def test_dry_run_prints_the_env_file_and_the_cotainr_command(tmp_path: Path) -> None:
    result = run_cli([ENVBUILD, "build", str(COURSE_LIKE), "--system", "lumi-g", "--accept-licenses", "--dry-run",
                      "-o", str(tmp_path / "course.sif")])
    assert result.returncode == 0, result.stderr
    assert "#     - torch==2.5.1+rocm6.2" in result.stdout
    assert ("-m cotainr build" in result.stdout and "--base-image docker://rocm/dev-ubuntu-22.04:6.2.4-complete" in result.stdout
            and f"--conda-env {tmp_path}/course.conda-env.yml --accept-licenses" in result.stdout)
    assert not (tmp_path / "course.conda-env.yml").exists()  # a dry run writes nothing


def test_a_pip_part_that_does_not_fit_is_reported_before_anything_runs(tmp_path: Path) -> None:
    env = tmp_path / "env.yml"
    env.write_text("name: e\ndependencies:\n  - python=3.12\n  - pip:\n    - --extra-index-url "
                   "https://download.pytorch.org/whl/cu126\n    - torch==2.7.0+cu126\n")
    result = run_cli([ENVBUILD, "build", str(env), "--system", "lumi-g", "-o", str(tmp_path / "e.sif")],
                     env_extra={"ENVBUILD_CACHE_DIR": str(tmp_path / "store")})
    assert result.returncode == 1 and "cu126 is for NVIDIA GPUs; lumi-g has AMD GPUs" in result.stderr, result.stderr
    assert not (tmp_path / "e.conda-env.yml").exists()


def test_without_accepting_the_miniforge_license_the_build_stops_before_cotainr_asks(tmp_path: Path) -> None:
    """cotainr would ask on a terminal that envbuild does not give it (a batch job has none either)."""
    result = run_cli([ENVBUILD, "build", str(COURSE_LIKE), "--system", "lumi-g", "-o", str(tmp_path / "course.sif")],
                     env_extra={"ENVBUILD_CACHE_DIR": str(tmp_path / "store")})
    assert result.returncode == 2, result.stderr
    assert "miniforge/blob/main/LICENSE" in result.stderr and "accept_licenses: true" in result.stderr
    assert not (tmp_path / "store" / "work").exists() or not any((tmp_path / "store" / "work").iterdir())
