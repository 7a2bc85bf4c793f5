"""The doctor's checks over recorded hosts (tests/fixtures/hosts: a LUMI-G node, a LUMI login node, a Puhti
node, written from the public documentation) and stand-in images (tests/support/doctor_standins.py). No container
is started: with --host-record the hosts' records stand for the nodes."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from envbuild.doctor.checkresults import DoctorReport, Finding
from envbuild.doctor.gather import DoctorRequest, run_doctor
from tests.support.doctor_standins import make_image

HOSTS = Path(__file__).resolve().parent.parent / "fixtures" / "hosts"


def doctor(tmp_path: Path, system: str, host: str | Path, image: str, *, command: tuple[str, ...] = (),
           strict_net: bool = False, env: dict[str, str] | None = None) -> DoctorReport:
    record = host if isinstance(host, Path) else HOSTS / f"{host}.json"
    environ = {"HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin", **(env or {})}
    return run_doctor(DoctorRequest(image=str(make_image(tmp_path, image)), system=system, command=command,
                                    strict_net=strict_net, host_records=[str(record)], environ=environ,
                                    cwd=str(tmp_path)))


def by_area(report: DoctorReport, area: str) -> list[Finding]:
    return [f for f in report.findings if f.area == area]


def levels(report: DoctorReport, area: str) -> list[str]:
    return [f.level for f in by_area(report, area)]


def record_edited(tmp_path: Path, host: str, edit: Callable[[dict], object]) -> Path:
    """A copy of a recorded host, changed by `edit` (which changes the parsed record in place)."""
    data = json.loads((HOSTS / f"{host}.json").read_text())
    edit(data)
    path = tmp_path / f"{host}-changed.json"
    path.write_text(json.dumps(data))
    return path


def record_with(tmp_path: Path, host: str, **env: str) -> Path:
    return record_edited(tmp_path, host, lambda data: data["env"].update(env))


def test_laif_image_on_a_lumi_node_is_clean(tmp_path: Path) -> None:
    report = doctor(tmp_path, "lumi-g", "lumi-g-node", "laif")
    assert report.count("fail") == 0, report.render()
    net = by_area(report, "interconnect")
    assert net[0].level == "ok" and "AWS OFI plugin over the image's libfabric CXI" in net[0].what
    assert levels(report, "torch") == ["ok", "ok"]  # the file says rocm build; the step saw 8 devices
    assert "8 amd GPU devices" in by_area(report, "gpu")[1].what
    assert levels(report, "allocation") == ["ok"]
    assert levels(report, "binds") == ["ok"]
    # HF_HOME set and writable; TORCH_HOME unset: the home quota warning
    assert levels(report, "caches") == ["ok", "warn"] and report.exit_code() == 0 and report.exit_code(strict=True) == 1


def test_image_without_plugin_falls_back_to_sockets_between_nodes(tmp_path: Path) -> None:
    report = doctor(tmp_path, "lumi-g", "lumi-g-node", "lumi-noplugin")
    net = by_area(report, "interconnect")[0]
    assert net.level == "warn" and "TCP sockets" in net.what and "librccl-net*.so*" in net.what
    assert "NCCL_NET='AWS Libfabric'" in net.fix
    assert report.exit_code() == 0
    strict = doctor(tmp_path / "s", "lumi-g", "lumi-g-node", "lumi-noplugin", strict_net=True)
    assert by_area(strict, "interconnect")[0].level == "fail" and strict.exit_code() == 1


def test_plugin_with_the_hosts_libfabric_bound_in(tmp_path: Path) -> None:
    net = by_area(doctor(tmp_path, "lumi-g", "lumi-g-node", "lumi-plugin-only"), "interconnect")[0]
    assert net.level == "ok" and "the host's (bound) libfabric" in net.what


def test_cpu_torch_on_lumi_fails_with_the_variant_fix(tmp_path: Path) -> None:
    report = doctor(tmp_path, "lumi-g", "lumi-g-node", "cpu")
    torch = by_area(report, "torch")[0]
    assert torch.level == "fail" and "CPU-only build" in torch.what and "variant: rocm7.0" in torch.fix
    assert report.exit_code() == 1


def test_rocm_torch_on_puhti_fails(tmp_path: Path) -> None:
    torch = by_area(doctor(tmp_path, "puhti", "puhti-node", "laif"), "torch")[0]
    assert torch.level == "fail" and "puhti's GPUs are nvidia" in torch.what and "cuda126" in torch.fix


def test_puhti_node_with_infiniband_image_and_nvme(tmp_path: Path) -> None:
    report = doctor(tmp_path, "puhti", "puhti-node", "cuda-ib")
    assert by_area(report, "interconnect")[0].level == "ok"
    assert "InfiniBand verbs" in by_area(report, "interconnect")[0].what
    assert levels(report, "scratch") == ["ok"]
    assert "4 nvidia GPU devices, CUDA_VISIBLE_DEVICES=0,1,2,3" in by_area(report, "gpu")[1].what


def test_infiniband_image_missing_verbs_matters_only_between_nodes(tmp_path: Path) -> None:
    one = by_area(doctor(tmp_path, "puhti", "puhti-node", "cuda-noib"), "interconnect")[0]
    assert one.level == "info" and "one node" in one.what
    two_nodes = record_with(tmp_path, "puhti-node", SLURM_JOB_NUM_NODES="2", SLURM_NNODES="2")
    two = by_area(doctor(tmp_path / "2", "puhti", two_nodes, "cuda-noib"), "interconnect")[0]
    assert two.level == "warn" and "libibverbs" in two.what and "ibverbs provider" in two.what


def test_missing_nvme_request_is_a_warning_with_the_gres(tmp_path: Path) -> None:
    path = record_edited(tmp_path, "puhti-node", lambda data: data["env"].pop("LOCAL_SCRATCH"))
    scratch = by_area(doctor(tmp_path, "puhti", path, "cuda-ib"), "scratch")[0]
    assert scratch.level == "warn" and "nvme:<GB>" in scratch.fix


def test_login_node_defers_gpu_and_job_checks(tmp_path: Path) -> None:
    report = doctor(tmp_path, "lumi-g", "lumi-login", "laif")
    assert levels(report, "allocation") == ["info"]
    assert by_area(report, "gpu")[1].level == "info" and "login node" in by_area(report, "gpu")[1].what
    assert levels(report, "binds") == ["info"]  # /var/spool/slurmd exists only on compute nodes
    assert report.count("fail") == 0


def test_forbidden_per_task_gpu_option_in_the_launch_fails(tmp_path: Path) -> None:
    report = doctor(tmp_path, "lumi-g", "lumi-g-node", "laif",
                    command=("srun", "--gpus-per-task=1", "python", "train.py"))
    assert "fail" in levels(report, "allocation")
    found = next(f for f in by_area(report, "allocation") if f.level == "fail")
    assert "--gpus-per-task" in found.what and "allow-task-sharing" in found.what + found.why + found.fix
    assert levels(report, "launch") == ["fail"]  # envrun itself refuses the same launch
    assert report.exit_code() == 1


def test_torch_without_gpu_inside_the_job_fails(tmp_path: Path) -> None:
    path = record_edited(tmp_path, "lumi-g-node", lambda data: data.update(
        container={"torch": "2.10.0+rocm7.0", "cuda_available": False, "device_count": 0}))
    step = by_area(doctor(tmp_path, "lumi-g", path, "laif"), "torch")[1]
    assert step.level == "fail" and "cuda available: False" in step.what


def test_render_and_json(tmp_path: Path) -> None:
    report = doctor(tmp_path, "lumi-g", "lumi-g-node", "lumi-noplugin")
    text = report.render()
    assert text.startswith("envrun doctor: system lumi-g (--system), job 7340001 (2 nodes), recorded host")
    assert "  warn  interconnect" in text and "fix: " in text and text.rstrip().endswith("(lumi-g)")
    data = json.loads(report.to_json())
    assert {f["level"] for f in data["findings"]} >= {"ok", "warn"}


@pytest.mark.parametrize("bad", ["[]", "{\"cpus\": 2}", "not json"])
def test_a_bad_host_record_is_a_clean_error(tmp_path: Path, bad: str) -> None:
    import subprocess
    import sys

    path = tmp_path / "bad.json"
    path.write_text(bad)
    done = subprocess.run([sys.executable, "-m", "envbuild.cli.envrun_main", "doctor", "--system", "lumi-g",
                           "--host-record", str(path)], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "fix: give a file written by `envrun doctor --node-record`" in done.stderr


def test_this_machine_recorded_then_checked(tmp_path: Path) -> None:
    """`envrun doctor --node-record > FILE` records this machine; `--host-record FILE` checks against it and finds
    what the live run finds (no image here: the host's findings only)."""
    import subprocess
    import sys

    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    base = [sys.executable, "-m", "envbuild.cli.envrun_main", "doctor", "--system", "local"]
    recorded = subprocess.run([*base, "--node-record"], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert recorded.returncode == 0, recorded.stderr
    (tmp_path / "me.json").write_text(recorded.stdout)
    live = subprocess.run([*base, "--json"], capture_output=True, text=True, cwd=tmp_path, env=env)
    replay = subprocess.run([*base, "--json", "--host-record", "me.json"], capture_output=True, text=True,
                            cwd=tmp_path, env=env)
    assert live.returncode == replay.returncode == 0, live.stderr + replay.stderr

    def shown(output: str) -> list[tuple[str, str, str]]:
        return [(f["level"], f["area"], f["what"]) for f in json.loads(output)["findings"]]

    assert shown(live.stdout) == shown(replay.stdout)


def test_torchvision_of_another_variant_in_the_image_fails(tmp_path: Path) -> None:
    """The build-time family rule, seen by doctor in an image built before it (or by hand)."""
    image = make_image(tmp_path, "laif")
    dist = image / "opt/venv/lib/python3.12/site-packages/torchvision-0.25.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: torchvision\nVersion: 0.25.0\n")
    report = run_doctor(DoctorRequest(image=str(image), system="lumi-g",
                                      host_records=[str(HOSTS / "lumi-g-node.json")],
                                      environ={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}, cwd=str(tmp_path)))
    family = [f for f in by_area(report, "torch") if "torchvision" in f.what]
    assert len(family) == 1 and family[0].level == "fail" and "PyPI's default build" in family[0].what
    assert report.exit_code() == 1


def test_a_failure_found_exits_1_not_2(tmp_path: Path) -> None:
    """The exit contract of every command (envbuild.shared.errors): 1 problems found; 2 stays a usage error (issue 31:
    the doctor exited 2 for a failure)."""
    import subprocess
    import sys

    image = make_image(tmp_path, "laif")
    dist = image / "opt/venv/lib/python3.12/site-packages/torchvision-0.25.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: torchvision\nVersion: 0.25.0\n")
    done = subprocess.run([sys.executable, "-m", "envbuild.cli.envrun_main", "doctor", "--system", "lumi-g", "--json",
                           "--image", str(image), "--host-record", str(HOSTS / "lumi-g-node.json")],
                          capture_output=True, text=True, cwd=tmp_path, env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 1, done.stderr
    assert "fail" in {finding["level"] for finding in json.loads(done.stdout)["findings"]}


def test_an_overlays_torchvision_is_checked_against_the_bases_torch(tmp_path: Path) -> None:
    """With --overlay, the overlay's family members stand in front of the base's (its venv comes first):
    a torchvision of another variant in the overlay fails against the base's torch."""
    from envbuild.doctor.gather import Setting, read_image
    from envbuild.recipes.loadrecipe import load_recipe

    base = make_image(tmp_path, "laif")
    overlay = tmp_path / "overlay"
    site = overlay / "user-software/lib/python3.12/site-packages"
    (site / "torchvision-0.25.0.dist-info").mkdir(parents=True)
    (overlay / "user-software/pyvenv.cfg").write_text("home = /opt/venv/bin\n")
    (site / "torchvision-0.25.0.dist-info/METADATA").write_text("Metadata-Version: 2.1\nName: torchvision\nVersion: 0.25.0\n")
    recipe = load_recipe("lumi-g")
    setting = Setting(recipe, "--system", str(base), ((str(overlay), "/user-software"),), (), {}, [])
    facts, found = read_image(setting, requested=True)
    assert facts is not None and [f.level for f in found] == ["ok"]
    assert facts.torch is not None and facts.torch.version == "2.10.0+rocm7.0" and facts.torch_env == "/opt/venv"
    assert [b.name for b in facts.family] == ["torchvision", "torch"]
    assert facts.libraries["net_plugin"] == ["/opt/aws-ofi-rccl/lib/librccl-net.so"]  # the base's, kept
    from envbuild.doctor.gpuchecks import torch_findings

    family = [f for f in torch_findings(recipe, "amd", facts) if "torchvision" in f.what]
    assert len(family) == 1 and family[0].level == "fail"


def test_a_program_outside_the_binds_is_bound_and_other_paths_are_warned_about(tmp_path: Path, monkeypatch) -> None:
    """envrun doctor plans the launch with the same check as envrun (envbuild.launch.visibility)."""
    from envbuild.launch import visibility

    monkeypatch.setattr(visibility, "RUNTIME_TMP_MOUNTS", ())  # this test's files in /tmp count as outside
    (tmp_path / "proj").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "train.py").write_text("print('hi')\n")
    (tmp_path / "data").mkdir()
    environ = {"HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"}
    report = run_doctor(DoctorRequest(
        image=str(make_image(tmp_path, "laif")), system="lumi-g",
        command=("srun", "python", str(tmp_path / "outside" / "train.py"), f"--data={tmp_path / 'data'}"),
        host_records=[str(HOSTS / "lumi-g-node.json")], environ=environ, cwd=str(tmp_path / "proj")))
    launch = by_area(report, "launch")
    assert [f.level for f in launch] == ["info", "warn"], report.render()
    assert launch[0].what == f"envrun binds {tmp_path}/outside:{tmp_path}/outside:ro for the program"
    assert launch[1].what.startswith(f"{tmp_path}/data is not under any bind") and f"--bind {tmp_path}/data" in launch[1].what
