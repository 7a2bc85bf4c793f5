"""No user value can inject into a batch script `envrun sbatch` writes (issue 28).

Hostile strings (tests/support/hostile_text.py) go in as the job name, the log pattern, the account, the
partition, the image and overlay paths, staged file names and an archive's top directory, envrun's own path
and the words of the training command. The script runs under real bash with stand-ins for srun and envrun
that record their argv: nothing may run (no PWNED file), staging really copies and extracts the files, and
envrun gets every word byte for byte, `{staged}` turned into the staged path. The #SBATCH lines are read
back the way sbatch reads them (envbuild.slurm.check.parse, which follows src/sbatch/opt.c; the slurm test
below asks the real sbatch). A newline in any of these values is refused, naming the option.

Every logical line is one the generator means (tests/support/script_shape.py): bash parses the script, and
it has the lines of its benign twin (the same request made of a plain value), each of the same kind, with
the same operators and number of words outside quotes. The guard is shown to fail: with the quoting broken
on purpose, each check below raises (test_the_guard_fails_when_the_quoting_is_broken)."""

from __future__ import annotations

import os
import subprocess
import tarfile
import time
from dataclasses import replace
from pathlib import Path

import pytest

from envbuild.host.runtime import Runtime
from envbuild.recipes.loadrecipe import load_recipe
from envbuild.shared.errors import UsageError
from envbuild.slurm.batch.jobplan import BatchRequest, Requeue, plan_batch
from envbuild.slurm.batch.resources import JobRequest
from envbuild.slurm.batch.script import directive_value, render_script
from envbuild.slurm.batch.staging import StageSource
from envbuild.slurm.check.parse import parse_script
from tests.support.hostile_text import (
    MARKER,
    NEWLINES,
    file_name,
    hostile_strings,
    install_stubs,
    marker_files,
    read_records,
)
from tests.support.launch_allocations import HOST
from tests.support.script_shape import bash_syntax_problem, shape_problems

RUNTIME = Runtime("/usr/bin/apptainer", "apptainer")
# a directory a stand-in envrun lives in, itself named to inject
ENVRUN_DIR = f"bin $(touch {MARKER}) 'q\" `x`"


def hostile_request(text: str, root: Path, index: int) -> BatchRequest:
    """Every user value of the request made of `text`; the staged sources exist under `root`."""
    sources = root / "sources"
    sources.mkdir(exist_ok=True)
    plain = sources / file_name(text, "plain")
    plain.write_bytes(b"staged file\n")
    top = file_name(text, "top")
    archive = sources / f"archive-{index}.tar"
    member = root / "member.txt"
    member.write_bytes(b"member\n")
    with tarfile.open(archive, "w") as tar:
        tar.add(member, arcname=f"{top}/inner.txt")
    overlay = "/overlays/" + text.replace(":", "_").replace(",", "_") + ".sqsh"
    job = JobRequest(account=text or None, partition=text or None, launcher="srun", stage_gb=0.001)
    return BatchRequest(
        command=("python", "train.py", text, "--data={staged}/inner.txt", "--plain", "{staged:2}", text),
        job=job, image=f"/images/{text}.sif", overlays=((overlay, "/user-software"),), job_name=text or None,
        output=text or "%x-%j.out", stages=(StageSource(str(archive), "tar", f"archive-{index}", 0.001, top=top),
                                            StageSource(str(plain), "file", plain.name, 0.001)),
        requeue=Requeue() if index % 3 == 0 else None, envrun=str(root / ENVRUN_DIR / "envrun"), cwd=str(root),
        regenerate=f"envrun sbatch --job-name {text}", time_step=index % 3 == 1,
    )


def run_script(text: str, root: Path, job_id: str) -> subprocess.CompletedProcess[bytes]:
    script = root / "job.sbatch"
    script.write_text(text)
    env = {"PATH": f"{root / 'stubs'}{os.pathsep}{root / ENVRUN_DIR}{os.pathsep}/usr/bin:/bin", "HOME": str(root),
           "RECORD": str(root / "calls"), "RECORD_ENV": "ENVRUN_STAGED ENVRUN_STAGED_2", "SLURM_JOB_ID": job_id,
           "SLURM_JOB_NUM_NODES": "1", "SLURMD_NODENAME": "node1", "LC_ALL": "C.UTF-8"}
    return subprocess.run(["bash", str(script)], cwd=root, env=env, capture_output=True, timeout=60, check=False)


def benign_twin(text: str, root: Path, index: int) -> str:
    """The script of the same request made of a plain value (empty where `text` is, as None-able fields
    follow it), planned under `root`."""
    twin = plan_batch(load_recipe("local"), hostile_request("v" if text else "", root, index), RUNTIME, HOST)
    return render_script(twin)


def assert_shaped_as_meant(script: str, twin: str) -> None:
    """bash reads the script, and each logical line is the one the generator means (see script_shape)."""
    syntax = bash_syntax_problem(script)
    assert syntax is None, f"bash -n: {syntax}"
    problems = shape_problems(script, twin)
    assert not problems, "a value broke a line:\n" + "\n".join(problems[:5])


@pytest.mark.parametrize("text", hostile_strings(), ids=lambda text: repr(text)[:40])
def test_hostile_values_reach_sbatch_and_the_step_as_written(text: str, tmp_path: Path) -> None:
    check_the_batch_script(text, tmp_path, hostile_strings().index(text))


def check_the_batch_script(text: str, tmp_path: Path, index: int) -> None:
    request = hostile_request(text, tmp_path, index)
    install_stubs(tmp_path / "stubs", ("srun",))
    install_stubs(tmp_path / ENVRUN_DIR, ("envrun",))
    job = plan_batch(load_recipe("local"), request, RUNTIME, HOST)
    script = render_script(job)

    directives = {d.name: d.value for d in parse_script(script).directives}
    assert directives["job-name"] == (text or job.job_name)
    assert directives["output"] == (text or "%x-%j.out")
    if text:
        assert (directives["account"], directives["partition"]) == (text, text)
    twin_root = tmp_path / "twin"
    twin_root.mkdir()
    assert_shaped_as_meant(script, benign_twin(text, twin_root, index))

    job_id = f"inj{os.getpid()}x{index}x{time.monotonic_ns()}"
    stage_dir = f"/tmp/envrun-stage-{job_id}"
    done = run_script(script, tmp_path, job_id)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert marker_files(tmp_path) == [] and not Path(MARKER).exists()

    calls = read_records(tmp_path / "calls")
    envrun = [call for call in calls if call[0] == "envrun"]
    assert len(envrun) == 1, calls
    top = request.stages[0].top
    staged = f"{stage_dir}/{request.stages[0].name}/{top}"
    plain = f"{stage_dir}/{request.stages[1].name}"
    step = [word.replace("{staged}", staged).replace("{staged:2}", plain) for word in job.step]
    expected = [request.envrun.rsplit("/", 1)[-1], *job.envrun_options, "--bind", stage_dir, "srun", *step]
    words = envrun[0][: len(expected)]
    assert words == expected
    assert envrun[0][len(expected):] == [f"ENVRUN_STAGED={staged}", f"ENVRUN_STAGED_2={plain}"]
    # the staging step copied and extracted under the hostile names; the cleanup removed them again
    staging = [call for call in calls if call[0] == "srun" and "/bin/sh" in call]
    assert len(staging) == 1 and staging[0][-8:-2] == ["tar", request.stages[0].path, request.stages[0].name,
                                                      "file", request.stages[1].path, request.stages[1].name]
    assert b"staged to" in done.stdout and not Path(stage_dir).exists()


@pytest.mark.parametrize("text", NEWLINES, ids=repr)
@pytest.mark.parametrize("field", ["job_name", "output", "account", "partition", "command", "image", "stage"])
def test_a_newline_in_a_value_is_refused_with_its_option(text: str, field: str, tmp_path: Path) -> None:
    base = BatchRequest(command=("python", "train.py"), job=JobRequest(), image="/images/env.sif")
    where = {"job_name": "--job-name", "output": "--job-output", "account": "--account", "partition": "--partition",
             "command": "word 3 of the training command", "image": "--image", "stage": "--stage"}[field]
    changes: dict[str, dict[str, object]] = {
        "job_name": {"job_name": text}, "output": {"output": text}, "image": {"image": text},
        "account": {"job": JobRequest(account=text)}, "partition": {"job": JobRequest(partition=text)},
        "command": {"command": ("python", "train.py", text)},
        "stage": {"stages": (StageSource(f"/data/{text}", "file", "x", 0.0),)},
    }
    request = BatchRequest(**{**base.__dict__, **changes[field]})
    with pytest.raises(UsageError) as info:
        plan_batch(load_recipe("local"), request, RUNTIME, HOST)
    assert info.value.message.startswith(f"{where}: ") and "\n" not in info.value.message
    assert "without it" in (info.value.hint or "")


@pytest.mark.parametrize(("name", "top"), [("a\nb", ""), ("x", "t\nop"), ("..", ""), ("ok", "a/b")])
def test_staged_names_that_are_not_one_line_file_names_are_refused(name: str, top: str) -> None:
    request = BatchRequest(command=("python", "train.py"), job=JobRequest(stage_gb=0.001), image="/images/env.sif",
                           stages=(StageSource("/data/src.tar", "tar", name, 0.001, top=top),))
    job = plan_batch(load_recipe("local"), request, RUNTIME, HOST)
    with pytest.raises(UsageError, match=r"--stage /data/src\.tar: the"):
        render_script(job)


def test_a_recipe_staging_dir_may_expand_variables_only() -> None:
    from envbuild.slurm.batch.staging import stage_dir_value

    assert stage_dir_value("/tmp/envrun-stage-${SLURM_JOB_ID}", "x") == '"/tmp/envrun-stage-${SLURM_JOB_ID}"'
    assert stage_dir_value("$LOCAL_SCRATCH", "x") == '"$LOCAL_SCRATCH"'
    for bad in ("$(id)", "`id`", '/tmp/"x', "/tmp/\\x", "$((1))", "${X:-$(id)}", "/tmp/a\nb"):
        with pytest.raises(UsageError):
            stage_dir_value(bad, "recipes/x.yaml:3")


def test_the_regenerate_comment_cannot_start_a_line() -> None:
    request = BatchRequest(command=("python", "train.py"), job=JobRequest(), image="/images/env.sif",
                           regenerate=f"envrun sbatch -J 'a\ntouch {MARKER}'")
    script = render_script(plan_batch(load_recipe("local"), request, RUNTIME, HOST))
    assert f"# again: envrun sbatch -J 'a\\ntouch {MARKER}'\n" in script


def comment_lines_script(text: str) -> str:
    """A script whose comments carry `text` (the regenerate line, a warning): fields that take a newline."""
    request = BatchRequest(command=("python", "train.py"), job=JobRequest(), image="/images/env.sif",
                           regenerate=f"envrun sbatch -J {text}")
    job = plan_batch(load_recipe("local"), request, RUNTIME, HOST)
    return render_script(replace(job, warnings=[*job.warnings, f"a warning: {text}"]))


@pytest.mark.parametrize("text", [*NEWLINES, *hostile_strings(20)], ids=lambda text: repr(text)[:40])
def test_a_comment_stays_one_comment_line(text: str) -> None:
    assert_shaped_as_meant(comment_lines_script(text), comment_lines_script("v"))


# Each way of breaking the quoting, with a value it lets through: the guard above must fail on it (the shape
# check for the shell's words; sbatch's reading of the #SBATCH line for its values).
BROKEN_QUOTING = [
    ("quote", f"$(touch {MARKER})", "a value broke a line"),  # the training command's words unquoted
    ("quote", "a; b", "a value broke a line"),
    ("quote", "it's", "a value broke a line"),  # its two quotes pair up: bash reads it, a word too many
    ("directive_value", "a b #x", None),  # sbatch reads `a`
    ("directive_value", "two words", None),
]


@pytest.mark.parametrize(("broken", "text", "message"), BROKEN_QUOTING, ids=repr)
def test_the_guard_fails_when_the_quoting_is_broken(broken: str, text: str, message: str | None, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import envbuild.slurm.batch.script as script_module

    monkeypatch.setattr(script_module, broken, lambda value, *_where: value)
    with pytest.raises(AssertionError, match=message):
        check_the_batch_script(text, tmp_path, 1)


def test_the_comment_guard_fails_when_a_comment_is_not_escaped(monkeypatch: pytest.MonkeyPatch) -> None:
    import envbuild.slurm.batch.script as script_module

    monkeypatch.setattr(script_module, "comment", lambda text: f"# {text}")
    with pytest.raises(AssertionError, match="a value broke a line"):
        assert_shaped_as_meant(comment_lines_script(f"a\ntouch {MARKER}"), comment_lines_script("v"))


@pytest.mark.parametrize(("value", "written"), [
    ("plain-name_1.%j", "plain-name_1.%j"), ("a b", '"a b"'), ("", '""'), ('q"uote', '"q\\"uote"'),
    ("back\\slash", '"back\\\\slash"'), ("it's", '"it\'s"'), ("#hash", '"#hash"'),
])
def test_directive_values_are_quoted_for_sbatch(value: str, written: str) -> None:
    assert directive_value(value) == written


@pytest.mark.slurm
def test_real_sbatch_reads_a_hostile_job_name_back(tmp_path: Path) -> None:
    """The local Slurm (provision/cluster.sh) takes the quoted #SBATCH values as written: job name and output."""
    name = f"a b \"c\" #x \\ y'z $(touch {MARKER}) `touch {MARKER}` ; é"
    request = BatchRequest(command=("python", "train.py"), job=JobRequest(), image="/images/env.sif", job_name=name,
                           output=f"{tmp_path}/out %j $(touch {MARKER}).log")
    script = render_script(plan_batch(load_recipe("local"), request, RUNTIME, HOST))
    path = tmp_path / "job.sbatch"
    path.write_text(script.replace("#!/bin/bash\n", "#!/bin/bash\n#SBATCH --hold\n", 1))
    job_id = subprocess.run(["sbatch", "--parsable", str(path)], cwd=tmp_path, capture_output=True, text=True,
                            check=True, timeout=30).stdout.strip().split(";")[0]
    try:
        shown = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True, check=True,
                               timeout=30).stdout
    finally:
        subprocess.run(["scancel", job_id], check=False, timeout=30)
    assert f"JobName={name}\n" in shown
    assert f"StdOut={tmp_path}/out {job_id} $(touch {MARKER}).log\n" in shown
    assert marker_files(tmp_path) == []
