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
