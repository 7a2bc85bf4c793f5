"""Host records: captured from this machine, written and read back as JSON; findings and exit codes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from envbuild.doctor.checkresults import DoctorReport, fail, info, ok, warn
from envbuild.doctor.hostrecord import capture_host, load_record, record_from_json


def test_capture_this_machine(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "lib.so.1").write_text("")
    (tmp_path / "ro").mkdir(mode=0o500)
    record = capture_host([str(tmp_path / "data"), str(tmp_path / "lib.so.1"), str(tmp_path / "nope")],
                          [str(tmp_path / "lib.so*")], [str(tmp_path / "data/hf"), str(tmp_path / "ro")],
                          environ={"SLURM_JOB_ID": "5", "HF_HOME": "/x", "SECRET_TOKEN": "s3cr3t"})
    assert record.paths[str(tmp_path / "data")] == "dir" and record.paths[str(tmp_path / "lib.so.1")] == "file"
    assert record.paths[str(tmp_path / "nope")] == "missing"
    assert record.matches(str(tmp_path / "lib.so*")) == [str(tmp_path / "lib.so.1")]
    assert record.writable[str(tmp_path / "data/hf")] is True  # not there yet: its parent decides
    if os.geteuid() != 0:  # root writes anywhere
        assert record.writable[str(tmp_path / "ro")] is False
    assert record.env == {"SLURM_JOB_ID": "5", "HF_HOME": "/x"}  # only the variables the checks read
    assert record.cpus >= 1 and record.hostname


def test_json_round_trip(tmp_path: Path) -> None:
    record = capture_host([str(tmp_path)], [], [], environ={})
    path = tmp_path / "r.json"
    path.write_text(record.to_json())
    again = load_record(str(path))
    assert again.paths == record.paths and again.hostname == record.hostname and again.source == str(path)


@pytest.mark.parametrize("text", ["[]", '{"cpus": 1}'])
def test_not_a_record(text: str) -> None:
    with pytest.raises(ValueError, match="not a doctor host record"):
        record_from_json(text, "x.json")


def test_exit_codes() -> None:
    report = DoctorReport("s", "h", [ok("a", "fine"), info("a", "later")])
    assert report.exit_code() == 0 and report.exit_code(strict=True) == 0
    report.findings.append(warn("a", "hm", "why", "fix"))
    assert report.exit_code() == 0 and report.exit_code(strict=True) == 1
    report.findings.append(fail("a", "bad", "why", "fix"))
    assert report.exit_code() == 1 and report.exit_code(strict=True) == 1
    with pytest.raises(ValueError):
        ok("a", "x").__class__("nope", "a", "x")


def test_records_survive_interleaved_node_output(tmp_path: Path) -> None:
    """srun forwards two nodes' output in pieces; each record travels as short numbered lines."""
    from envbuild.doctor.hostrecord import join_record_lines, record_lines

    one = capture_host([str(tmp_path / f"p{i}") for i in range(40)], [], [], environ={"SLURM_JOB_ID": "1"})
    two = record_from_json(one.to_json(), "x")
    two.hostname = "node2"
    lines_one, lines_two = record_lines(one), record_lines(two)
    assert len(lines_one) > 2 and all(len(line) < 1024 for line in lines_one)
    mixed = [line for pair in zip(lines_two, lines_one, strict=True) for line in pair]
    joined = join_record_lines("srun: noise\n" + "\n".join(reversed(mixed)) + "\n")
    assert sorted(r.hostname for r in joined) == sorted([one.hostname, "node2"])
    assert all(r.paths == one.paths for r in joined)
    assert join_record_lines("\n".join(lines_one[:-1])) == []  # an incomplete record is not used
