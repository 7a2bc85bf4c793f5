"""envrun as a user runs it (bin/envrun in a subprocess), for what needs no container runtime: the
refusals (exit 2, what is wrong and a `fix:` line) and the config file's binds and env in the
--dry-run script. The launches themselves are tested under Slurm in tests/e2e/test_ddp.py."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli

ENVRUN = str(REPO / "bin" / "envrun")


@pytest.fixture
def image(tmp_path: Path) -> Path:
    """envrun only checks that the image exists before a dry run; the file is never opened."""
    path = tmp_path / "env.sif"
    path.write_bytes(b"not opened by --dry-run\n")
    return path


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """No config file, no image from the environment, no Slurm job: the same on every machine."""
    return {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": "", "ENVRUN_CONFIG": "", "ENVRUN_IMAGE": "",
            "ENVBUILD_SYSTEM": "local", "SLURM_JOB_ID": "", "SLURM_JOBID": ""}


def envrun(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return run_cli([ENVRUN, *args], env_extra=env, timeout=60)


def refused(result: subprocess.CompletedProcess[str]) -> list[str]:
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == "", "a refusal runs nothing and prints no script"
    return result.stderr.splitlines()


def test_no_image_given(env: dict[str, str]) -> None:
    assert refused(envrun(["--dry-run", "python", "-V"], env)) == [
        "error: no image given", "  fix: pass --image IMG.sif or set ENVRUN_IMAGE"]


def test_missing_image_file(tmp_path: Path, env: dict[str, str]) -> None:
    missing = tmp_path / "absent.sif"
    assert refused(envrun(["--image", str(missing), "--dry-run", "python", "-V"], env)) == [
        f"error: image {missing} does not exist",
        "  fix: build it with `envbuild build SPEC -o IMG.sif` or fix the path"]


def test_missing_image_named_by_envrun_image(tmp_path: Path, env: dict[str, str]) -> None:
    missing = tmp_path / "from-env.sif"
    lines = refused(envrun(["--dry-run", "python", "-V"], {**env, "ENVRUN_IMAGE": str(missing)}))
    assert lines[0] == f"error: image {missing} does not exist"


def test_missing_bind_source(tmp_path: Path, image: Path, env: dict[str, str]) -> None:
    source = tmp_path / "no-such-data"
    assert refused(envrun(["--image", str(image), "--bind", f"{source}:/data", "--dry-run", "python", "-V"], env)) == [
        f"error: bind source {source} does not exist (--bind {source}:/data)",
        "  fix: create the directory, or fix the path given to --bind (or in the envrun config)"]


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "envrun.yaml"
    path.write_text(text)
    return path


def test_config_binds_and_env_reach_the_launch(tmp_path: Path, image: Path, env: dict[str, str]) -> None:
    data, lumi_only = tmp_path / "data", tmp_path / "flash"
    data.mkdir()
    lumi_only.mkdir()
    config = write_config(tmp_path, f"binds: [{data}]\nenv:\n  HF_HOME: {data}/hf\n"
                                    f"systems:\n  lumi-g:\n    binds: [{lumi_only}]\n    env: {{TORCH_HOME: /t}}\n")
    result = envrun(["--image", str(image), "--dry-run", "python", "train.py"], {**env, "ENVRUN_CONFIG": str(config)})
    assert result.returncode == 0, result.stderr
    script = result.stdout
    assert f"export HF_HOME={data}/hf\n" in script
    assert f"--bind {data} " in script
    assert str(lumi_only) not in script and "TORCH_HOME" not in script, "another system's settings leaked in"
    without = envrun(["--image", str(image), "--dry-run", "python", "train.py"], env)
    assert without.returncode == 0 and "HF_HOME" not in without.stdout and f"--bind {data} " not in without.stdout


def test_config_bind_that_does_not_exist_names_the_config(tmp_path: Path, image: Path, env: dict[str, str]) -> None:
    config = write_config(tmp_path, f"binds: [{tmp_path}/gone]\n")
    lines = refused(envrun(["--image", str(image), "--dry-run", "python", "-V"], {**env, "ENVRUN_CONFIG": str(config)}))
    assert lines == [f"error: bind source {tmp_path}/gone does not exist (binds in the envrun config {config})",
                     "  fix: create the directory, or fix the path given to --bind (or in the envrun config)"]


@pytest.mark.parametrize(("text", "located", "fix"), [
    ("env:\n  HF_HOME: [a, b]\n", "2:3: env.HF_HOME: Input should be a valid string", "see `envrun --help` for the config format"),
    ("binds: [/a\n", "2:1: envrun config: YAML syntax: expected ',' or ']', but got '<stream end>'",
     "check indentation and quoting near this line (values with ':' or '#' need quotes)"),
    ("env: {}\nenv: {}\n", "2:1: envrun config: YAML syntax: duplicate key 'env' (key 'env' first given on line 1)",
     "keep one of the two: the later one would silently replace the first"),
])
def test_broken_config_is_a_located_error(tmp_path: Path, image: Path, env: dict[str, str], text: str, located: str,
                                          fix: str) -> None:
    config = write_config(tmp_path, text)
    lines = refused(envrun(["--image", str(image), "--dry-run", "python", "-V"], {**env, "ENVRUN_CONFIG": str(config)}))
    assert lines == [f"error: {config}:{located}", f"  fix: {fix}"]


def test_envrun_config_naming_a_missing_file(tmp_path: Path, image: Path, env: dict[str, str]) -> None:
    lines = refused(envrun(["--image", str(image), "--dry-run", "python", "-V"],
                           {**env, "ENVRUN_CONFIG": str(tmp_path / "nope.yaml")}))
    assert lines == [f"error: ENVRUN_CONFIG names {tmp_path / 'nope.yaml'}, which does not exist",
                     "  fix: fix or unset ENVRUN_CONFIG"]
