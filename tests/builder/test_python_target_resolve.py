"""The lock of a spec whose packages go into the base's Python: pip, run by that Python inside the base's
tree, reports what it would add, the base's torch family and the old pins as constraints (the overlay lock's
resolver, without the scratch venv where nothing is made)."""

from __future__ import annotations

from envbuild.builder.plan.actions import Run, WriteFile
from envbuild.builder.plan.overlayplan import plan_resolve_in_base
from tests.builder.test_overlayplan import LUMI_VENV_PROBE
from tests.builder.test_plan import target_spec_file
from tests.support.plan_fixtures import fixed_request


def test_a_base_target_resolves_with_the_bases_own_python(tmp_path) -> None:
    request = fixed_request(target_spec_file(tmp_path, "base"))
    _, steps = plan_resolve_in_base(request, LUMI_VENV_PROBE, ("six==1.17.0",), "/logs/report.json",
                                    image="/cache/bases/b/rootfs", venv_mount=None)
    runs = [a for step in steps for a in step.actions if isinstance(a, Run)]
    assert len(runs) == 1 and "/cache/bases/b/rootfs" in runs[0].argv
    argv = runs[0].argv[runs[0].argv.index("/cache/bases/b/rootfs") + 1:]
    assert argv[:4] == ("/opt/venv/bin/python", "-m", "pip", "install")
    assert "--no-user" in argv and "--dry-run" in argv and "-m venv" not in " ".join(argv)
    assert any(key.endswith("PIP_BREAK_SYSTEM_PACKAGES") for key, _ in runs[0].env)
    constraints = next(a.content for step in steps for a in step.actions
                       if isinstance(a, WriteFile) and a.path.endswith("constraints.txt"))
    assert constraints == "torch==2.7.1+rocm6.4.1\ntriton==3.3.1\nsix==1.17.0\n"  # the family as the base has it


def test_a_venv_over_the_base_resolves_in_a_scratch_venv(tmp_path) -> None:
    request = fixed_request(target_spec_file(tmp_path, "venv-over-base"))
    _, steps = plan_resolve_in_base(request, LUMI_VENV_PROBE, (), "/logs/report.json", image="/cache/bases/b/rootfs",
                                    venv_mount="/opt/envbuild/venv")
    shown = [" ".join(a.argv) for step in steps for a in step.actions if isinstance(a, Run)]
    assert any("-m venv --system-site-packages --without-pip /opt/envbuild/venv" in run for run in shown)
    assert any("/opt/envbuild/venv/bin/python -m pip install" in run for run in shown)


def test_a_base_without_python_stops_with_what_is_missing_and_the_fix(tmp_path) -> None:
    """The lookup the plan runs first in the base's own environment, here in a shell whose PATH has no Python."""
    import subprocess
    from pathlib import Path

    from envbuild.builder.plan.pythontarget import locate_base_python
    from envbuild.envspec.loadspec import load_spec

    python = load_spec(Path(target_spec_file(tmp_path, "base")), check_host=False).spec.python
    empty = tmp_path / "bin"
    empty.mkdir()
    ran = subprocess.run(["/bin/sh", "-ec", locate_base_python(python) + '\necho "found $py"'], capture_output=True,
                         text=True, env={"PATH": str(empty)}, timeout=30)
    assert ran.returncode == 3 and "found" not in ran.stdout
    assert f"the base has no python3 or python on its PATH ({empty})" in ran.stderr
    assert "fix: write python.target: envbuild-venv" in ran.stderr


def test_the_bases_torch_is_kept_unless_the_spec_asks_for_another() -> None:
    from envbuild.builder.sessions.imagelock import _asks_for_another_torch

    assert not _asks_for_another_torch(["six", "torch>=2.7"], LUMI_VENV_PROBE)  # the base's 2.7.1 meets it
    assert not _asks_for_another_torch(["torchvision"], LUMI_VENV_PROBE)  # not in the base: added against its torch
    assert _asks_for_another_torch(["torch==2.8.0"], LUMI_VENV_PROBE)


def _lumi_conda_stand_in(tmp_path):
    """A tree in the layout of LUMI's older PyTorch images: python3 on the PATH is the system's, the framework's
    Python is a conda env that $WITH_CONDA (`source /opt/miniconda3/bin/activate pytorch`) puts first. The env's
    python3 is this Python (the probe runs it), the system's one a script that must not be chosen."""
    import os
    import sys

    env_bin = tmp_path / "opt/miniconda3/envs/pytorch/bin"
    system_bin = tmp_path / "usr/bin"
    for directory in (env_bin, system_bin, tmp_path / "opt/miniconda3/bin"):
        directory.mkdir(parents=True)
    for name in ("python3", "python"):
        os.symlink(sys.executable, env_bin / name)
    (system_bin / "python3").write_text("#!/bin/sh\necho 'the system python3 was run' >&2; exit 9\n")
    (system_bin / "python3").chmod(0o755)
    activate = tmp_path / "opt/miniconda3/bin/activate"
    activate.write_text(f'[ "$1" = pytorch ] || {{ echo "no env $1" >&2; return 1; }}\n'
                        f'echo "(pytorch) activated"\nexport PATH={env_bin}:$PATH CONDA_PREFIX={env_bin.parent}\n')
    return {"PATH": f"{system_bin}:/usr/bin:/bin", "WITH_CONDA": f"source {activate} pytorch"}, env_bin


def test_a_base_target_finds_the_python_with_conda_gives_as_its_users_do(tmp_path) -> None:
    """The build's lookup (every step that runs the base's Python) evaluates the base's $WITH_CONDA first, with
    bash, as envrun does for the image's users: the conda env's python3, not the system's first on the bare PATH;
    a $WITH_CONDA that fails stops with that and the fix."""
    import subprocess
    from pathlib import Path

    from envbuild.builder.plan.pythontarget import locate_base_python
    from envbuild.envspec.loadspec import load_spec

    python = load_spec(Path(target_spec_file(tmp_path, "base")), check_host=False).spec.python
    environ, env_bin = _lumi_conda_stand_in(tmp_path / "image")
    script = locate_base_python(python) + '\necho "found $py"'
    found = subprocess.run(["/bin/sh", "-ec", script], env=environ, capture_output=True, text=True, timeout=30)
    assert found.returncode == 0, found.stderr
    assert found.stdout == f"found {env_bin}/python3\n"  # the activation's own output is not taken for the path
    without = subprocess.run(["/bin/sh", "-ec", script], env={**environ, "WITH_CONDA": ""}, capture_output=True,
                             text=True, timeout=30)
    assert without.stdout == f"found {tmp_path}/image/usr/bin/python3\n"  # no $WITH_CONDA: the PATH as it is
    broken = subprocess.run(["/bin/sh", "-ec", script], env={**environ, "WITH_CONDA": environ["WITH_CONDA"] + "-gone"},
                            capture_output=True, text=True, timeout=30)
    assert broken.returncode == 3 and "found" not in broken.stdout
    assert "the base sets WITH_CONDA (source " in broken.stderr and "which its users run first, but it fails" in broken.stderr
    assert "fix: check the base's $WITH_CONDA" in broken.stderr


def test_the_lock_of_a_base_target_probes_the_python_with_conda_gives(tmp_path) -> None:
    """The lock's probe (TARGET_PROBE_SHELL with the spec's interpreter, as envbuild lock runs it for
    python.target) looks the interpreter up after $WITH_CONDA too, and names it by its path, as the build runs it;
    the overlays' probe (PROBE_SHELL) reads the bare PATH as before."""
    import subprocess

    from envbuild.builder.plan.overlayprobe import PROBE_PYTHON, PROBE_SHELL, TARGET_PROBE_SHELL, parse_probe

    environ, env_bin = _lumi_conda_stand_in(tmp_path / "image")
    out = tmp_path / "probe.json"
    arguments = ["envbuild-probe", "python3", str(out), PROBE_PYTHON, "python.target: base"]
    ran = subprocess.run(["/bin/sh", "-c", TARGET_PROBE_SHELL, *arguments], env=environ, capture_output=True, text=True,
                         timeout=60)
    assert ran.returncode == 0, ran.stderr
    probe = parse_probe(out.read_text(), str(out))
    assert (probe.python, probe.activation) == (f"{env_bin}/python3", "")
    assert probe.why == f"python.target: base, after the image's $WITH_CONDA ({environ['WITH_CONDA']})"
    plain = subprocess.run(["/bin/sh", "-c", PROBE_SHELL, *arguments], env=environ, capture_output=True, text=True,
                           timeout=60)
    assert plain.returncode != 0 and "the system python3 was run" in plain.stderr
