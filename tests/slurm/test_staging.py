"""--stage sources: kinds, names, sizes, and the per-node stage script run with /bin/sh."""

from __future__ import annotations

import os
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest

from envbuild.shared.errors import UsageError
from envbuild.slurm.batch.staging import STAGE_SCRIPT, StageSource, describe_source, staged_variables


def make_tree(root: Path) -> Path:
    (root / "data" / "sub").mkdir(parents=True)
    (root / "data" / "a.txt").write_text("a" * 1000)
    (root / "data" / "sub" / "b.txt").write_text("b" * 500)
    return root / "data"


def test_sources_of_each_kind(tmp_path: Path) -> None:
    data = make_tree(tmp_path)
    with tarfile.open(tmp_path / "data.tar.gz", "w:gz") as archive:
        archive.add(data, arcname="data")
    with zipfile.ZipFile(tmp_path / "flat.zip", "w") as archive:
        archive.write(data / "a.txt", "a.txt")
    (tmp_path / "weights.bin").write_bytes(b"x" * 10)
    directory = describe_source("data", str(tmp_path))
    assert (directory.kind, directory.name, round(directory.size_gb * 1e9)) == ("dir", "data", 1500)
    tar = describe_source(str(tmp_path / "data.tar.gz"), "/")
    assert (tar.kind, tar.name, tar.top, round(tar.size_gb * 1e9)) == ("tar", "data", "data", 1500)
    flat = describe_source("flat.zip", str(tmp_path))
    assert (flat.kind, flat.name, flat.top) == ("zip", "flat", "")
    single = describe_source("weights.bin", str(tmp_path))
    assert (single.kind, single.name) == ("file", "weights.bin")
    assert staged_variables((tar, flat)) == [("ENVRUN_STAGED", '"$ENVRUN_STAGE_DIR"/data/data'),
                                             ("ENVRUN_STAGED_2", '"$ENVRUN_STAGE_DIR"/flat')]


def test_missing_or_broken_sources_are_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--stage nope: no such file or directory"):
        describe_source("nope", str(tmp_path))
    (tmp_path / "bad.tar").write_text("not a tar")
    with pytest.raises(UsageError, match="not a readable tar archive"):
        describe_source("bad.tar", str(tmp_path))
    same = StageSource("/a/x.tar", "tar", "x", 1.0)
    with pytest.raises(UsageError, match="under the same name"):
        staged_variables((same, StageSource("/b/x", "dir", "x", 1.0)))


def test_the_stage_script_extracts_once_and_a_second_node_finds_the_copy(tmp_path: Path) -> None:
    data = make_tree(tmp_path / "src")
    with tarfile.open(tmp_path / "data.tar", "w") as archive:
        archive.add(data, arcname="data")
    target = tmp_path / "local"
    argv = ["/bin/sh", "-c", STAGE_SCRIPT, "envrun-stage", str(target), "tar", str(tmp_path / "data.tar"), "data",
            "dir", str(data), "tree"]
    first = subprocess.run(argv, capture_output=True, text=True, env={"SLURMD_NODENAME": "node1", "PATH": "/usr/bin:/bin"})
    assert first.returncode == 0, first.stderr
    assert (target / "data" / "data" / "sub" / "b.txt").read_text() == "b" * 500
    assert (target / "tree" / "a.txt").exists()
    second = subprocess.run(argv, capture_output=True, text=True, env={"SLURMD_NODENAME": "node2", "PATH": "/usr/bin:/bin"})
    assert second.returncode == 0 and "data is already on node2" in second.stdout
    assert not [p for p in target.iterdir() if ".partial-" in p.name]


def test_a_failing_extraction_fails_the_step(tmp_path: Path) -> None:
    (tmp_path / "bad.tar").write_text("not a tar")
    result = subprocess.run(["/bin/sh", "-c", STAGE_SCRIPT, "envrun-stage", str(tmp_path / "local"), "tar",
                             str(tmp_path / "bad.tar"), "bad"], capture_output=True, text=True)
    assert result.returncode != 0


@pytest.mark.parametrize("planted", ["strangers-dir", "strangers-link", "none", "own-link"])
def test_the_stage_directory_must_be_the_users_own_or_roots(tmp_path: Path, planted: str) -> None:
    """/tmp/envrun-stage-<job id> on a node other jobs share: another user who made it first (or their link there)
    would get the staged data; only the user's own directory or root's (a site's per-job one) is staged into."""
    source = tmp_path / "data.txt"
    source.write_text("dataset")
    stage = tmp_path / "envrun-stage-77"
    elsewhere = tmp_path / "attackers"
    elsewhere.mkdir()
    if planted.startswith("strangers") and os.geteuid() != 0:
        pytest.skip("making another user's directory or link needs root (CI runs as root)")
    if planted == "strangers-dir":
        stage.mkdir()
        os.chown(stage, 12345, 12345)
    elif planted == "strangers-link":
        stage.symlink_to(elsewhere)
        os.lchown(stage, 12345, 12345)
    elif planted == "own-link":
        stage.symlink_to(elsewhere)
    done = subprocess.run(["sh", "-c", STAGE_SCRIPT, "envrun-stage", str(stage), "file", str(source), "data.txt"],
                          capture_output=True, text=True, timeout=30, env={**os.environ, "SLURMD_NODENAME": "n1"})
    if planted.startswith("strangers"):
        assert done.returncode == 1 and "nothing staged" in done.stderr and "fix:" in done.stderr, done.stderr
        assert not list(elsewhere.iterdir()) and not (stage / "data.txt").exists()
    else:
        assert done.returncode == 0, done.stderr
        assert (stage / "data.txt").read_text() == "dataset"
        if planted == "none":
            assert oct(stage.stat().st_mode & 0o777) == "0o700"
