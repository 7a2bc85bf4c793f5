"""`envrun doctor` and a file envrun ignores (issue 28, envbuild.launch.trust): the doctor reports it as a
warning with the fix, and neither its image nor its env reaches the checks or the launch it plans."""

from __future__ import annotations

from pathlib import Path

from envbuild.doctor.gather import DoctorRequest, resolve, run_doctor
from tests.doctor.test_doctor import HOSTS, by_area
from tests.support.trust_accounts import plant


def test_a_planted_project_file_is_a_warning_and_not_used(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    planted = plant(project / "envrun.yaml", "image: /evil.sif\nenv: {LD_PRELOAD: /evil.so, HF_HOME: /evil}\n")
    environ = {"HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"}
    request = DoctorRequest(system="local", environ=environ, cwd=str(project),
                            host_records=[str(HOSTS / "lumi-g-node.json")])
    setting = resolve(request)
    assert setting.image is None and setting.config_env == {}
    report = run_doctor(request)
    found = by_area(report, "project")
    assert [f.level for f in found] == ["warn"]
    assert found[0].what.startswith(f"ignoring {planted}: owned by ")
    assert "ENVRUN_TRUST_DIR" in found[0].fix
