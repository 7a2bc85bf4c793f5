"""Which of the command's host paths the container sees (envbuild.launch.visibility): the program file is bound
by its directory, other paths outside the binds are warned about, system directories are never bound. Pure:
the host's file system is a table here."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from envbuild.launch.visibility import HostPaths, check_visibility, program_file_index, visible_roots
from envbuild.shared.errors import UsageError
from tests.launch.test_plan import plan

ENVIRON = {"HOME": "/home/u"}


class TableHost(HostPaths):
    """A file system of a few paths: {path: real path} for files, and directories in `dirs`."""

    def __init__(self, files: dict[str, str | None] | None = None, dirs: dict[str, str | None] | None = None) -> None:
        super().__init__()
        self.entries = {path: (real or path, False) for path, real in (files or {}).items()}
        self.entries.update({path: (real or path, True) for path, real in (dirs or {}).items()})
        self.asked: list[str] = []

    def look(self, path: str) -> tuple[str, bool] | None:
        self.asked.append(path)
        return self.entries.get(path)


def check(*program: str, files: dict[str, str | None] | None = None, dirs: dict[str, str | None] | None = None,
          binds: tuple[str, ...] = (), flags: tuple[str, ...] = (), environ: dict[str, str] | None = None,
          cwd: str = "/work/proj"):
    return check_visibility(program, cwd, [cwd, *binds], flags, ENVIRON if environ is None else environ,
                            TableHost(files, dirs))


# -- which word is the program file --------------------------------------------------------------------


@pytest.mark.parametrize(("command", "index"), [
    ("python t.py", 1), ("python -u t.py --lr 1", 2), ("python3.11 -W ignore -X dev t.py", 5),
    ("/usr/bin/python3 -- t.py", 2), ("python -m pkg.train", None), ("python -c print(1)", None),
    ("python -m torch.distributed.run --nproc-per-node 2 t.py", 5), ("python -mtorch.distributed.run t.py", 2),
    ("torchrun --nnodes 2 --nproc_per_node=4 t.py --x", 4), ("torchrun --standalone -- t.py", 3),
    ("torchrun -m pkg.train", None), ("torchrun --no-python python -u t.py", 4),
    ("accelerate launch --num_processes 2 --multi_gpu t.py", 5), ("accelerate launch -m pkg", None),
    ("deepspeed --num_gpus 2 t.py --deepspeed", 3), ("deepspeed --module pkg", None),
    ("srun -N 2 --gres=gpu:4 python t.py", 5), ("srun -n 2 -- torchrun t.py", 5), ("env A=1 B=2 python t.py", 4),
    ("./run.sh t.py", None), ("bash -c 'python t.py'", None), ("python", None), ("accelerate config", None),
])
def test_the_program_file_is_the_script_its_launcher_runs(command: str, index: int | None) -> None:
    words = tuple(command.split(" ", 2) if command.startswith("bash") else command.split())
    assert program_file_index(words) == index


# -- what the container sees ---------------------------------------------------------------------------


def test_a_program_outside_every_bind_gets_its_directory_bound_read_only() -> None:
    seen = check("torchrun", "/srv/outside/train.py", "--lr", "1", files={"/srv/outside/train.py": None})
    assert seen.binds == ["/srv/outside:/srv/outside:ro"]
    assert "the program /srv/outside/train.py is outside the container's binds" in seen.notes[0]
    assert seen.warnings == []


def test_paths_under_the_working_directory_home_tmp_and_binds_are_seen() -> None:
    files = {"/work/proj/train.py": None, "/home/u/cfg.yaml": None, "/tmp/x/data.txt": None, "/scratch/p/d.bin": None}
    seen = check("python", "train.py", "--cfg", "/home/u/cfg.yaml", "--data=/tmp/x/data.txt", "/scratch/p/d.bin",
                 files=files, binds=("/scratch",))
    assert (seen.binds, seen.warnings) == ([], [])


def test_a_relative_path_that_leaves_the_working_directory_counts_from_it() -> None:
    seen = check("python", "../other/train.py", files={"/work/other/train.py": None})
    assert seen.binds == ["/work/other:/work/other:ro"]


def test_other_paths_outside_the_binds_get_a_warning_with_the_bind_fix_in_each_form() -> None:
    files = {"/work/proj/train.py": None, "/data/set/a.bin": None}
    seen = check("python", "train.py", "--data=/data/set/a.bin", "--out", "/results", files=files,
                 dirs={"/results": None})
    assert seen.binds == []
    assert seen.warnings == [
        "/data/set/a.bin is not under any bind, so the container will not see it; fix: --bind /data/set "
        "(if the image has its own copy, ignore this)",
        "/results is not under any bind, so the container will not see it; fix: --bind /results "
        "(if the image has its own copy, ignore this)",
    ]


def test_a_path_next_to_the_bound_program_is_seen_through_its_bind() -> None:
    files = {"/srv/outside/train.py": None, "/srv/outside/cfg.yaml": None}
    seen = check("python", "/srv/outside/train.py", "--config=/srv/outside/cfg.yaml", files=files)
    assert seen.binds == ["/srv/outside:/srv/outside:ro"] and seen.warnings == []


def test_nonexistent_paths_are_ignored() -> None:
    seen = check("python", "/nowhere/train.py", "--out=/nowhere/out", "0.5", "--x")
    assert (seen.binds, seen.warnings) == ([], [])


def test_a_link_in_the_working_directory_that_leads_out_of_every_bind_is_not_seen() -> None:
    seen = check("python", "train.py", "--data", "data", files={"/work/proj/train.py": "/srv/code/train.py"},
                 dirs={"/work/proj/data": "/lustre/datasets/imagenet"})
    assert seen.binds == ["/srv/code:/srv/code:ro"]  # the link's target: the working directory is bound already
    assert seen.warnings == ["data (/work/proj/data) is not under any bind, so the container will not see it; "
                             "fix: --bind /work/proj/data (if the image has its own copy, ignore this)"]


def test_a_program_under_a_linked_directory_binds_the_directory_by_its_own_name() -> None:
    """apptainer mounts what a linked bind source leads to: binding /data/link shows the program there."""
    seen = check("python", "/data/link/train.py", files={"/data/link/train.py": "/outside/train.py"},
                 dirs={"/data/link": "/outside"})
    assert seen.binds == ["/data/link:/data/link:ro"]


def test_a_bound_directory_that_is_a_link_on_the_host_still_shows_its_files() -> None:
    """LUMI: /scratch/project_X leads to /pfs/lustrepN/...; the container shows the linked-to files at /scratch."""
    seen = check("python", "/scratch/p/train.py", binds=("/scratch",),
                 files={"/scratch/p/train.py": "/pfs/lustrep2/scratch/p/train.py"}, dirs={"/scratch": "/pfs/lustrep2/scratch"})
    assert (seen.binds, seen.warnings) == ([], [])


@pytest.mark.parametrize(("program", "where"), [
    ("/usr/local/lib/train.py", "/usr/local/lib, a system directory"), ("/train.py", "/, the root directory"),
    ("/etc/x/train.py", "/etc/x, a system directory"),
])
def test_a_program_in_a_system_directory_is_refused_with_a_fix(program: str, where: str) -> None:
    with pytest.raises(UsageError) as caught:
        check("python", program, files={program: None})
    assert f"the program {program} is in {where}" in caught.value.message
    assert f"cp {program} /work/proj/" in (caught.value.hint or "")


def test_other_paths_in_system_directories_are_the_images_own() -> None:
    seen = check("python", "train.py", "/etc/passwd", "--dev=/dev/shm", "/usr/bin/python3",
                 files={"/work/proj/train.py": None, "/etc/passwd": None, "/usr/bin/python3": None},
                 dirs={"/dev/shm": None})
    assert (seen.binds, seen.warnings) == ([], [])


@pytest.mark.parametrize(("flags", "home", "tmp"), [
    ((), True, True), (("--no-home",), False, True), (("--contain",), False, False), (("-C",), False, False),
    (("--no-mount", "tmp,cwd"), True, False), (("--no-mount=home",), False, True),
])
def test_the_runtimes_default_mounts_count_unless_the_recipes_flags_turn_them_off(flags, home: bool, tmp: bool) -> None:
    roots = visible_roots(["/work/proj"], flags, ENVIRON)
    assert ("/home/u" in roots, "/tmp" in roots and "/var/tmp" in roots) == (home, tmp)
    seen = check("python", "/home/u/train.py", flags=flags, files={"/home/u/train.py": None})
    assert seen.binds == ([] if home else ["/home/u:/home/u:ro"])


def test_binds_from_the_runtimes_variables_count_and_a_bind_to_another_path_does_not() -> None:
    roots = visible_roots(["/work/proj", "/data:/mnt/data", "/proj/a:/proj/a:ro"], (),
                          {"APPTAINER_BIND": "/appl, /users:/users", "SINGULARITY_BIND": "/opt/x:/y"})
    assert roots == ["/work/proj", "/proj/a", "/appl", "/users", "/tmp", "/var/tmp"]


def test_the_check_asks_the_file_system_a_few_times_only() -> None:
    host = TableHost({"/srv/outside/train.py": None})
    check_visibility(("torchrun", "--nproc-per-node=2", "/srv/outside/train.py", "--lr", "3e-4", "--epochs", "3"),
                     "/work/proj", ["/work/proj"], (), ENVIRON, host)
    assert len(host.asked) <= 12 and len(set(host.asked)) == len(host.asked)


# -- in the launch plan --------------------------------------------------------------------------------


def test_the_plan_binds_the_program_and_says_why() -> None:
    launch = plan_with_paths("srun", "python", "/srv/outside/train.py", files={"/srv/outside/train.py": None})
    argv = list(launch.argv)
    at = argv.index("/srv/outside:/srv/outside:ro")
    assert argv[at - 1] == "--bind" and at < argv.index("--pwd") and argv[argv.index("--pwd") + 2] == "/img/env.sif"
    assert launch.program_binds == ("/srv/outside:/srv/outside:ro",)
    assert any(reason.startswith("--bind /srv/outside:/srv/outside:ro: the program") for reason in launch.reasons)
    assert "--bind /srv/outside:/srv/outside:ro" in launch.script()  # --dry-run prints the very plan that runs


def test_the_plan_warns_about_other_paths_and_a_bind_silences_it() -> None:
    files = {"/data/cfg.yaml": None}
    launch = plan_with_paths("python", "-c", "pass", "--config=/data/cfg.yaml", files=files)
    assert launch.warnings == ("/data/cfg.yaml is not under any bind, so the container will not see it; fix: --bind "
                               "/data (if the image has its own copy, ignore this)",)
    assert "--bind /data" in launch.script()  # the warning is a comment of the --dry-run script
    assert plan_with_paths("python", "-c", "pass", "--config=/data/cfg.yaml", files=files, binds=("/data",)).warnings == ()


def test_a_plan_without_the_host_file_system_checks_nothing(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    assert not [word for word in plan("python", str(tmp_path / "train.py")).argv if word.endswith(":ro")]


def plan_with_paths(*command: str, files: dict[str, str | None], binds: tuple[str, ...] = ()):
    from envbuild.host.buildhost import Runtime
    from envbuild.launch.launchplan import LaunchRequest, plan_launch
    from envbuild.recipes.loadrecipe import load_recipe
    from tests.launch.test_plan import HOST

    return plan_launch(LaunchRequest(
        command=command, image="/img/env.sif", recipe=load_recipe("local"),
        runtime=Runtime("/usr/bin/apptainer", "apptainer"), cwd="/work/proj", binds=binds, environ=dict(ENVIRON),
        host=HOST, host_paths=TableHost(files)))


def test_the_host_file_system_answers_real_paths_and_nothing_for_odd_words(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    host = HostPaths()
    assert host.found(str(tmp_path / "link")) == (os.path.realpath(tmp_path / "real"), True)
    assert host.found(str(tmp_path / "nothing")) is None
    assert host.found("bad\0word") is None


# -- envrun sbatch: the same check before submission ---------------------------------------------------


def test_the_batch_plan_warns_notes_the_program_bind_and_carries_bind() -> None:
    from envbuild.host.buildhost import Runtime
    from envbuild.recipes.loadrecipe import load_recipe
    from envbuild.slurm.batch.jobplan import BatchRequest, plan_batch
    from envbuild.slurm.batch.resources import JobRequest
    from envbuild.slurm.batch.script import render_script
    from tests.launch.test_plan import HOST

    host = TableHost({"/srv/outside/train.py": None, "/data/a.bin": None, "/results/b.bin": None})
    request = BatchRequest(command=("torchrun", "/srv/outside/train.py", "/data/a.bin", "/results/b.bin"),
                           job=JobRequest(nodes=2), image="/work/proj/env.sif", cwd="/work/proj", binds=("/results",),
                           host_paths=host)
    job = plan_batch(load_recipe("local"), request, Runtime("/usr/bin/apptainer", "apptainer"), HOST)
    assert [w for w in job.warnings if "bind" in w] == [
        "/data/a.bin is not under any bind, so the container will not see it; fix: --bind /data "
        "(if the image has its own copy, ignore this)"]
    assert any(line.startswith("--bind /srv/outside:/srv/outside:ro: the program") for line in job.explain)
    text = render_script(job)
    assert "--image /work/proj/env.sif --bind /results --report %x-%j.report srun torchrun /srv/outside/train.py" in text
    assert "# warning: /data/a.bin is not under any bind" in text


def test_envrun_sbatch_prints_the_warning_before_sbatch_and_refuses_a_system_program(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from envbuild.cli.sbatch_cmd import build_parser, run
    from envbuild.launch import visibility
    from envbuild.slurm.batch import submit

    monkeypatch.setattr(visibility, "RUNTIME_TMP_MOUNTS", ())  # this test's files in /tmp count as outside
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("ENVRUN_CONFIG", raising=False)
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    for name in ("proj", "outside", "data"):
        (tmp_path / name).mkdir()
    (tmp_path / "proj" / "env.sif").write_bytes(b"")
    (tmp_path / "outside" / "train.py").write_text("print('hi')\n")
    monkeypatch.chdir(tmp_path / "proj")
    submitted: dict[str, str] = {}

    def fake_submit(script: str, cwd: str, run: object = None) -> str:  # run: the stdin delivery (issue 40)
        submitted["stderr"] = capsys.readouterr().err  # what envrun sbatch printed before sbatch ran
        submitted["script"] = Path(script).read_text()
        return "42"

    monkeypatch.setattr(submit, "submit", fake_submit)
    argv = ["--system", "local", "--image", "env.sif", "--nodes", "2", "--submit", "--",
            "torchrun", str(tmp_path / "outside" / "train.py"), "--data", str(tmp_path / "data")]
    assert run(build_parser().parse_args(argv), argv) == 0
    assert (f"envrun sbatch: warning: {tmp_path}/data is not under any bind, so the container will not see it; "
            f"fix: --bind {tmp_path}/data") in submitted["stderr"]
    assert f"--bind {tmp_path}/outside:{tmp_path}/outside:ro: the program" in submitted["script"]

    refused = ["--system", "local", "--image", "env.sif", "--launcher", "srun", "--submit", "--", "python", "/etc/passwd"]
    submitted.clear()
    with pytest.raises(UsageError, match="the program /etc/passwd is in /etc, a system directory"):
        run(build_parser().parse_args(refused), refused)
    assert submitted == {}  # refused before submission
