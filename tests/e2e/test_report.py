"""The job report on the real local Slurm with the reference image: envrun's host shim starts one sampler per node,
its records come back through srun's stderr, and envrun prints the summary and writes the files when the step ends
(envbuild.report, docs/concepts/report.md).

Short steps and a sample every second keep the module near a minute and a half. The GPU test puts the stand-in
GPU tools of tests/support/fakegpu first on PATH: they replay a trace in nvidia-smi's documented output format
(no GPU on the test machines). The two-node tests are last: the two_nodes fixture switches the cluster for them
and back afterwards. Every comparison with a rank's own getrusage is marked `quiet` (tests/run.sh runs those
alone): tests/test_quiet_marks.py fails on one that is not.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from envbuild.report.stepfindings import RANK_IDLE_SHARE
from tests.conftest import REPO, run_cli
from tests.support.fakegpu import FAKEGPU, TRACES

pytestmark = [pytest.mark.slow, pytest.mark.apptainer, pytest.mark.slurm]
ENVRUN = str(REPO / "bin/envrun")
SUMMARY = "envrun report:"

# Rank 0 computes, the others sleep, for SECONDS; the first task of each node prints the samplers it sees beside
# it (same parent: the task's root, which the host shim became) so that the test can check they are gone after.
PROGRAM = """\
import os, socket, sys, time
seconds = float(sys.argv[1])
code = int(sys.argv[2]) if len(sys.argv) > 2 else 0
if os.environ.get("SLURM_LOCALID") == "0":
    root = os.getppid()
    found = []
    for entry in os.listdir("/proc"):
        try:
            words = open(f"/proc/{entry}/cmdline", "rb").read().split(b"\\0")
        except OSError:
            continue
        if b"envbuild.report.sampler" in words and b"--task-pid" in words:
            if words[words.index(b"--task-pid") + 1] == str(root).encode():
                found.append(entry)
    print("SAMPLERS " + socket.gethostname() + " " + " ".join(found), flush=True)
end = time.time() + seconds
if os.environ.get("RANK") == "0":
    n = 0
    while time.time() < end:
        n += 1
else:
    time.sleep(seconds)
sys.exit(code)
"""


@pytest.fixture
def program(tmp_path: Path) -> Path:
    path = tmp_path / "work.py"
    path.write_text(PROGRAM)
    return path


def envrun(image: Path, *args: str, cwd: Path, env: dict[str, str] | None = None,
           timeout: int = 180) -> subprocess.CompletedProcess[str]:
    return run_cli([ENVRUN, "--image", str(image), *args], cwd=cwd, env_extra=env, timeout=timeout)


def samplers_seen(stdout: str) -> dict[str, list[int]]:
    """Node -> the pids of the samplers the node's first task saw beside it."""
    return {m.group(1): [int(p) for p in m.group(2).split()]
            for m in re.finditer(r"^SAMPLERS (\S+) ?(.*)$", stdout, re.M)}


def assert_gone(pids: list[int]) -> None:
    for pid in pids:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue  # gone
        assert b"envbuild.report.sampler" not in cmdline, f"sampler {pid} still running after the step"


def summary(stderr: str) -> str:
    assert SUMMARY in stderr, stderr
    return stderr[stderr.index(SUMMARY):]


def test_two_tasks_rank_one_sleeps_is_named_idle_and_the_files_are_written(reference_image: Path, program: Path,
                                                                          tmp_path: Path) -> None:
    out = tmp_path / "rep"
    result = envrun(reference_image, "--report", str(out), "--report-interval", "1s", "srun", "-n2", "python",
                    str(program), "6", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    text = summary(result.stderr)
    assert "problem: rank 1 idle" in text, text
    assert "rank 0 idle" not in text
    assert "\x1e" not in result.stderr, "a sampler record reached the user's stderr"
    seen = samplers_seen(result.stdout)
    assert len(seen) == 1 and all(len(pids) == 1 for pids in seen.values()), result.stdout  # one per node
    assert_gone([pid for pids in seen.values() for pid in pids])

    report = json.loads((out / "report.json").read_text())
    assert report["schema"] == "envrun-report/1"
    assert report["exit_code"] == 0 and report["interval_s"] == 1.0
    assert sorted(r["rank"] for r in report["ranks"]) == [0, 1]
    node = report["nodes"][0]["node"]
    assert report["job"]["nodes"] == [node] and report["nodes"][0]["samples"] >= 3
    assert all(r["node"] == node for r in report["ranks"])
    busy, idle = sorted(report["ranks"], key=lambda r: r["rank"])
    # Idle but for the sample interval(s) its start falls in (Python's start runs above RANK_IDLE_CORES for a
    # part of a second, and where the sample grid cuts it is chance: 0.888 of a 6 s life in one CI run under
    # load); the finding's own share is the bound, the CPU seconds beside it the independent check.
    assert idle["idle_fraction"] >= RANK_IDLE_SHARE and busy["cpu_cores"] > idle["cpu_cores"]
    assert idle["cpu_s"] < 0.2 * busy["cpu_s"], (idle, busy)
    assert [f["rule"] for f in report["findings"]] == ["idle-rank"]
    assert report["gpus"] == [] and any("GPUs on" in line for line in report["not_measured"])

    page = (out / "report.html").read_text()
    assert page.lstrip().lower().startswith("<!doctype html") and "rank 1 idle" in page
    assert not re.search(r"""(src|href)=["']?(https?:|//|file:|[^"'#d][^"']*\.(png|css|js))""", page), \
        "report.html must be self-contained"
    assert (out / "timeline.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert (out / "summary.txt").read_text().startswith(SUMMARY)


def test_stand_in_gpus_with_only_gpu_0_busy_give_the_one_gpu_finding(reference_image: Path, program: Path,
                                                                     tmp_path: Path) -> None:
    """nvidia-smi first on PATH is the stand-in (it replays nvidia-smi's documented CSV output, a trace of 8 GPUs
    where only GPU 0 works); srun passes PATH to the tasks, and so to the node's sampler."""
    env = {"PATH": f"{FAKEGPU}:{os.environ['PATH']}", "ENVBUILD_FAKEGPU_TRACE": str(TRACES / "nvidia-8gpu-idle-except-0.json"),
           "ENVBUILD_FAKEGPU_PYTHON": "/usr/bin/python3"}
    result = envrun(reference_image, "--report", str(tmp_path / "rep"), "--report-interval", "1s", "srun", "-n2",
                    "python", str(program), "5", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    text = summary(result.stderr)
    assert "GPUs 0-7 (nvidia-smi, NVIDIA H100 80GB HBM3)" in text, text
    assert "GPU 0 busy" in text and "GPUs 1-7 idle: only one process uses a GPU" in text, text
    report = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert report["nodes"][0]["gpu_source"] == "nvidia-smi"
    assert [g["index"] for g in report["gpus"]] == list(range(8))
    assert report["gpus"][0]["util"] > 0.9 and all(g["util"] == 0 for g in report["gpus"][1:])
    assert "one-gpu-busy" in [f["rule"] for f in report["findings"]]
    assert_gone([pid for pids in samplers_seen(result.stdout).values() for pid in pids])


def test_a_failed_step_is_reported_and_envrun_exits_with_its_status(reference_image: Path, program: Path,
                                                                    tmp_path: Path) -> None:
    out = tmp_path / "rep"
    result = envrun(reference_image, "--report", str(out), "--report-interval", "1s", "srun", "-n1", "python",
                    str(program), "3", "3", cwd=tmp_path)
    assert result.returncode == 3, result.stdout + result.stderr
    text = summary(result.stderr)
    assert "exit code 3" in text.splitlines()[0], text
    report = json.loads((out / "report.json").read_text())
    assert report["exit_code"] == 3 and "failed-step" in [f["rule"] for f in report["findings"]]
    assert_gone([pid for pids in samplers_seen(result.stdout).values() for pid in pids])


def test_no_report_starts_no_sampler_and_prints_no_summary(reference_image: Path, program: Path, tmp_path: Path) -> None:
    result = envrun(reference_image, "--no-report", "srun", "-n1", "python", str(program), "1", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert SUMMARY not in result.stderr and "envrun: report" not in result.stderr
    seen = samplers_seen(result.stdout)
    assert seen and all(pids == [] for pids in seen.values()), result.stdout


def test_sbatch_wait_ends_with_the_summary_and_writes_the_report_beside_the_output(reference_image: Path,
                                                                                   program: Path, tmp_path: Path) -> None:
    result = run_cli([ENVRUN, "sbatch", "--system", "local", "--image", str(reference_image), "--submit", "--wait",
                      "--launcher", "srun", "--job-name", "rep", "--", "python", program.name, "3"],
                     cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    job = result.stdout.split()[0]
    output = tmp_path / f"rep-{job}.out"
    lines = [line for line in output.read_text().splitlines() if line.strip()]
    start = next(i for i, line in enumerate(lines) if line.startswith(SUMMARY))
    assert f"job {job}" in lines[start]
    assert lines[-1].startswith("report: ") and lines[-1].endswith(f"rep-{job}.report"), lines[start:]
    assert SUMMARY in result.stdout + result.stderr  # --wait follows the output to its end
    report = json.loads((tmp_path / f"rep-{job}.report" / "report.json").read_text())
    assert report["job"]["id"] == job and report["schema"] == "envrun-report/1"


KNOWN_LOAD = REPO / "tests/support/known_load.py"


def truths(stdout: str) -> dict[int, tuple[float, float]]:
    """Rank -> (its CPU seconds from its own getrusage, its wall seconds): the TRUTH lines of known_load.py."""
    found = {}
    for match in re.finditer(r"^TRUTH rank=(\d+) cpu_s=([\d.]+) wall_s=([\d.]+)$", stdout, re.M):
        found[int(match.group(1))] = (float(match.group(2)), float(match.group(3)))
    return found


def assert_agrees_with_truth(report: dict[str, object], stdout: str) -> dict[int, dict[str, object]]:
    """Every rank's exact CPU seconds and mean busy cores in report.json against its own getrusage: within 5 %
    or 0.05 cores (0.05 s per second of its life for the seconds)."""
    truth = truths(stdout)
    ranks = {r["rank"]: r for r in report["ranks"]}  # type: ignore[index, union-attr]
    assert sorted(ranks) == sorted(truth), (ranks, stdout)
    for rank, (cpu_s, wall_s) in truth.items():
        entry = ranks[rank]
        cores = cpu_s / wall_s
        assert abs(entry["cpu_s"] - cpu_s) <= max(0.05 * cpu_s, 0.05 * wall_s), (rank, entry, cpu_s, wall_s)
        assert abs(entry["cpu_cores"] - cores) <= max(0.05 * cores, 0.05), (rank, entry, cores)
        assert entry["cpu_source"] in ("exit", "last-read"), entry
    return ranks


# The matrix of known programs at the default interval (one GPU/CPU sample every 5 s; the first seconds are
# sampled densely): each rank's figures against its own getrusage.
TRUTH_CASES = {
    "busy-and-idle": (["srun", "-n2", "python", "known_load.py", "7", "busy,idle"], {1}),
    "short-step": (["srun", "-n2", "python", "known_load.py", "3", "busy"], set()),
    "rank-exits-early": (["srun", "-n2", "python", "known_load.py", "7", "busy", "--exit-after", "2"], set()),
    "dataloader-workers": (["srun", "torchrun", "--nproc-per-node", "2", "known_load.py", "4", "half",
                            "--workers", "1"], set()),
}


@pytest.mark.quiet
@pytest.mark.parametrize("case", sorted(TRUTH_CASES))
def test_the_report_agrees_with_each_ranks_own_getrusage(case: str, reference_image: Path, tmp_path: Path) -> None:
    words, idle = TRUTH_CASES[case]
    (tmp_path / "known_load.py").write_text(KNOWN_LOAD.read_text())
    out = tmp_path / "rep"
    result = envrun(reference_image, "--report", str(out), *words, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["interval_s"] == 5.0
    assert_agrees_with_truth(report, result.stdout)
    named = {f["what"] for f in report["findings"] if f["rule"] == "idle-rank" and f["level"] == "problem"}
    if idle:
        assert len(named) == 1 and next(iter(named)).startswith("rank 1 idle"), report["findings"]
    else:
        assert not named, report["findings"]  # no rank that computed is called idle
    text = summary(result.stderr)
    assert "found nothing" not in text or not idle


@pytest.mark.quiet
def test_the_report_agrees_with_sstat_while_the_step_runs(reference_image: Path, tmp_path: Path) -> None:
    """Slurm's own accounting (jobacct_gather/linux, provision/cluster.sh) read by `sstat` during the step is a
    lower bound of the step's CPU seconds the report gives at its end, and not far below it. sstat counts in whole
    seconds and includes the launcher (apptainer); `sacct` has no database here."""
    (tmp_path / "known_load.py").write_text(KNOWN_LOAD.read_text())
    out = tmp_path / "rep"
    args = [ENVRUN, "--image", str(reference_image), "--report", str(out), "srun", "-n2", "-J", "truth-sstat",
            "python", "known_load.py", "8", "busy"]
    with subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        time.sleep(6)
        job = subprocess.run(["squeue", "-h", "-n", "truth-sstat", "-o", "%i"], capture_output=True, text=True,
                             timeout=30).stdout.split()
        assert job, "the step is not running"
        stat = subprocess.run(["sstat", "-a", "-P", "-n", "-j", f"{job[0]}.0", "-o", "TRESUsageInTot"],
                              capture_output=True, text=True, timeout=30)
        stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stdout + stderr
    usage = re.search(r"cpu=(?:(\d+)-)?(\d+):(\d+):(\d+)", stat.stdout)
    assert usage, stat.stdout + stat.stderr
    days, hours, minutes, seconds = (int(part or 0) for part in usage.groups())
    sstat_cpu = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    report = json.loads((out / "report.json").read_text())
    ranks = assert_agrees_with_truth(report, stdout)
    reported = sum(float(r["cpu_s"]) for r in ranks.values())  # type: ignore[arg-type]
    # at 6 s the two busy ranks have used about 2 x 5 s (a second for the containers to start): sstat then, in
    # whole seconds, is below the report's total at the end (8 s each) and not more than 2 x 3 s + 2 s below it
    assert sstat_cpu <= reported + 1 and reported - sstat_cpu <= 2 * 3 + 2, (sstat_cpu, reported)


def test_a_two_node_step_reports_both_nodes(two_nodes: None, reference_image: Path, program: Path,
                                            tmp_path: Path) -> None:
    out = tmp_path / "rep"
    result = envrun(reference_image, "--report", str(out), "--report-interval", "1s", "srun", "-N2", "-n2", "python",
                    str(program), "4", cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    text = summary(result.stderr)
    assert "2 nodes" in text.splitlines()[0], text
    report = json.loads((out / "report.json").read_text())
    assert sorted(n["node"] for n in report["nodes"]) == ["node1", "node2"]
    assert sorted(report["job"]["nodes"]) == ["node1", "node2"]
    assert sorted((r["rank"], r["node"]) for r in report["ranks"]) == [(0, "node1"), (1, "node2")]
    assert all(n["samples"] >= 2 for n in report["nodes"])
    seen = samplers_seen(result.stdout)
    assert sorted(seen) == ["node1", "node2"] and all(len(pids) == 1 for pids in seen.values()), result.stdout
    assert_gone([pid for pids in seen.values() for pid in pids])


@pytest.mark.quiet
def test_a_two_node_step_agrees_with_each_ranks_own_getrusage(two_nodes: None, reference_image: Path,
                                                               tmp_path: Path) -> None:
    """The matrix's two-node case, at the default interval: alone on the machine like the rest of the matrix (a
    rank's life is read to a scan's precision; with the image tests beside it, container start-up and the
    sampler's wake-up stretch by tenths of a second, past 5 % of a 5 s step)."""
    (tmp_path / "known_load.py").write_text(KNOWN_LOAD.read_text())
    truth_out = tmp_path / "truth"
    measured = envrun(reference_image, "--report", str(truth_out), "srun", "-N2", "-n2", "python", "known_load.py",
                      "5", "busy,idle", cwd=tmp_path, timeout=300)
    assert measured.returncode == 0, measured.stdout + measured.stderr
    truth_report = json.loads((truth_out / "report.json").read_text())
    assert_agrees_with_truth(truth_report, measured.stdout)
    assert next(f["what"] for f in truth_report["findings"] if f["rule"] == "idle-rank").startswith("rank 1 (node node2) idle")
