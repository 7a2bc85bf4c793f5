"""The GPU reader of the per-node sampler (envbuild.report.gpus and its sources in envbuild.report.gpusources),
against stand-in nvidia-smi, amd-smi and rocm-smi programs that replay traces in the output formats those tools
document (tests/support/fakegpu: no GPU, driver or vendor tool is on the test machines), a stand-in pynvml
module and a made-up /sys tree."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

import pytest

from envbuild.report import gpus
from envbuild.report.gpus import open_gpu_source
from envbuild.report.gpusources import amdsmi, amdsysfs, nvidiasmi, rocmsmi, sourcebase
from envbuild.report.gpusources import nvml as nvml_source
from envbuild.report.gpusources.jobgpus import job_devices
from envbuild.report.gpusources.sourcebase import Device
from tests.support.fakegpu import FAKEGPU, RECORDED, TRACES, fake_bin, fake_env

MIB = 1024 * 1024


@pytest.fixture(autouse=True)
def no_real_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    """The machine's own pynvml (and driver, on a GPU machine) stays out: tests that want NVML give a stand-in."""
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setattr(sourcebase, "OPEN_TIMEOUT_S", 5.0)
    monkeypatch.setattr(sourcebase, "READ_TIMEOUT_S", 2.0)


@pytest.fixture
def no_sysfs(tmp_path: Path) -> Path:
    (tmp_path / "drm").mkdir()
    return tmp_path / "drm"


def open_with(tmp_path: Path, tools: tuple[str, ...], trace: str | Path, drm: Path, state: bool = True,
              **environ: str) -> sourcebase.GpuSource:
    env = fake_env(fake_bin(tmp_path / "bin", tools), trace, state=tmp_path / "calls" if state else None, extra=environ)
    return open_gpu_source(env, drm_root=drm)


def make_sysfs(root: Path, cards: dict[int, tuple[int, int, int] | None]) -> Path:
    """A /sys/class/drm stand-in: card N -> (busy %, vram used, vram total) or None for a display controller;
    each card's device is a link to a PCI folder named by its address, as in /sys."""
    drm = root / "drm"
    pci = root / "devices"
    for number, values in cards.items():
        device = pci / f"0000:{0xc1 + number:02x}:00.0"
        device.mkdir(parents=True)
        (drm / f"card{number}").mkdir(parents=True)
        (drm / f"card{number}" / "device").symlink_to(device)
        (drm / f"card{number}-DP-1").mkdir()  # a connector, not a card
        if values is not None:
            busy, used, total = values
            (device / "gpu_busy_percent").write_text(f"{busy}\n")
            (device / "mem_info_vram_used").write_text(f"{used}\n")
            (device / "mem_info_vram_total").write_text(f"{total}\n")
    return drm


# --- parsers against the real tools' outputs (recorded/README.md names each source) ---------------------------

def test_nvidia_smi_not_available_values_as_drivers_write_them() -> None:
    query = "memory.total,memory.free,memory.used,temperature.gpu,fan.speed,utilization.gpu,utilization.memory"
    for name in ("public-nvidia-smi-fan-na.csv", "public-nvidia-smi-fan-not-supported.csv"):
        devices, readings = nvidiasmi.parse_nvidia_smi((RECORDED / name).read_text(), query)
        assert [(d.tool_index, d.mem_total) for d in devices] == [(0, 2004 * MIB)]
        assert readings == {0: (0.0, 0, 2004 * MIB)}


def test_nvidia_smi_unified_memory_gpu_has_no_memory_figures() -> None:
    _, readings = nvidiasmi.parse_nvidia_smi((RECORDED / "public-nvidia-smi-gb10-memory-na.csv").read_text(),
                                        "memory.used,memory.total,utilization.memory")
    assert readings == {0: (None, None, None)}


def test_nvidia_smi_rows_with_a_header_are_read_by_field_name() -> None:
    devices, readings = nvidiasmi.parse_nvidia_smi((RECORDED / "public-nvidia-smi-name-bus-index-uuid.csv").read_text(),
                                              "name,pci.bus,index,uuid")
    assert [(d.tool_index, d.name) for d in devices] == [
        (0, "GeForce GTX 1060 6GB"), (1, "GeForce GTX 1080 Ti"), (2, "GeForce GTX 1060 6GB"),
        (3, "GeForce GTX 1060 6GB"), (4, "GeForce GTX 1060 6GB")]
    assert devices[1].uuid == "GPU-15ea7bf9-1a0e-2d7f-9c62-c28e5ca1aaf1" and devices[1].bus_id is None
    assert readings[4] == (None, None, None)


def test_nvidia_smi_units_are_read_when_nounits_is_not_given() -> None:
    header = "index, name, utilization.gpu [%], memory.used [MiB], memory.total [MiB], pci.bus_id, uuid"
    row = "0, NVIDIA A100-SXM4-80GB, 87 %, 1024 MiB, 81920 MiB, 00000000:07:00.0, GPU-0"
    devices, readings = nvidiasmi.parse_nvidia_smi(f"{header}\n{row}\n")
    assert devices[0].bus_id == "0000:07:00.0" and readings[0] == (0.87, 1024 * MIB, 81920 * MIB)


def test_amd_smi_metric_list_shape_of_rocm6() -> None:
    readings = amdsmi.parse_amd_smi_metric((RECORDED / "public-amd-smi-metric-usage-w7700-list.json").read_text())
    assert readings == {0: (0.42, None, None)}  # --usage only: no mem_usage section


def test_amd_smi_metric_section_not_read_is_na() -> None:
    readings = amdsmi.parse_amd_smi_metric((RECORDED / "public-amd-smi-metric-watch-usage-na-list.json").read_text())
    assert readings == {0: (None, None, None)}


def test_rocm_smi_strings_and_bytes() -> None:
    text = (RECORDED / "public-rocm-smi-use-vram-productname-rx7900xt.json").read_text()
    assert rocmsmi.parse_rocm_smi_metric(text) == {0: (0.0, 27856896, 21458059264)}
    assert rocmsmi.parse_rocm_smi_names(text) == [Device(0, "Radeon RX 7900 XT")]


def test_rocm_smi_names_across_versions() -> None:
    mi250x = rocmsmi.parse_rocm_smi_names((RECORDED / "public-rocm-smi-productname-mi250x.json").read_text())
    assert [(d.tool_index, d.name, d.bus_id) for d in mi250x] == [(0, "AMD INSTINCT MI200 (MCM) OAM LC MBA HPE C2", None)]
    text = (RECORDED / "public-rocm-smi-allinfo-780m-rocm6.2.json").read_text()
    assert rocmsmi.parse_rocm_smi_names(text) == [Device(0, "Phoenix3", None, "0000:c4:00.0")]
    assert rocmsmi.parse_rocm_smi_metric(text) == {0: (0.19, None, None)}


# --- parsers against the stand-ins' outputs (shapes with no public output: recorded/README.md) ----------------------------

def test_nvidia_smi_rows_give_devices_and_readings() -> None:
    devices, readings = nvidiasmi.parse_nvidia_smi((RECORDED / "standin-nvidia-smi-query-h100x8.csv").read_text())
    assert [d.tool_index for d in devices] == list(range(8))
    assert devices[0] == Device(0, "NVIDIA H100 80GB HBM3", 81559 * MIB, "0000:19:00.0",
                                "GPU-5a1c0e27-0d4b-4f3e-9c1a-7b2e8f600d10")
    assert devices[7].bus_id == "0000:db:00.0"
    util, used, total = readings[0]
    assert util is not None and util > 0.9 and used == 61870 * MIB and total == 81559 * MIB
    assert readings[3] == (0.0, 1 * MIB, 81559 * MIB)


def test_nvidia_smi_not_available_values_are_none() -> None:
    _, readings = nvidiasmi.parse_nvidia_smi((RECORDED / "standin-nvidia-smi-query-not-supported.csv").read_text())
    assert readings[0] == (None, 310 * MIB, 16384 * MIB)
    assert readings[1] == (0.12, None, None)


def test_amd_smi_rocm6_list_shape() -> None:
    devices = amdsmi.parse_amd_smi_static((RECORDED / "standin-amd-smi-static-mi250x-rocm6.json").read_text())
    assert [(d.tool_index, d.name, d.bus_id) for d in devices[:2]] == [
        (0, "AMD Instinct MI250X", "0000:c1:00.0"), (1, "AMD Instinct MI250X", "0000:c6:00.0")]
    readings = amdsmi.parse_amd_smi_metric((RECORDED / "standin-amd-smi-metric-mi250x-rocm6.json").read_text())
    assert len(readings) == 8
    util, used, total = readings[0]
    assert util is not None and util > 0.9 and used is not None and used > 48000 * MIB and total == 65520 * MIB
    assert readings[1] == (0.0, 10 * MIB, 65520 * MIB)
    assert readings[7][0] is None  # its "usage" section is "N/A"


def test_amd_smi_rocm7_gpu_data_shape() -> None:
    readings = amdsmi.parse_amd_smi_metric((RECORDED / "standin-amd-smi-metric-mi250x-rocm7.json").read_text())
    assert sorted(readings) == [0, 1, 2, 3]
    assert all(util is not None and util > 0.9 for util, _, _ in readings.values())


def test_rocm_smi_json() -> None:
    devices = rocmsmi.parse_rocm_smi_names((RECORDED / "standin-rocm-smi-productname-bus-mi250x.json").read_text())
    assert [(d.tool_index, d.name, d.bus_id) for d in devices[:1]] == [(0, "AMD Instinct MI250X", "0000:c1:00.0")]
    readings = rocmsmi.parse_rocm_smi_metric((RECORDED / "standin-rocm-smi-use-vram-mi250x.json").read_text())
    assert readings[0][0] is not None and readings[0][0] > 0.9 and readings[0][2] == 68702699520
    assert readings[5] == (0.0, 10 * MIB, 68702699520)


# --- the stand-ins themselves -------------------------------------------------------------------------------------

def test_stand_in_nvidia_smi_fails_as_the_real_one_without_a_driver(tmp_path: Path) -> None:
    env = fake_env(FAKEGPU, "nvidia-driver-failed.json")
    done = subprocess.run([str(FAKEGPU / "nvidia-smi"), "--query-gpu=index", "--format=csv"], env=env,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 9
    assert done.stdout.startswith("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")


def test_stand_ins_step_through_the_trace_one_call_at_a_time(tmp_path: Path) -> None:
    env = fake_env(FAKEGPU, "amd-mi250x-8gcd-idle-except-0.json", state=tmp_path / "calls")
    steps = json.loads((TRACES / "amd-mi250x-8gcd-idle-except-0.json").read_text())["steps"]
    seen = []
    for _ in range(len(steps) + 1):
        out = subprocess.run([str(FAKEGPU / "rocm-smi"), "--showuse", "--json"], env=env, capture_output=True,
                             text=True, check=True).stdout
        seen.append(int(json.loads(out)["card0"]["GPU use (%)"]))
    assert seen == [step["util"][0] for step in steps] + [steps[-1]["util"][0]]


# --- choosing the source ------------------------------------------------------------------------------------------

def test_nvidia_smi_comes_first_when_nvml_is_absent(tmp_path: Path, no_sysfs: Path) -> None:
    source = open_with(tmp_path, ("nvidia-smi", "amd-smi", "rocm-smi"), "nvidia-8gpu-idle-except-0.json", no_sysfs,
                       SLURM_STEP_GPUS="0-7")
    try:
        assert (source.name, source.note) == ("nvidia-smi", "")
        assert [n["name"] for n in source.names()] == ["NVIDIA H100 80GB HBM3"] * 8
        assert source.sampling.startswith(f"nvidia-smi every {nvidiasmi.NVIDIA_SMI_LOOP_MS} ms, its rows between two reads")
    finally:
        source.close()


@pytest.mark.parametrize(("tools", "expected"), [
    (("amd-smi", "rocm-smi"), "amd-smi"),
    (("rocm-smi",), "rocm-smi"),
])
def test_amd_tools_in_order(tmp_path: Path, no_sysfs: Path, tools: tuple[str, ...], expected: str) -> None:
    source = open_with(tmp_path, tools, "amd-mi250x-8gcd-idle-except-0.json", no_sysfs, SLURM_STEP_GPUS="0,1,2,3,4,5,6,7")
    assert source.name == expected
    assert source.sampling == {"amd-smi": amdsmi.AMD_SMI_SAMPLING, "rocm-smi": rocmsmi.ROCM_SMI_SAMPLING}[expected]
    assert [(n["index"], n["name"], n["mem_total"]) for n in source.names()][:2] == [
        (0, "AMD Instinct MI250X", 65520 * MIB), (1, "AMD Instinct MI250X", 65520 * MIB)]
    sample = source.read()
    assert [g["util"] for g in sample][1:] == [0.0] * 7
    assert sample[0]["util"] is not None and sample[0]["util"] > 0.9


def test_sysfs_when_no_tool(tmp_path: Path) -> None:
    drm = make_sysfs(tmp_path, {0: None, 1: (87, 30 * 2**30, 64 * 2**30), 2: (0, 2**20, 64 * 2**30)})
    source = open_with(tmp_path, (), "amd-mi250x-8gcd-idle-except-0.json", drm, SLURM_JOB_GPUS="0,1")
    assert (source.name, source.sampling) == ("sysfs", amdsysfs.SYSFS_SAMPLING)
    assert source.names() == [{"index": 0, "name": "AMD GPU (card1)", "mem_total": 64 * 2**30},
                              {"index": 1, "name": "AMD GPU (card2)", "mem_total": 64 * 2**30}]
    assert source.read() == [{"index": 0, "util": 0.87, "mem_used": 30 * 2**30, "mem_total": 64 * 2**30},
                             {"index": 1, "util": 0.0, "mem_used": 2**20, "mem_total": 64 * 2**30}]
    (drm / "card1" / "device" / "gpu_busy_percent").write_text("12\n")
    assert source.read()[0]["util"] == 0.12


def test_sysfs_reads_visible_numbers_as_the_nodes_and_says_so(tmp_path: Path) -> None:
    drm = make_sysfs(tmp_path, {0: (5, 1, 2), 1: (6, 1, 2), 2: (7, 1, 2)})
    source = open_with(tmp_path, (), "hung.json", drm, ROCR_VISIBLE_DEVICES="2")
    assert [g["util"] for g in source.read()] == [0.07]
    assert "ROCR_VISIBLE_DEVICES taken as the node's GPU numbers" in source.note


def test_no_gpu_at_all(tmp_path: Path, no_sysfs: Path) -> None:
    source = open_with(tmp_path, (), "hung.json", no_sysfs)
    assert (source.name, source.note, source.names(), source.read()) == (None, gpus.NO_GPU_NOTE, [], [])
    assert source.sampling == ""
    source.close()


def test_nvml_comes_first_when_it_works(tmp_path: Path, no_sysfs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = stand_in_pynvml([(97, 60 * 2**30), (0, 2**20)])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    source = open_with(tmp_path, ("nvidia-smi",), "nvidia-8gpu-idle-except-0.json", no_sysfs, CUDA_VISIBLE_DEVICES="0,1")
    assert source.name == "nvml"
    assert source.names() == [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "mem_total": 80 * 2**30},
                              {"index": 1, "name": "NVIDIA H100 80GB HBM3", "mem_total": 80 * 2**30}]
    assert source.read() == [{"index": 0, "util": 0.97, "mem_used": 60 * 2**30, "mem_total": 80 * 2**30},
                             {"index": 1, "util": 0.0, "mem_used": 2**20, "mem_total": 80 * 2**30}]
    source.close()
    assert nvml.shut_down


def test_nvml_without_a_driver_falls_back_silently(tmp_path: Path, no_sysfs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = stand_in_pynvml([], init_error="DriverNotLoaded")
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    source = open_with(tmp_path, ("nvidia-smi",), "nvidia-4gpu-all-busy.json", no_sysfs, CUDA_VISIBLE_DEVICES="0,1,2,3")
    try:
        assert (source.name, source.note) == ("nvidia-smi", "")
    finally:
        source.close()


def test_a_hung_nvml_call_costs_one_sample(tmp_path: Path, no_sysfs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = stand_in_pynvml([(50, 2**30)])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setattr(sourcebase, "READ_TIMEOUT_S", 0.2)
    source = open_with(tmp_path, (), "hung.json", no_sysfs, CUDA_VISIBLE_DEVICES="0")
    nvml.hang_s = 1.0
    assert source.read()[0]["util"] is None
    assert source.read()[0]["util"] is None  # the stuck call is not joined by another
    assert "NVML did not answer within 0.2 s" in source.note and "still has not returned" in source.note
    source.close()


def test_nvml_averages_every_driver_sample_between_reads(tmp_path: Path, no_sysfs: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = stand_in_pynvml([(7, 2**30)], buffer="whole")  # answers the whole buffer: the reader's own filter counts
    nvml.samples[0] = [(1_000, 50)]  # before the step: left out
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    source = open_with(tmp_path, (), "hung.json", no_sysfs, CUDA_VISIBLE_DEVICES="0")
    assert (source.name, source.sampling, source.note) == ("nvml", nvml_source.NVML_SAMPLING_BUFFER, "")
    nvml.samples[0] += [(2_000, 100), (3_000, 80)]
    assert source.read() == [{"index": 0, "util": 0.9, "mem_used": 2**30, "mem_total": 80 * 2**30, "util_samples": 2}]
    nvml.samples[0] += [(4_000, 20)]
    assert source.read()[0] == {"index": 0, "util": 0.2, "mem_used": 2**30, "mem_total": 80 * 2**30,
                                "util_samples": 1}
    assert nvml.samples_since == [0, 1_000, 3_000]  # each read asks from the previous read's newest sample
    source.close()


def test_nvml_read_without_a_new_sample_gives_the_current_rate(tmp_path: Path, no_sysfs: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = stand_in_pynvml([(7, 2**30)], buffer="newer")  # as NVML: NotFound when nothing is newer
    nvml.samples[0] = [(1_000, 50)]
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    source = open_with(tmp_path, (), "hung.json", no_sysfs, CUDA_VISIBLE_DEVICES="0")
    assert [(g["util"], g.get("util_samples")) for g in source.read()] == [(0.07, 0)]
    nvml.samples[0] += [(2_000, 40)]
    assert [(g["util"], g.get("util_samples")) for g in source.read()] == [(0.4, 1)]
    assert source.note == ""
    source.close()


def test_nvml_without_a_sample_buffer_reads_the_current_rate_and_says_so(tmp_path: Path, no_sysfs: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = stand_in_pynvml([(97, 2**30), (3, 2**20)], buffer="newer", not_supported=(1,))
    nvml.samples[0] = [(1_000, 50)]
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    source = open_with(tmp_path, (), "hung.json", no_sysfs, CUDA_VISIBLE_DEVICES="0,1")
    nvml.samples[0] += [(2_000, 60)]
    assert [(g["util"], g.get("util_samples")) for g in source.read()] == [(0.6, 1), (0.03, None)]
    assert source.note == ("GPU 1: its driver keeps no utilisation samples (NVML: Not Supported): its utilisation "
                           "is the driver's last sample period at each read, not the whole interval")
    assert source.sampling == (f"{nvml_source.NVML_SAMPLING_BUFFER}; GPUs 1 (no buffer): {nvml_source.NVML_SAMPLING_CURRENT}")
    source.close()


def test_nvml_of_a_pynvml_without_the_buffer_call(tmp_path: Path, no_sysfs: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", stand_in_pynvml([(97, 2**30)]))
    source = open_with(tmp_path, (), "hung.json", no_sysfs, CUDA_VISIBLE_DEVICES="0")
    assert [g["util"] for g in source.read()] == [0.97] and "util_samples" not in source.read()[0]
    assert source.sampling == nvml_source.NVML_SAMPLING_CURRENT and "no nvmlDeviceGetSamples" in source.note
    source.close()


# --- the job's GPUs -----------------------------------------------------------------------------------------------

EIGHT = [Device(i, "G", None, f"0000:{i:02x}:00.0", f"GPU-{i}aaa-{i}") for i in range(8)]


@pytest.mark.parametrize(("environ", "picked", "caveat"), [
    ({"SLURM_STEP_GPUS": "2,3", "CUDA_VISIBLE_DEVICES": "0,1"}, [2, 3], ""),  # no cgroup: global ids index the node
    ({"SLURM_JOB_GPUS": "4-7"}, [4, 5, 6, 7], ""),
    ({"SLURM_STEP_GPUS": "9"}, list(range(8)), "does not match"),
    ({"CUDA_VISIBLE_DEVICES": "1"}, [1], ""),
    ({"GPU_DEVICE_ORDINAL": "6,7"}, [6, 7], ""),
    ({"CUDA_VISIBLE_DEVICES": "GPU-3aaa,GPU-5aaa-5"}, [3, 5], ""),  # unique prefixes, as CUDA accepts them
    ({"CUDA_VISIBLE_DEVICES": "GPU-ffff"}, list(range(8)), "does not name the GPUs"),
    ({"CUDA_VISIBLE_DEVICES": "MIG-0b6c4f2e"}, list(range(8)), "MIG"),
    ({"CUDA_VISIBLE_DEVICES": ""}, [], ""),
    ({}, list(range(8)), "all 8 GPUs of the node are reported"),
])
def test_nvidia_job_gpus(environ: dict[str, str], picked: list[int], caveat: str) -> None:
    chosen, note = job_devices(EIGHT, environ, vendor="nvidia")
    assert [d.tool_index for d in chosen] == picked
    assert (caveat in note) if caveat else note == ""


def test_a_cgroup_view_shows_only_the_job_gpus() -> None:
    shown = EIGHT[:2]  # the device cgroup hides the other six; Slurm's ids stay global
    chosen, note = job_devices(shown, {"SLURM_STEP_GPUS": "5,6", "CUDA_VISIBLE_DEVICES": "0,1"}, vendor="nvidia")
    assert (chosen, note) == (shown, "")


def test_hip_indexes_what_rocr_left() -> None:
    chosen, note = job_devices(EIGHT, {"ROCR_VISIBLE_DEVICES": "4,5,6,7", "HIP_VISIBLE_DEVICES": "1"}, vendor="amd")
    assert ([d.tool_index for d in chosen], note) == ([5], "")


def test_only_the_step_gpus_are_read_and_numbered_from_0(tmp_path: Path, no_sysfs: Path) -> None:
    source = open_with(tmp_path, ("amd-smi",), "amd-mi250x-8gcd-idle-except-0.json", no_sysfs, SLURM_STEP_GPUS="0,1")
    assert [(n["index"], n["name"]) for n in source.names()] == [(0, "AMD Instinct MI250X"), (1, "AMD Instinct MI250X")]
    assert [g["index"] for g in source.read()] == [0, 1]


def test_a_job_without_gpus_here_gets_no_source(tmp_path: Path, no_sysfs: Path) -> None:
    source = open_with(tmp_path, ("rocm-smi",), "amd-mi250x-8gcd-idle-except-0.json", no_sysfs, ROCR_VISIBLE_DEVICES="")
    assert source.name is None and "the job holds no GPU on this node" in source.note


# --- over time, and the faults --------------------------------------------------------------------------------------

def test_only_gpu_0_busy_over_time_through_amd_smi(tmp_path: Path, no_sysfs: Path) -> None:
    trace = json.loads((TRACES / "amd-mi250x-8gcd-idle-except-0.json").read_text())
    source = open_with(tmp_path, ("amd-smi",), "amd-mi250x-8gcd-idle-except-0.json", no_sysfs, SLURM_JOB_GPUS="0-7")
    # call 0 lists the GPUs (static), call 1 is the first metric at open: reads show steps 2, 3, ...
    for step in trace["steps"][2:]:
        sample = source.read()
        assert [g["util"] for g in sample] == [s / 100 for s in step["util"]]
        assert [g["mem_used"] for g in sample] == [m * MIB for m in step["mem_used_mib"]]


def test_nvidia_smi_loop_rows_are_averaged_and_the_loop_ends_on_close(tmp_path: Path, no_sysfs: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nvidiasmi, "NVIDIA_SMI_LOOP_MS", 50)
    source = open_with(tmp_path, ("nvidia-smi",), "nvidia-8gpu-idle-except-0.json", no_sysfs, SLURM_JOB_GPUS="0-7")
    assert isinstance(source, nvidiasmi.NvidiaSmiSource)
    first = source.read()  # starts the loop; until it writes, the open's reading holds
    assert first[0]["util"] is not None and first[0]["util"] > 0.9
    time.sleep(0.6)  # a dozen rows of the loop (steps 1, 2, 3, 4, 4, ...)
    sample = source.read()
    assert 0.95 <= (sample[0]["util"] or 0) <= 0.99 and [g["util"] for g in sample[1:]] == [0.0] * 7
    loop = source._loop
    assert loop is not None and loop.poll() is None
    source.close()
    assert loop.poll() is not None


def test_a_failing_nvidia_smi_is_skipped_and_named(tmp_path: Path) -> None:
    drm = make_sysfs(tmp_path, {0: (40, 1, 2)})
    source = open_with(tmp_path, ("nvidia-smi",), "nvidia-driver-failed.json", drm, SLURM_JOB_GPUS="0")
    assert source.name == "sysfs"
    assert source.note.startswith("nvidia-smi failed (exit 9): NVIDIA-SMI has failed because it couldn't "
                                  "communicate with the NVIDIA driver.")


def test_a_hung_tool_is_killed_at_open(tmp_path: Path, no_sysfs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sourcebase, "OPEN_TIMEOUT_S", 0.5)
    trace = tmp_path / "hung-here.json"
    trace.write_text((TRACES / "hung.json").read_text())
    started = time.monotonic()
    source = open_with(tmp_path, ("nvidia-smi",), trace, no_sysfs)
    assert time.monotonic() - started < 4
    assert (source.name, source.note) == (None, "nvidia-smi did not answer within 0.5 s (killed)")
    assert processes_replaying(trace) == []


def test_a_tool_that_hangs_later_costs_samples_not_the_sampler(tmp_path: Path, no_sysfs: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sourcebase, "READ_TIMEOUT_S", 0.5)
    trace = tmp_path / "hangs-later.json"
    trace.write_text(json.dumps({**json.loads((TRACES / "amd-mi250x-4gcd-all-busy.json").read_text()),
                                 "hang_after_calls": 3}))
    source = open_with(tmp_path, ("rocm-smi",), trace, no_sysfs, ROCR_VISIBLE_DEVICES="0,1,2,3")
    assert source.read()[0]["util"] is not None  # call 2
    started = time.monotonic()
    sample = source.read()  # call 3 hangs
    assert time.monotonic() - started < 3
    assert [g["util"] for g in sample] == [None] * 4 and [g["mem_total"] for g in sample] == [65520 * MIB] * 4
    assert source.note == "rocm-smi did not answer within 0.5 s (killed)"
    assert processes_replaying(trace) == []


def test_after_failures_in_a_row_a_source_backs_off(tmp_path: Path, no_sysfs: Path) -> None:
    trace = tmp_path / "fails-later.json"
    trace.write_text(json.dumps({**json.loads((TRACES / "amd-mi250x-4gcd-all-busy.json").read_text()),
                                 "fail_after_calls": 2, "fail_message": "stand-in: amdgpu driver gone"}))
    source = open_with(tmp_path, ("amd-smi",), trace, no_sysfs, ROCR_VISIBLE_DEVICES="0,1,2,3")
    for _ in range(sourcebase.FAILURES_BEFORE_BACKOFF + 4):
        assert source.read()[0]["util"] is None
    calls = int((tmp_path / "calls").read_text())
    assert calls == 2 + sourcebase.FAILURES_BEFORE_BACKOFF  # the open's two, then three failures; the rest waited
    assert source.note == f"amd-smi failed (exit 1): stand-in: amdgpu driver gone ({sourcebase.FAILURES_BEFORE_BACKOFF} reads)"


def test_nvidia_smi_loop_that_goes_silent_is_killed(tmp_path: Path, no_sysfs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nvidiasmi, "NVIDIA_SMI_LOOP_MS", 50)
    monkeypatch.setattr(sourcebase, "READ_TIMEOUT_S", 0.3)
    trace = tmp_path / "loop-hangs.json"
    trace.write_text(json.dumps({**json.loads((TRACES / "nvidia-4gpu-all-busy.json").read_text()), "hang_after_calls": 3}))
    source = open_with(tmp_path, ("nvidia-smi",), trace, no_sysfs, CUDA_VISIBLE_DEVICES="0,1,2,3")
    source.read()  # starts the loop (call 1): it writes two rows, then stops writing
    time.sleep(1.0)
    assert source.read()[0]["util"] is not None  # the rows it wrote
    time.sleep(0.6)
    assert source.read()[0]["util"] is None
    assert "nvidia-smi wrote nothing for" in source.note
    source.close()
    assert processes_replaying(trace) == []


# --- helpers ------------------------------------------------------------------------------------------------------

def processes_replaying(trace: Path) -> list[int]:
    """Our processes still running a stand-in on `trace` (after a short grace for the kernel to reap them)."""
    marker = f"ENVBUILD_FAKEGPU_TRACE={trace}".encode()
    found: list[int] = []
    for _ in range(20):
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    environ = (entry / "environ").read_bytes()
                    state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                except OSError:
                    continue
                if marker in environ.split(b"\0") and state != "Z":
                    found.append(int(entry.name))
        if not found:
            break
        time.sleep(0.1)
    return found


def stand_in_pynvml(gpus_: list[tuple[int, int]], init_error: str | None = None, buffer: str | None = None,
                    not_supported: tuple[int, ...] = ()) -> Any:
    """A pynvml module with the calls the reader makes; GPUs as (util %, memory used bytes), 80 GiB each
    (the current rate nvmlDeviceGetUtilizationRates gives).

    `buffer`: None for a pynvml without nvmlDeviceGetSamples; "newer" answers as NVML documents it (the samples
    newer than the time stamp asked for, NVMLError_NotFound when there is none); "whole" answers the whole
    buffer whatever is asked. The buffer is `module.samples[handle]`, a list of (time stamp in us, percent) the
    test extends; the answer has pynvml's shape: (value type, [c_nvmlSample_t with .timeStamp and
    .sampleValue.uiVal]). GPUs in `not_supported` answer NVMLError_NotSupported. `module.samples_since` lists
    the time stamps asked for (GPU 0)."""
    module: Any = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    class NVMLError_LibraryNotFound(NVMLError):  # pynvml's names
        pass

    class NVMLError_DriverNotLoaded(NVMLError):
        pass

    class NVMLError_NotSupported(NVMLError):
        pass

    class NVMLError_NotFound(NVMLError):
        pass

    module.NVMLError = NVMLError
    module.NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    module.NVMLError_DriverNotLoaded = NVMLError_DriverNotLoaded
    module.NVMLError_NotSupported = NVMLError_NotSupported
    module.NVMLError_NotFound = NVMLError_NotFound
    module.NVML_GPU_UTILIZATION_SAMPLES = 1  # nvml.h's nvmlSamplingType_t
    module.samples = {handle: [] for handle in range(len(gpus_))}
    module.samples_since = []

    def samples(handle: int, sampling_type: int, since: int) -> tuple[int, list[Any]]:
        assert sampling_type == module.NVML_GPU_UTILIZATION_SAMPLES
        if handle == 0:
            module.samples_since.append(since)
        if handle in not_supported:
            raise NVMLError_NotSupported("Not Supported")
        found = [(stamp, value) for stamp, value in module.samples[handle] if buffer == "whole" or stamp > since]
        if not found:
            raise NVMLError_NotFound("Not Found")
        return 1, [types.SimpleNamespace(timeStamp=stamp, sampleValue=types.SimpleNamespace(uiVal=value))
                   for stamp, value in found]  # 1: NVML_VALUE_TYPE_UNSIGNED_INT

    if buffer is not None:
        module.nvmlDeviceGetSamples = samples
    module.shut_down = False
    module.hang_s = 0.0

    def init() -> None:
        if init_error:
            raise {"DriverNotLoaded": NVMLError_DriverNotLoaded}[init_error]("Driver Not Loaded")

    def utilization(handle: int) -> Any:
        time.sleep(module.hang_s)
        return types.SimpleNamespace(gpu=gpus_[handle][0], memory=0)

    def shutdown() -> None:
        module.shut_down = True

    module.nvmlInit = init
    module.nvmlShutdown = shutdown
    module.nvmlDeviceGetCount = lambda: len(gpus_)
    module.nvmlDeviceGetHandleByIndex = lambda index: index
    module.nvmlDeviceGetName = lambda handle: b"NVIDIA H100 80GB HBM3"
    module.nvmlDeviceGetMemoryInfo = lambda handle: types.SimpleNamespace(total=80 * 2**30, used=gpus_[handle][1],
                                                                          free=80 * 2**30 - gpus_[handle][1])
    module.nvmlDeviceGetPciInfo = lambda handle: types.SimpleNamespace(busId=f"00000000:{0x19 + handle:02X}:00.0")
    module.nvmlDeviceGetUUID = lambda handle: f"GPU-{handle}"
    module.nvmlDeviceGetUtilizationRates = utilization
    return module

