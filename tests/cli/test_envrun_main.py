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


def envrun(args: list[str], env: dict[str, str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return run_cli([ENVRUN, *args], env_extra=env, timeout=60, cwd=cwd)


def refused(result: subprocess.CompletedProcess[str]) -> list[str]:
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == "", "a refusal runs nothing and prints no script"
    return result.stderr.splitlines()


def test_no_image_anywhere_lists_every_place_looked_at(tmp_path: Path, env: dict[str, str]) -> None:
    work = tmp_path / "project" / "sub"
    work.mkdir(parents=True)
    lines = refused(envrun(["--dry-run", "python", "-V"], env, cwd=work))
    assert lines[:3] == ["error: no image to run in; envrun looked at:", "  --image / --overlay: not given",
                         "  $ENVRUN_IMAGE, $ENVRUN_OVERLAYS: not set"]
    assert f"  {work}/envrun.yaml: absent" in lines and f"  {tmp_path}/project/envrun.yaml: absent" in lines
    assert "  /envrun.yaml: absent" in lines and f"  {work}/*.sif: none" in lines
    assert lines[-1].startswith("  fix: pass --image IMG.sif (and --overlay ENV.sqsh), set ENVRUN_IMAGE, put `image: IMG.sif`")


def test_missing_image_file(tmp_path: Path, env: dict[str, str]) -> None:
    missing = tmp_path / "absent.sif"
    assert refused(envrun(["--image", str(missing), "--dry-run", "python", "-V"], env)) == [
        f"error: image {missing} does not exist",
        "  fix: build it with `envbuild build SPEC -o IMG.sif` or fix the path"]


def test_missing_image_named_by_envrun_image(tmp_path: Path, env: dict[str, str]) -> None:
    missing = tmp_path / "from-env.sif"
    lines = refused(envrun(["--dry-run", "python", "-V"], {**env, "ENVRUN_IMAGE": str(missing)}))
    assert lines[0] == f"error: image {missing} does not exist (named by $ENVRUN_IMAGE)"


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
    assert f"export APPTAINERENV_HF_HOME={data}/hf\n" in script, "the config's env: in the container only"
    assert "export HF_HOME=" not in script
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


# -- environments found without --image, venv overlays (issue 11) --------------------------------------


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project directory: base.sif (a real SIF) and env.sqsh (an overlay built for it) in build/."""
    from tests.support.envrun_overlays import FIXTURE_SIF, base_record, make_overlay

    build = tmp_path / "proj" / "build"
    build.mkdir(parents=True)
    base = build / "base.sif"
    base.write_bytes(FIXTURE_SIF.read_bytes())
    make_overlay(build, "env", base_record(base))
    return tmp_path / "proj"


def test_envrun_srun_torchrun_works_verbatim_in_a_project(project: Path, env: dict[str, str]) -> None:
    data = project / "data"
    data.mkdir()
    (project / "envrun.yaml").write_text("image: build/base.sif  # set by envbuild build\noverlays: [build/env.sqsh]\n"
                                         "binds: [data]\nenv: {HF_HOME: /from/project}\n")
    (project / "src").mkdir()
    result = envrun(["--explain", "--dry-run", "srun", "torchrun", "train.py"], env, cwd=project / "src")
    assert result.returncode == 0, result.stderr
    script = result.stdout
    assert f"--bind {data} --bind {project}/build/env.sqsh:/user-software:image-src=/,ro --pwd {project}/src " \
           f"{project}/build/base.sif /bin/sh -c" in script
    assert "' python -m torch.distributed.run --nproc-per-node=" in script
    assert f"# image and overlays from {project}/envrun.yaml\n" in script
    assert f"# overlay {project}/build/env.sqsh: built for this image (same SIF id " in script
    assert "export APPTAINERENV_HF_HOME=/from/project\n" in script


def test_overlay_options_and_the_project_env_winning(project: Path, tmp_path: Path, env: dict[str, str]) -> None:
    config = tmp_path / "user.yaml"
    config.write_text("env: {HF_HOME: /from/user, TORCH_HOME: /t}\n")
    (project / "envrun.yaml").write_text("env: {HF_HOME: /from/project}\n")
    build = project / "build"
    result = envrun(["--image", str(build / "base.sif"), f"--overlay={build / 'env.sqsh'}", "--dry-run", "python", "x.py"],
                    {**env, "ENVRUN_CONFIG": str(config)}, cwd=project)
    assert result.returncode == 0, result.stderr
    assert f"--bind {build}/env.sqsh:/user-software:image-src=/,ro" in result.stdout
    assert "export APPTAINERENV_HF_HOME=/from/project\n" in result.stdout
    assert "export APPTAINERENV_TORCH_HOME=/t\n" in result.stdout


def test_an_overlay_on_another_base_is_refused_or_forced(project: Path, image: Path, env: dict[str, str]) -> None:
    overlay = project / "build" / "env.sqsh"
    (project / "other.sif").write_bytes((project / "build" / "base.sif").read_bytes()[:48] + b"\x01" * 16
                                        + (project / "build" / "base.sif").read_bytes()[64:])
    args = ["--image", str(project / "other.sif"), "--overlay", str(overlay), "--dry-run", "python", "x.py"]
    lines = refused(envrun(args, env))
    assert lines[0].startswith(f"error: overlay {overlay} was built for {project}/build/base.sif (sha256:")
    assert f"; this image is {project}/other.sif (sha256:" in lines[0]
    assert lines[1].startswith("  fix: rebuild the overlay for this base: `envbuild build SPEC` with "
                               f"`base: localimage:{project}/other.sif`")
    forced = envrun(["--force-overlay", *args], env)
    assert forced.returncode == 0, forced.stderr
    assert f"# warning: overlay {overlay} was built for {project}/build/base.sif" in forced.stdout
    not_overlay = refused(envrun(["--image", str(image), "--overlay", str(image), "--dry-run", "python", "x.py"], env))
    assert not_overlay[0] == f"error: overlay {image}: not a squashfs file (an overlay starts with 'hsqs')"


def test_only_an_overlay_runs_on_the_base_it_was_built_for(project: Path, env: dict[str, str]) -> None:
    result = envrun(["--overlay", "build/env.sqsh", "--dry-run", "python", "x.py"], env, cwd=project)
    assert result.returncode == 0, result.stderr
    assert f" {project}/build/base.sif /bin/sh -c" in result.stdout


def test_the_one_sif_in_the_working_directory(tmp_path: Path, env: dict[str, str]) -> None:
    work = tmp_path / "w"
    work.mkdir()
    (work / "only.sif").write_bytes(b"x")
    result = envrun(["--dry-run", "python", "x.py"], env, cwd=work)
    assert result.returncode == 0, result.stderr
    assert f" {work}/only.sif /bin/sh -c" in result.stdout and f"# image from the only .sif in {work}\n" in result.stdout


@pytest.mark.parametrize("argv", [
    ["--overlay", "a.sqsh", "--overlay=b.sqsh", "--force-overlay", "-B/d", "srun", "torchrun", "--overlay", "x.py"],
    ["--image", "i.sif", "--", "python", "-V"],
])
def test_the_fast_option_loop_agrees_with_argparse(argv: list[str]) -> None:
    """The loop reads what the help describes; argparse (for --help and what the loop cannot decide)
    gives the same options and leaves the command, envrun-like words included, untouched."""
    from envbuild.cli.envrun_main import build_parser, parse_options

    fast = parse_options(argv)
    assert fast is not None
    slow = build_parser().parse_args(argv)
    for name in ("image", "overlays", "force_overlay", "binds", "system", "dry_run", "explain"):
        assert getattr(fast, name) == getattr(slow, name), name
    assert slow.command in (fast.command, ["--", *fast.command])  # argparse keeps a leading "--" in REMAINDER
    assert parse_options(["--over", "a.sqsh", "python"]) is None, "abbreviations are argparse's"
