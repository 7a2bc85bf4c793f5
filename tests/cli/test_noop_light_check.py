"""The light up-to-date check of `envbuild build` (envbuild.commands.uptodate): a recorded verdict is answered
only while every input it was made from is unchanged, and answering it loads nothing heavy."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from envbuild.commands import uptodate
from tests.conftest import REPO
from tests.test_architecture import HEAVY_MODULES

RESULT = "/x/out.sif is up to date (image demo-0123456789abcdef); nothing to build"


@pytest.fixture(autouse=True)
def _no_key_left() -> Iterator[None]:
    """The command key the light check keeps for the full path: not left for the next test's CliRunner build."""
    yield
    uptodate._pending.clear()


@pytest.fixture
def inputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    files = {"content": tmp_path / "spec.yaml", "tree": tmp_path / "files", "listing": tmp_path / "recipes",
             "status": tmp_path / "out.sif"}
    files["content"].write_text("name: demo\n")
    files["tree"].mkdir()
    (files["tree"] / "a.txt").write_text("a\n")
    files["listing"].mkdir()
    (files["listing"] / "puhti.yaml").write_text("name: puhti\n")
    files["status"].write_bytes(b"SIF" * 100)
    return files


def record(argv: list[str], inputs: dict[str, Path], *, extra: tuple[tuple[str, str], ...] = ()) -> None:
    """As the full path does: the light check missed, then the full path found the output up to date."""
    assert not uptodate.answer_if_up_to_date(argv, io.StringIO())
    uptodate.remember_verdict([*((kind, str(path)) for kind, path in inputs.items()), *extra],
                              "using spec.lock (3 packages)\n", RESULT)


def answered(argv: list[str]) -> str | None:
    out = io.StringIO()
    return out.getvalue() if uptodate.answer_if_up_to_date(argv, out) else None


ARGV = ["build", "spec.yaml", "-o", "out.sif"]


def test_an_unchanged_command_prints_what_the_full_path_printed(inputs: dict[str, Path]) -> None:
    record(ARGV, inputs)
    said = answered(ARGV)
    assert said is not None and said.startswith(f"using spec.lock (3 packages)\n{RESULT} (")
    assert said.endswith(" s)\n")


MUTATIONS = {
    "content": lambda path: path.write_text("name: demo\npackages: [rich]\n"),
    "tree": lambda path: (path / "a.txt").write_text("b\n"),
    "tree, a file added": lambda path: (path / "b.txt").write_text("b\n"),
    "listing": lambda path: (path / "lumi-g.yaml").write_text("name: lumi-g\n"),
    "status": lambda path: path.write_bytes(b"SIF" * 100),  # the same bytes, written again: another image
    "status, removed": lambda path: path.unlink(),
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_each_kind_of_input_changed_is_not_up_to_date(inputs: dict[str, Path], mutation: str) -> None:
    record(ARGV, inputs)
    assert answered(ARGV) is not None
    MUTATIONS[mutation](inputs[mutation.split(",")[0]])
    assert answered(ARGV) is None, f"{mutation}: still answered as up to date"


def test_an_input_that_appears_is_not_up_to_date(inputs: dict[str, Path], tmp_path: Path) -> None:
    """A file the verdict found absent (SPEC.lock, a pip.conf) that is there now."""
    record(ARGV, inputs, extra=(("content", str(tmp_path / "spec.lock")),))
    assert answered(ARGV) is not None
    (tmp_path / "spec.lock").write_text("version: 1\n")
    assert answered(ARGV) is None


def test_another_command_line_environment_or_directory_is_not_answered(
        inputs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    record(ARGV, inputs)
    assert answered([*ARGV, "--compression", "zstd"]) is None
    monkeypatch.setenv("PIP_INDEX_URL", "https://example.org/simple")
    assert answered(ARGV) is None
    monkeypatch.delenv("PIP_INDEX_URL")
    assert answered(ARGV) is not None
    monkeypatch.setenv("OLDPWD", "/elsewhere")  # what a shell changes and no build reads
    assert answered(ARGV) is not None
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    assert answered(ARGV) is None


def test_envbuild_code_changed_is_another_invocation(inputs: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    record(ARGV, inputs)
    real = uptodate._code_files
    monkeypatch.setattr(uptodate, "_code_files", lambda directory: [*real(directory), "envbuild/new.py:10:1"])
    assert answered(ARGV) is None


@pytest.mark.parametrize("option", sorted(uptodate.NEVER_A_NOOP))
def test_options_that_never_make_a_noop_go_to_the_full_path(option: str) -> None:
    assert not uptodate.may_be_a_noop([*ARGV, option])
    assert uptodate.may_be_a_noop(ARGV)
    assert not uptodate.may_be_a_noop(["lock", "spec.yaml"])


def test_a_corrupt_record_is_a_miss(inputs: dict[str, Path], tmp_path: Path) -> None:
    record(ARGV, inputs)
    for path in (tmp_path / "cache" / "envrun").glob("noop-build-*"):
        path.write_bytes(b"not marshal")
    assert answered(ARGV) is None


def test_only_a_command_that_came_through_the_light_check_is_recorded(inputs: dict[str, Path],
                                                                     tmp_path: Path) -> None:
    uptodate._pending.clear()
    uptodate.remember_verdict([("content", str(inputs["content"]))], "", RESULT)  # from a test's CliRunner
    assert not list((tmp_path / "cache").rglob("noop-build-*"))


# The whole program, as bin/envbuild runs it: the first run records (as the full path would), the second is
# answered by the light check with none of the heavy modules loaded.
LIGHT_RUN = """
import json, sys
from envbuild.commands import uptodate
HEAVY = sys.argv[2].split(",")
sys.argv = ["envbuild", *json.loads(sys.argv[1])]
if sys.argv[-1] == "--record":
    sys.argv.pop()
    uptodate.answer_if_up_to_date(sys.argv[1:], sys.stderr)
    uptodate.remember_verdict([("content", "spec.yaml"), ("status", "out.sif")], "", "out.sif is up to date")
    raise SystemExit(0)
from envbuild.cli import envbuild_entry
try:
    envbuild_entry.main()
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "heavy": sorted(m for m in HEAVY if m in sys.modules)}), file=sys.stderr)
"""


def test_an_up_to_date_build_imports_no_heavy_module(tmp_path: Path) -> None:
    (tmp_path / "spec.yaml").write_text("name: demo\n")
    (tmp_path / "out.sif").write_bytes(b"SIF")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "PYTHONPATH": str(REPO)}
    argv = ["build", "spec.yaml", "-o", "out.sif"]
    for extra in (["--record"], []):
        done = subprocess.run([sys.executable, "-c", LIGHT_RUN, json.dumps([*argv, *extra]), ",".join(HEAVY_MODULES)], capture_output=True,
                              text=True, env=env, cwd=tmp_path, timeout=60)
        assert done.returncode == 0, done.stderr
    lines = done.stderr.strip().splitlines()
    report = json.loads(lines[-1])
    assert report["code"] == 0 and lines[0].startswith("out.sif is up to date ("), done.stderr
    assert report["heavy"] == [], f"an up-to-date build loaded {report['heavy']}"
