"""The report of one srun step as envrun's supervisor keeps it (envbuild.report.stepreport): where its files go,
and that nothing in it can fail the step."""

from __future__ import annotations

import json
from pathlib import Path

from envbuild.report.stepreport import StepReport, expand_directory, target_directory
from envbuild.report.wire import MARKER_BYTES, SCHEMA, encode, is_key

JOB = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "train", "USER": "alice", "SLURM_ARRAY_JOB_ID": "4240",
       "SLURM_ARRAY_TASK_ID": "2"}


def test_slurm_patterns_in_the_directory_are_the_jobs() -> None:
    assert expand_directory("%x-%j.report", JOB) == "train-4242.report"
    assert expand_directory("runs/%A_%a/%u/100%%", JOB) == "runs/4240_2/alice/100%"
    assert expand_directory("r-%j-%N", {}) == "r-local-%N"  # outside a job; %N (a node) means nothing here


def test_a_second_step_of_the_job_keeps_the_first_steps_report(tmp_path: Path) -> None:
    assert target_directory(str(tmp_path), {}) == str(tmp_path)
    (tmp_path / "report.json").write_text("{}")
    assert target_directory(str(tmp_path), {}) == str(tmp_path / "step-1")


def payloads(*records: dict[str, object]) -> list[str]:
    key = "ab" * 16
    return [line[len(MARKER_BYTES) + len(key) : -1].decode() for record in records for line in encode(record, key)]


def test_every_step_has_its_own_key() -> None:
    keys = {StepReport(command=("srun", "true"), environ={}).key for _ in range(20)}
    assert len(keys) == 20 and all(is_key(key) for key in keys)


def test_records_in_summary_and_files_out(tmp_path: Path) -> None:
    report = StepReport(command=("srun", "python", "train.py"), environ=JOB, directory=str(tmp_path / "%x-%j"))
    start = {"v": SCHEMA, "kind": "start", "node": "n1", "seq": 0, "t": 100.0, "interval": 1.0, "cpus": 2,
             "gpu_source": None, "gpu_note": "no GPU tool", "gpu_names": []}
    samples = [{"v": SCHEMA, "kind": "sample", "node": "n1", "seq": i, "t": 100.0 + i, "load1": 1.0,
                "ranks": [{"rank": 0, "local_rank": 0, "pid": 10, "procs": 1, "threads": 1, "cpu_s": 1.0 * i,
                           "rss": 1 << 20, "cores": 1},
                          {"rank": 1, "local_rank": 1, "pid": 11, "procs": 1, "threads": 1, "cpu_s": 0.0,
                           "rss": 1 << 20, "cores": 1}],
                "launcher": {"procs": 2, "cpu_s": 0.1, "rss": 1 << 20}, "gpus": []} for i in range(1, 6)]
    for payload in payloads(start, *samples):
        report.feed(payload)
    report.feed("garbage that is not json")
    report.line("envrun-metric: samples_per_s=12.5")
    text = report.finish(3)
    assert "rank 1 idle" in text and "exit code 3" in text and text.endswith(f"report: {tmp_path}/train-4242\n")
    data = json.loads((tmp_path / "train-4242" / "report.json").read_text())
    assert data["exit_code"] == 3 and [r["rank"] for r in data["ranks"]] == [0, 1]


def test_no_records_says_so_and_writes_nothing(tmp_path: Path) -> None:
    report = StepReport(command=("srun", "true"), environ={}, directory=str(tmp_path / "r"))
    assert report.finish(0).startswith("envrun: report: no sampler reported")
    assert not (tmp_path / "r").exists()


def test_a_report_that_cannot_be_written_costs_the_report_not_the_step(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file where the directory should be")
    report = StepReport(command=("srun", "true"), environ={}, directory=str(blocker / "sub"))
    start = {"v": SCHEMA, "kind": "start", "node": "n1", "seq": 0, "t": 1.0, "interval": 1.0, "cpus": 1,
             "gpu_source": None, "gpu_note": "", "gpu_names": []}
    for payload in payloads(start):
        report.feed(payload)
    assert report.finish(0).startswith("envrun: report: could not write the report")
