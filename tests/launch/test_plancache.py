"""The plan kept per user (envbuild.launch.plancache, envbuild.launch.planrecord): a repeat launch execs the plan
stored for its command line without planning, and anything the plan was made from that changes (a variable it
read, the project file's content, owner or mode, its directory's mode, the image, a recipe, the runtime on
PATH) makes it plan again, with the trust checks, and exec what --dry-run prints. envrun runs in a subprocess
(as a user runs it) with its exec replaced by a report of what it would exec."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO

# envrun's main with os.execvpe replaced: what it would exec, and whether it planned (loaded the planner).
LAUNCH = """
import os, sys
sys.path.insert(0, sys.argv[1])
report = sys.argv[2]
del sys.argv[1:3]
def stop(program, argv, env):
    import json
    with open(report, "w") as handle:
        json.dump({"argv": list(argv), "env": env, "planned": "envbuild.launch.launchplan" in sys.modules}, handle)
    os._exit(0)
os.execvpe = stop
from envbuild.cli.envrun_main import main
main()
"""


class Launcher:
    """envrun in `cwd` with a stand-in apptainer on PATH, the user's cache and config in tmp_path."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        runtime = bin_dir / "apptainer"
        runtime.write_text("#!/bin/sh\necho 'apptainer version 1.4.5'\n")
        runtime.chmod(0o755)
        self.image = tmp_path / "images" / "a.sif"
        self.image.parent.mkdir()
        self.image.write_bytes(b"no SIF header: read as an image of no known architecture\n")
        self.cwd = tmp_path / "project"
        self.cwd.mkdir(mode=0o755)
        self.env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path / "home"),
                    "XDG_CACHE_HOME": str(tmp_path / "cache"), "XDG_CONFIG_HOME": str(tmp_path / "config"),
                    "ENVBUILD_SYSTEM": "local", "ENVBUILD_CACHE_DIR": str(tmp_path / "store")}

    def run(self, argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> dict[str, Any]:
        """What envrun would exec ("argv", "env", whether it "planned"), or its refusal ("code", "stderr")."""
        report = self.tmp / "report.json"
        report.unlink(missing_ok=True)
        done = subprocess.run([sys.executable, "-I", "-S", "-c", LAUNCH, str(REPO), str(report), *argv],
                              capture_output=True, text=True, env=env or self.env, cwd=cwd or self.cwd, timeout=120)
        if not report.exists():
            return {"code": done.returncode, "stderr": done.stderr, "stdout": done.stdout}
        result: dict[str, Any] = json.loads(report.read_text())
        result["stderr"] = done.stderr
        return result

    def settled(self, argv: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
        """The launch once its caches are filled (the first one validates recipes and asks the runtime its
        version, which no stored plan may depend on) and its plan is stored: the third is from the plan."""
        for _ in range(2):
            self.run(argv, env)
        result = self.run(argv, env)
        assert not result.get("planned", True), result
        return result

    def dry_run_plan(self, argv: list[str], env: dict[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
        """(argv, variables set) of the script --dry-run prints."""
        done = subprocess.run([sys.executable, "-I", "-S", "-c", LAUNCH, str(REPO), str(self.tmp / "unused.json"),
                               "--dry-run", *argv], capture_output=True, text=True, env=env or self.env,
                              cwd=self.cwd, timeout=120)
        assert done.returncode == 0, done.stderr
        words = shlex.split(done.stdout, comments=True)
        exports = dict(word.split("=", 1) for word, before in zip(words[1:], words[:-1], strict=True) if before == "export")
        return words[words.index("exec") + 1:], exports


@pytest.fixture
def launcher(tmp_path: Path) -> Launcher:
    return Launcher(tmp_path)


def plan_files(launcher: Launcher) -> list[str]:
    cache = launcher.tmp / "cache" / "envrun"
    return sorted(name for name in os.listdir(cache) if name.startswith("plan-")) if cache.exists() else []


def test_a_repeat_launch_execs_the_stored_plan_which_is_the_dry_run_plan(launcher: Launcher) -> None:
    argv = ["--image", str(launcher.image), "python", "train.py"]
    first = launcher.run(argv)
    assert first["planned"]
    cached = launcher.settled(argv)
    assert cached["argv"] == first["argv"] and cached["env"] == first["env"]
    dry_argv, exports = launcher.dry_run_plan(argv)
    assert cached["argv"] == dry_argv
    assert {name: cached["env"][name] for name in exports} == exports
    assert len(plan_files(launcher)) == 1
    cache = launcher.tmp / "cache" / "envrun"
    assert (cache / plan_files(launcher)[0]).stat().st_mode & 0o777 == 0o600


def test_dry_run_and_explain_plan_afresh_and_store_nothing(launcher: Launcher) -> None:
    for argv in (["--dry-run", "--image", str(launcher.image), "true"], ["--explain", "--image", str(launcher.image), "true"]):
        for _ in range(3):
            result = launcher.run(argv)
            assert result.get("planned", True), result
    assert plan_files(launcher) == []


def test_srun_launches_are_not_stored(launcher: Launcher) -> None:
    env = {**launcher.env, "ENVRUN_REPORT": "off"}
    srun = launcher.tmp / "bin" / "srun"
    srun.write_text("#!/bin/sh\nexit 0\n")
    srun.chmod(0o755)
    for _ in range(3):
        subprocess.run([sys.executable, "-I", "-S", "-c", LAUNCH, str(REPO), str(launcher.tmp / "r.json"), "--image",
                        str(launcher.image), "srun", "python", "x.py"], env=env, cwd=launcher.cwd, capture_output=True,
                       timeout=120)
    assert plan_files(launcher) == []


def test_in_a_slurm_job_every_launch_plans_and_nothing_is_kept(launcher: Launcher) -> None:
    """A job's variables differ per job and task: its plans would not be used again, and each task writing one
    would load a shared home file system."""
    argv = ["--image", str(launcher.image), "python", "x.py"]
    launcher.settled(argv)  # kept outside the job
    stored = plan_files(launcher)
    job = {**launcher.env, "SLURM_JOB_ID": "12345", "SLURM_STEP_ID": "0", "SLURM_CPUS_ON_NODE": "2",
           "SLURM_JOB_NUM_NODES": "1", "SLURM_NTASKS": "1"}
    for _ in range(3):
        assert launcher.run(argv, job)["planned"]
    assert plan_files(launcher) == stored
    assert not launcher.run(argv)["planned"]


def test_envrun_plan_cache_off_plans_every_launch(launcher: Launcher) -> None:
    argv = ["--image", str(launcher.image), "python", "x.py"]
    launcher.settled(argv)
    for _ in range(2):
        assert launcher.run(argv, {**launcher.env, "ENVRUN_PLAN_CACHE": "off"})["planned"]


def test_a_variable_the_plan_read_changes_it_one_it_did_not_read_does_not(launcher: Launcher) -> None:
    argv = ["--image", str(launcher.image), "python", "train.py"]
    before = launcher.settled(argv)
    assert "OMP_NUM_THREADS" in before["env"]
    unrelated = launcher.run(argv, {**launcher.env, "SOMETHING_ELSE": "1"})
    assert not unrelated["planned"] and unrelated["argv"] == before["argv"]
    assert unrelated["env"]["SOMETHING_ELSE"] == "1"  # the program's environment is this process's, as ever
    threads = launcher.run(argv, {**launcher.env, "OMP_NUM_THREADS": "3"})
    assert threads["planned"] and threads["env"]["OMP_NUM_THREADS"] == "3"


def write_project(launcher: Launcher, text: str) -> Path:
    project_file = launcher.cwd / "envrun.yaml"
    project_file.write_text(text)
    project_file.chmod(0o644)
    return project_file


def test_an_edited_project_file_is_planned_again(launcher: Launcher) -> None:
    other = launcher.image.parent / "b.sif"
    other.write_bytes(launcher.image.read_bytes())
    project_file = write_project(launcher, f"image: {launcher.image}\nenv: {{HF_HOME: /tmp/hf}}\n")
    before = launcher.settled(["python", "x.py"])
    assert str(launcher.image) in before["argv"]
    project_file.write_text(f"image: {other}\nenv: {{HF_HOME: /tmp/hf2}}\n")
    after = launcher.run(["python", "x.py"])
    assert after["planned"] and str(other) in after["argv"]
    assert after["argv"] == launcher.dry_run_plan(["python", "x.py"])[0]


def test_a_project_file_reached_through_a_link_is_planned_again_when_the_link_moves(launcher: Launcher) -> None:
    """trust reads where the opened descriptor leads (/proc/self/fd/N): kept as the link's real path, asked again."""
    other = launcher.image.parent / "b.sif"
    other.write_bytes(launcher.image.read_bytes())
    first, second = launcher.cwd / "a.yaml", launcher.cwd / "b.yaml"
    first.write_text(f"image: {launcher.image}\n")
    second.write_text(f"image: {other}\n")
    (launcher.cwd / "envrun.yaml").symlink_to("a.yaml")
    assert str(launcher.image) in launcher.settled(["python", "x.py"])["argv"]
    (launcher.cwd / "envrun.yaml").unlink()
    (launcher.cwd / "envrun.yaml").symlink_to("b.yaml")
    moved = launcher.run(["python", "x.py"])
    assert moved["planned"] and str(other) in moved["argv"]


@pytest.mark.parametrize("change", ["file writable by others", "directory writable by others", "file a stranger's"])
def test_a_cached_plan_never_skips_the_trust_checks(launcher: Launcher, change: str) -> None:
    """The walk's facts are the owner, group and mode of each directory and of the file: a project file made
    another's or writable by others is judged again and ignored, with its warning, on the very next launch."""
    project_file = write_project(launcher, f"image: {launcher.image}\n")
    launcher.settled(["python", "x.py"])
    if change == "file writable by others":
        project_file.chmod(0o666)
    elif change == "directory writable by others":
        launcher.cwd.chmod(0o777)
    else:
        if os.geteuid() != 0:
            pytest.skip("giving a file to another user needs root (CI runs the tests as root)")
        os.chown(project_file, 65534, 65534)
    for _ in range(2):  # and again: a plan made while a file was ignored is not stored
        refused = launcher.run(["python", "x.py"])
        assert refused.get("code") == 2 and "ignoring" in refused["stderr"], refused
    launcher.cwd.chmod(0o755)


def test_a_replaced_image_a_changed_recipe_or_runtime_is_planned_again(launcher: Launcher) -> None:
    recipes = launcher.tmp / "recipes"
    recipes.mkdir()
    (recipes / "local.yaml").write_text((REPO / "recipes" / "local.yaml").read_text())
    env = {**launcher.env, "ENVBUILD_RECIPES": str(recipes)}
    argv = ["--image", str(launcher.image), "python", "x.py"]
    launcher.settled(argv, env)
    launcher.image.write_bytes(launcher.image.read_bytes() + b"rebuilt\n")
    assert launcher.run(argv, env)["planned"]
    launcher.settled(argv, env)
    (recipes / "local.yaml").write_text((recipes / "local.yaml").read_text() + "\n# edited\n")
    assert launcher.run(argv, env)["planned"]
    launcher.settled(argv, env)
    moved = launcher.tmp / "bin2"
    moved.mkdir()
    (launcher.tmp / "bin" / "apptainer").rename(moved / "apptainer")
    gone = launcher.run(argv, env)  # planned again: another apptainer on PATH, or a refusal naming none
    assert gone.get("planned", True) and gone.get("argv", ["none"])[0] != str(launcher.tmp / "bin" / "apptainer")


def test_another_directory_or_command_line_is_another_plan(launcher: Launcher) -> None:
    argv = ["--image", str(launcher.image), "python", "x.py"]
    launcher.settled(argv)
    elsewhere = launcher.tmp / "elsewhere"
    elsewhere.mkdir()
    assert launcher.run(argv, cwd=elsewhere)["planned"]
    assert launcher.run([*argv, "--lr", "1"])["planned"]


def test_a_foreign_or_tampered_plan_file_is_a_miss(launcher: Launcher) -> None:
    argv = ["--image", str(launcher.image), "python", "x.py"]
    launcher.settled(argv)
    stored = launcher.tmp / "cache" / "envrun" / plan_files(launcher)[0]
    stored.chmod(0o666)  # others may write it: never read
    assert launcher.run(argv)["planned"]
    launcher.settled(argv)
    import marshal

    key, value = marshal.loads(stored.read_bytes())
    value["argv"] = ["/bin/echo", "tampered"]
    value["facts"].append(("stat", str(launcher.image), (0,)))  # a fact that no longer holds
    stored.write_bytes(marshal.dumps((key, value)))
    assert launcher.run(argv)["planned"]


def test_the_stored_facts_include_envbuild_s_own_source_files(launcher: Launcher) -> None:
    """A plan is made by envbuild's code: an edited module of it (a checkout, an upgrade) is a miss."""
    import marshal

    launcher.settled(["--image", str(launcher.image), "true"])
    stored = launcher.tmp / "cache" / "envrun" / plan_files(launcher)[0]
    _key, value = marshal.loads(stored.read_bytes())
    sources = {fact[1] for fact in value["facts"] if fact[0] == "stat" and fact[1].endswith(".py")}
    assert str(REPO / "envbuild" / "launch" / "launchplan.py") in sources
    assert str(REPO / "envbuild" / "launch" / "trust.py") in sources
