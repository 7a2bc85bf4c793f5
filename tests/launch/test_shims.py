"""The container shim run for real by /bin/sh (dash on Debian) and bash, no container needed: $WITH_CONDA
activates through `source` under bash, a failing activation stops with a message instead of running the
program in the wrong Python, no $WITH_CONDA runs the program directly, the overlays come first on PATH,
and the program's arguments arrive as the same argv words."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envbuild.host.buildhost import Runtime
from envbuild.launch.launchplan import LaunchRequest, plan_launch
from envbuild.launch.shims import sh_quote
from envbuild.recipes.loadrecipe import load_recipe

# Words a shell would mangle if it parsed them again.
TRICKY_ARGS = ["--lr", "3e-4", "two words", "it's", '"quoted"', "$HOME", "*", "a\nb", "", "-c", "; exit 3"]

ACTIVATE = """\
# a conda-like activate script: bash's `source FILE ARGS` gives it ARGS as its positional parameters
export ACTIVATE_ARGS="$#:$*"
if [ "${1:-base}" != pytorch ] && [ "${1:-base}" != base ]; then
    echo "EnvironmentNameNotFound: Could not find conda environment: $1" >&2
    return 1
fi
export CONDA_PREFIX=/opt/miniconda3/envs/${1:-base}
export PATH="$CONDA_PREFIX/bin:$PATH"
"""

SHOW = f"""#!{sys.executable}
import json, os, sys
print(json.dumps({{"argv": sys.argv[1:], "env": {{k: os.environ.get(k) for k in
    ("CONDA_PREFIX", "ACTIVATE_ARGS", "PATH", "VIRTUAL_ENV")}}}}))
"""


def container_shim(overlays: tuple[tuple[str, str], ...] = ()) -> list[str]:
    """The shim words of a real plan: /bin/sh -c BOOT envrun-task BODY."""
    plan = plan_launch(LaunchRequest(command=("show",), image="/img/env.sif", recipe=load_recipe("local"),
                                     runtime=Runtime("/usr/bin/apptainer", "apptainer"), cwd="/w", overlays=overlays))
    argv = list(plan.argv)
    start = argv.index("/img/env.sif") + 1
    assert argv[start : start + 2] == ["/bin/sh", "-c"] and argv[start + 3] == "envrun-task"
    return argv[start : start + 5]


@pytest.fixture
def tools(tmp_path: Path) -> Path:
    """A bin/ with the fake program `show` and no bash: PATH decides whether the shim finds bash."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "show").write_text(SHOW)
    (bin_dir / "show").chmod(0o755)
    (tmp_path / "activate").write_text(ACTIVATE)
    return tmp_path


def run_shim(tools: Path, with_conda: str | None, *, bash: bool = True, overlays: tuple[tuple[str, str], ...] = (),
             args: list[str] = TRICKY_ARGS) -> subprocess.CompletedProcess[str]:
    path = str(tools / "bin")
    if bash:
        path += ":" + os.path.dirname(shutil.which("bash") or "/bin/bash")
    env = {"PATH": path}
    if with_conda is not None:
        env["WITH_CONDA"] = with_conda
    return subprocess.run([*container_shim(overlays), "show", *args], capture_output=True, text=True, env=env, timeout=30)


def shown(result: subprocess.CompletedProcess[str]) -> dict:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_bin_sh_is_the_shell_that_lacks_source() -> None:
    """The case this shim exists for: on Debian /bin/sh is dash, where `source` does not exist."""
    result = subprocess.run(["/bin/sh", "-c", 'eval "source /dev/null"'], capture_output=True, text=True)
    if os.path.realpath("/bin/sh").endswith("dash"):
        assert result.returncode != 0 and "source: not found" in result.stderr


def test_with_conda_source_activates_under_bash(tools: Path) -> None:
    got = shown(run_shim(tools, f"source {sh_quote(str(tools / 'activate'))} pytorch"))
    assert got["env"]["CONDA_PREFIX"] == "/opt/miniconda3/envs/pytorch"
    assert got["env"]["ACTIVATE_ARGS"] == "1:pytorch"
    assert got["argv"] == TRICKY_ARGS


def test_activate_without_arguments_does_not_see_the_programs(tools: Path) -> None:
    got = shown(run_shim(tools, f"source {tools / 'activate'}"))
    assert got["env"]["ACTIVATE_ARGS"] == "0:" and got["env"]["CONDA_PREFIX"] == "/opt/miniconda3/envs/base"
    assert got["argv"] == TRICKY_ARGS


def test_failing_activation_stops_with_the_reason_and_a_fix(tools: Path) -> None:
    result = run_shim(tools, f"source {tools / 'activate'} pytroch")
    assert result.returncode == 1 and result.stdout == "", "the program must not run"
    lines = result.stderr.splitlines()
    assert "EnvironmentNameNotFound" in lines[0]
    assert lines[1] == (f"envrun: could not activate the image's environment: WITH_CONDA=source {tools / 'activate'} "
                        "pytroch failed in bash (exit status 1)")
    assert lines[2] == "envrun: stopping here instead of running the program with the image's other Python"
    assert lines[3].startswith("envrun: fix: check that the environment it activates exists in the image, or set "
                               "APPTAINERENV_WITH_CONDA on the host")


def test_with_conda_in_an_image_without_bash_says_so(tools: Path) -> None:
    result = run_shim(tools, f"source {tools / 'activate'} pytorch", bash=False)
    assert result.returncode == 1 and result.stdout == ""
    assert "failed in /bin/sh, as this image has no bash (exit status 127)" in result.stderr
    assert "fix: make it a command /bin/sh understands (. instead of source)" in result.stderr


def test_a_posix_with_conda_works_without_bash(tools: Path) -> None:
    got = shown(run_shim(tools, f". {tools / 'activate'}", bash=False))
    assert got["env"]["CONDA_PREFIX"] == "/opt/miniconda3/envs/base" and got["argv"] == TRICKY_ARGS


@pytest.mark.parametrize("bash", [True, False])
def test_without_with_conda_the_program_runs_directly(tools: Path, bash: bool) -> None:
    got = shown(run_shim(tools, None, bash=bash))
    assert got["argv"] == TRICKY_ARGS and got["env"]["CONDA_PREFIX"] is None
    assert shown(run_shim(tools, "", bash=bash))["argv"] == TRICKY_ARGS, "an empty WITH_CONDA means none"


def test_overlays_go_before_the_activated_environment_on_path(tools: Path) -> None:
    overlays = (("/p/env.sqsh", "/user-software"), ("/p/dev.sqsh", "/user-dev"))
    got = shown(run_shim(tools, f"source {tools / 'activate'} pytorch", overlays=overlays))
    path = got["env"]["PATH"].split(":")
    assert path[:3] == ["/user-dev/bin", "/user-software/bin", "/opt/miniconda3/envs/pytorch/bin"]
    assert got["env"]["VIRTUAL_ENV"] == "/user-dev"
    got = shown(run_shim(tools, None, bash=False, overlays=overlays[:1], args=["x"]))
    assert got["env"]["PATH"].split(":")[0] == "/user-software/bin" and got["env"]["VIRTUAL_ENV"] == "/user-software"


@pytest.mark.parametrize("text", ["plain", "two words", "it's", "", "a'b\"c$d", "/user software"])
def test_sh_quote_is_one_word(text: str) -> None:
    assert subprocess.run(["/bin/sh", "-c", f"printf %s {sh_quote(text)}"], capture_output=True, text=True).stdout == text
