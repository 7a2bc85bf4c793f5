"""The base image probe (envbuild.builder.plan.overlayprobe): reading its JSON, running a command after $WITH_CONDA,
and the probe scripts themselves, run for real on this machine without a container: /bin/sh (dash, as on
Debian images) runs PROBE_SHELL against the host's Python, the way `apptainer exec BASE /bin/sh -c ...`
runs it inside a base image."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envbuild.builder.plan.overlayprobe import PROBE_PYTHON, PROBE_SHELL, BaseProbe, in_base, parse_probe
from envbuild.envspec.specmodel import VENV_PREFIX
from envbuild.shared.errors import EnvbuildError

# The interpreter itself, not the test venv's symlink (which would find the venv's pyvenv.cfg).
HOST_PYTHON = os.path.realpath(sys.executable)
HOST_VERSION = ".".join(map(str, sys.version_info[:3]))
# Debian's /bin/sh: no `source`, which is why $WITH_CONDA must run in bash.
POSIX_SHELL = shutil.which("dash") or "/bin/sh"
BASH = shutil.which("bash")

LUMI_PROBE_JSON = {
    "path": "/opt/miniconda3/envs/pytorch/bin/python",
    "why": "the conda env that $WITH_CONDA activates (source /opt/miniconda3/bin/activate pytorch)",
    "activation": "WITH_CONDA",
    "executable": "/opt/miniconda3/envs/pytorch/bin/python",
    "version": "3.12.9",
    "abi": "cpython-312-x86_64-linux-gnu",
    "prefix": "/opt/miniconda3/envs/pytorch",
    "site_dirs": ["/opt/miniconda3/envs/pytorch/lib/python3.12/site-packages"],
    "packages": ["Typing_Extensions==4.12.2", "numpy==1.26.4", "torch==2.6.0+rocm6.2.4"],
    "has_venv": True,
    "machine": "x86_64",
}


# --- parse_probe -----------------------------------------------------------------------------------------


def test_parse_probe_reads_every_field() -> None:
    probe = parse_probe(json.dumps(LUMI_PROBE_JSON), "/cache/probe.json")
    assert probe == BaseProbe(
        python="/opt/miniconda3/envs/pytorch/bin/python", why=LUMI_PROBE_JSON["why"], activation="WITH_CONDA",
        version="3.12.9", abi="cpython-312-x86_64-linux-gnu", prefix="/opt/miniconda3/envs/pytorch",
        site_dirs=("/opt/miniconda3/envs/pytorch/lib/python3.12/site-packages",),
        packages=("Typing_Extensions==4.12.2", "numpy==1.26.4", "torch==2.6.0+rocm6.2.4"), machine="x86_64",
    )
    assert probe.minor == "3.12"
    assert probe.installed() == {"typing-extensions": ("Typing_Extensions", "4.12.2"), "numpy": ("numpy", "1.26.4"),
                                 "torch": ("torch", "2.6.0+rocm6.2.4")}
    assert probe.as_record() == {"path": "/opt/miniconda3/envs/pytorch/bin/python", "version": "3.12.9",
                                 "abi": "cpython-312-x86_64-linux-gnu", "env": "/opt/miniconda3/envs/pytorch",
                                 "activation": "WITH_CONDA", "why": LUMI_PROBE_JSON["why"]}


def test_parse_probe_without_machine_or_has_venv() -> None:
    """Both are optional: a probe file without them still reads (machine "", venv assumed)."""
    data = {key: value for key, value in LUMI_PROBE_JSON.items() if key not in ("machine", "has_venv")}
    assert parse_probe(json.dumps(data), "p.json").machine == ""


@pytest.mark.parametrize("text", [
    "", "{not json", "[1, 2]", '"a string"', "null",
    json.dumps({key: value for key, value in LUMI_PROBE_JSON.items() if key != "version"}),
    json.dumps({**LUMI_PROBE_JSON, "site_dirs": None}),
], ids=["empty", "syntax", "list", "string", "null", "missing-key", "wrong-type"])
def test_parse_probe_refuses_what_the_script_does_not_write(text: str) -> None:
    with pytest.raises(EnvbuildError) as info:
        parse_probe(text, "/cache/envbuild/overlays/base-x/probe-abc.json")
    assert info.value.message.startswith("/cache/envbuild/overlays/base-x/probe-abc.json: unreadable result of the base "
                                         "image probe (")
    assert info.value.hint == "remove the file and build again; report a bug if it comes back"


def test_parse_probe_refuses_a_python_without_venv() -> None:
    with pytest.raises(EnvbuildError) as info:
        parse_probe(json.dumps({**LUMI_PROBE_JSON, "has_venv": False}), "p.json")
    assert info.value.message == ("the base's Python /opt/miniconda3/envs/pytorch/bin/python has no venv module, so no "
                                  "overlay venv can be made with it")
    assert info.value.hint is not None
    assert "overlay: {python: /path/in/image/bin/python}" in info.value.hint and "python3-venv" in info.value.hint


def test_installed_keeps_the_first_of_two_spellings() -> None:
    probe = parse_probe(json.dumps({**LUMI_PROBE_JSON, "packages": ["Foo.Bar==2.0", "foo_bar==1.0"]}), "p.json")
    assert probe.installed() == {"foo-bar": ("Foo.Bar", "2.0")}


# --- in_base ---------------------------------------------------------------------------------------------


def test_in_base_leaves_argv_alone_without_activation() -> None:
    probe = parse_probe(json.dumps({**LUMI_PROBE_JSON, "activation": ""}), "p.json")
    assert in_base(probe, ["/opt/venv/bin/python", "-m", "venv", "/user-software"]) == [
        "/opt/venv/bin/python", "-m", "venv", "/user-software"]


def test_in_base_runs_with_conda_first() -> None:
    probe = parse_probe(json.dumps(LUMI_PROBE_JSON), "p.json")
    assert in_base(probe, ["python", "-c", "print(1)"]) == [
        "bash", "-c", 'eval "$WITH_CONDA" >&2 || exit 3; exec "$@"', "envbuild-activate", "python", "-c", "print(1)"]


@pytest.mark.skipif(BASH is None, reason="needs bash")
def test_in_base_command_runs_after_the_activation_and_stops_when_it_fails(tmp_path: Path) -> None:
    probe = parse_probe(json.dumps(LUMI_PROBE_JSON), "p.json")
    argv = in_base(probe, ["sh", "-c", 'echo "$ACTIVATED:$1"', "sh", "it's one argument"])
    env = {"PATH": os.environ["PATH"], "WITH_CONDA": "export ACTIVATED=yes; echo activating"}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, "yes:it's one argument\n", "activating\n")
    failed = subprocess.run(argv, env={**env, "WITH_CONDA": "false"}, capture_output=True, text=True, check=False)
    assert (failed.returncode, failed.stdout) == (3, "")


# --- the probe scripts, run on this machine --------------------------------------------------------------


def add_distribution(site_dir: Path, name: str, version: str) -> None:
    """A dist-info directory, enough for importlib.metadata to list `name` `version`."""
    info = site_dir / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\n")


def run_probe(tmp_path: Path, override: str = "", **env: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    """PROBE_SHELL run by the POSIX shell with the arguments the plan passes (override, output, PROBE_PYTHON)."""
    out = tmp_path / "probe.json"
    full_env = {"HOME": str(tmp_path), "PYTHONNOUSERSITE": "1", "LC_ALL": "C.UTF-8", **env}
    argv = [POSIX_SHELL, "-c", PROBE_SHELL, "envbuild-probe", override, str(out), PROBE_PYTHON]
    return subprocess.run(argv, env=full_env, capture_output=True, text=True, timeout=60, check=False), out


def link_dir(directory: Path, **links: str) -> Path:
    """`directory` with a symlink NAME -> TARGET for each NAME=TARGET."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, target in links.items():
        (directory / name).symlink_to(target)
    return directory


@pytest.fixture
def site_dirs(tmp_path: Path) -> tuple[Path, Path]:
    """Two site directories (on PYTHONPATH in this order): probe-demo 1.2.3 in the first, shadowed by it an
    older copy spelled Probe_Demo in the second, and only-second 2.0."""
    first, second = tmp_path / "first/site-packages", tmp_path / "second/site-packages"
    add_distribution(first, "probe-demo", "1.2.3")
    add_distribution(second, "Probe_Demo", "0.9")
    add_distribution(second, "only-second", "2.0")
    return first, second


def test_probe_with_an_override_path(tmp_path: Path, site_dirs: tuple[Path, Path]) -> None:
    first, second = site_dirs
    done, out = run_probe(tmp_path, HOST_PYTHON, PATH="/usr/bin:/bin", PYTHONPATH=f"{first}:{second}")
    assert done.returncode == 0, done.stderr
    info = json.loads(out.read_text())
    assert info["path"] == HOST_PYTHON
    assert info["why"] == "overlay.python in the spec"
    assert info["activation"] == ""
    assert info["version"] == HOST_VERSION
    assert info["has_venv"] is True
    assert info["machine"] == os.uname().machine
    assert info["site_dirs"][:2] == [str(first), str(second)]
    assert "probe-demo==1.2.3" in info["packages"] and "only-second==2.0" in info["packages"]
    assert info["packages"] == sorted(info["packages"])
    probe = parse_probe(out.read_text(), str(out))
    assert probe.python == HOST_PYTHON and probe.minor == ".".join(map(str, sys.version_info[:2]))
    assert probe.installed()["probe-demo"] == ("probe-demo", "1.2.3")


def test_probe_lists_only_the_first_distribution_of_a_name_on_sys_path(tmp_path: Path, site_dirs: tuple[Path, Path]) -> None:
    """Probe_Demo 0.9 in the second directory is hidden by probe-demo 1.2.3 in the first: the one imported.
    (Found by this test: names were compared lower-cased only, so both were listed and the sorted list put the
    hidden Probe_Demo first, which BaseProbe.installed() then took.)"""
    first, second = site_dirs
    done, out = run_probe(tmp_path, HOST_PYTHON, PATH="/usr/bin:/bin", PYTHONPATH=f"{first}:{second}")
    assert done.returncode == 0, done.stderr
    packages = json.loads(out.read_text())["packages"]
    assert [line for line in packages if line.lower().replace("_", "-").startswith("probe-demo==")] == ["probe-demo==1.2.3"]


def write_conda_stand_in(tmp_path: Path) -> tuple[Path, Path]:
    """A conda installation as far as $WITH_CONDA uses it: a bash `activate` script that, for an env that exists,
    puts the env's bin/ (holding `python`, a link to the host's) first on PATH and its site-packages on
    PYTHONPATH; and one env, demo. Returns (the activate script, the env)."""
    conda = tmp_path / "miniconda3"
    env = conda / "envs/demo"
    link_dir(env / "bin", python=HOST_PYTHON)
    add_distribution(env / "lib/site-packages", "conda-only", "1.0")
    activate = conda / "bin/activate"
    activate.parent.mkdir(parents=True)
    activate.write_text(f"""\
_env=${{1:-base}}
if [ ! -d "{conda}/envs/$_env" ]; then
    echo "EnvironmentNameNotFound: Could not find conda environment: $_env" >&2
    return 1
fi
export CONDA_PREFIX="{conda}/envs/$_env"
export PATH="$CONDA_PREFIX/bin:$PATH" PYTHONPATH="$CONDA_PREFIX/lib/site-packages"
""")
    return activate, env


@pytest.mark.skipif(BASH is None, reason="needs bash")
def test_probe_runs_with_conda_in_bash_from_a_posix_shell(tmp_path: Path) -> None:
    activate, env = write_conda_stand_in(tmp_path)
    with_conda = f"source {activate} demo"  # `source`: bash only
    tools = link_dir(tmp_path / "tools", bash=str(BASH))
    done, out = run_probe(tmp_path, PATH=f"{tools}:/usr/bin:/bin", WITH_CONDA=with_conda)
    assert done.returncode == 0, done.stderr
    info = json.loads(out.read_text())
    assert info["path"] == f"{env}/bin/python"
    assert info["why"] == f"the conda env that $WITH_CONDA activates ({with_conda})"
    assert info["activation"] == "WITH_CONDA"
    assert info["version"] == HOST_VERSION
    # the Python ran after the activation too (its PYTHONPATH is set only by activate)
    assert info["site_dirs"][0] == f"{env}/lib/site-packages"
    assert "conda-only==1.0" in info["packages"]
    probe = parse_probe(out.read_text(), str(out))
    assert (probe.activation, probe.python) == ("WITH_CONDA", f"{env}/bin/python")


@pytest.mark.skipif(BASH is None, reason="needs bash")
def test_probe_stops_with_exit_3_when_with_conda_fails(tmp_path: Path) -> None:
    activate, _ = write_conda_stand_in(tmp_path)
    with_conda = f"source {activate} no-such-env"
    tools = link_dir(tmp_path / "tools", bash=str(BASH))
    done, out = run_probe(tmp_path, PATH=f"{tools}:/usr/bin:/bin", WITH_CONDA=with_conda)
    assert done.returncode == 3
    assert f"the image's $WITH_CONDA ({with_conda}) failed to activate its conda env" in done.stderr
    assert "EnvironmentNameNotFound: Could not find conda environment: no-such-env" in done.stderr
    assert not out.exists()


@pytest.mark.skipif(BASH is None, reason="needs bash")
def test_probe_stops_with_exit_3_when_with_conda_leaves_no_python(tmp_path: Path) -> None:
    tools = link_dir(tmp_path / "tools", bash=str(BASH))  # no python anywhere on this PATH
    done, out = run_probe(tmp_path, PATH=str(tools), WITH_CONDA="export CONDA_PREFIX=/nowhere")
    assert done.returncode == 3
    assert "the image's $WITH_CONDA (export CONDA_PREFIX=/nowhere) failed to activate its conda env" in done.stderr
    assert not out.exists()


def test_probe_stops_when_with_conda_is_set_but_bash_is_missing(tmp_path: Path) -> None:
    done, out = run_probe(tmp_path, PATH=str(link_dir(tmp_path / "empty")), WITH_CONDA="source /x/activate env")
    assert done.returncode == 3
    assert "the image sets WITH_CONDA=source /x/activate env but has no bash to run it" in done.stderr
    assert not out.exists()


def test_probe_stops_when_the_override_is_not_executable(tmp_path: Path) -> None:
    done, out = run_probe(tmp_path, "/nonexistent/bin/python", PATH="/usr/bin:/bin")
    assert done.returncode == 3
    assert "/nonexistent/bin/python is not an executable file in the image" in done.stderr
    assert not out.exists()


needs_no_site_venvs = pytest.mark.skipif(
    os.path.exists("/opt/venv/bin/python") or os.path.exists(f"{VENV_PREFIX}/bin/python"),
    reason="this machine has /opt/venv or envbuild's venv, which the probe prefers to python3 on PATH")


@needs_no_site_venvs
def test_probe_falls_back_to_python3_on_path(tmp_path: Path) -> None:
    host_bin = link_dir(tmp_path / "bin", python3=HOST_PYTHON)
    done, out = run_probe(tmp_path, PATH=f"{host_bin}:/usr/bin:/bin")
    assert done.returncode == 0, done.stderr
    info = json.loads(out.read_text())
    assert (info["path"], info["why"], info["activation"]) == (f"{host_bin}/python3", "python3 on the image's PATH", "")


@needs_no_site_venvs
def test_probe_without_python3_on_path(tmp_path: Path) -> None:
    done, out = run_probe(tmp_path, PATH=str(link_dir(tmp_path / "empty")))
    assert done.returncode == 3
    assert "no python3 on the image's PATH" in done.stderr
    assert not out.exists()


def test_probe_script_arguments_with_spaces_and_quotes_survive(tmp_path: Path) -> None:
    """The plan passes the output path and PROBE_PYTHON as arguments: nothing in them is re-split by the shell."""
    odd = tmp_path / "a dir with 'quotes' and spaces"
    odd.mkdir()
    done, out = run_probe(odd, HOST_PYTHON, PATH="/usr/bin:/bin")
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text())["path"] == HOST_PYTHON
