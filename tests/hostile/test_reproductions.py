"""Every reproduction of issue 40, as the victim and the attacker of one project group (tests/support/attacker.py):
the attacker prepares the group directory as the issue tells, the victim runs the command, and nothing of the
victim's (the canary tree in their private home) changes, nothing of the attacker's runs, and what is refused
says so. Each test fails on the old code's shape: the attack it repeats worked there."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.hostile.test_link_planting import DEF_FILE, REPORT_SCRIPT, SPEC, store_with_debris
from tests.support.attacker import (
    ENVBUILD,
    ENVRUN,
    PYTHON,
    Scene,
    attacker,
    changes,
    give,
    make_scene,
    plant_dir,
    plant_link,
    remove_scene,
    victim,
)


@pytest.fixture
def scene() -> Iterator[Scene]:
    made = make_scene()
    try:
        yield made
    finally:
        remove_scene(made)


def unharmed(scene: Scene, before: dict[str, tuple[object, ...]], what: str) -> None:
    changed = changes(before, scene.snapshot())
    assert not changed, f"{what} changed the victim's files: {changed}"


# --- the store ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["trash", "work"])
def test_a_group_stores_trash_or_work_as_a_link_deletes_nothing_of_the_victims(scene: Scene, kind: str) -> None:
    store = store_with_debris(scene)
    plant_link(store / kind, scene.canary_dir, scene.gid)
    before = scene.snapshot()
    pruned = scene.run([ENVBUILD, "cache", "prune", "--cache-dir", str(store)])
    unharmed(scene, before, f"envbuild cache prune with {kind} a link")
    assert pruned.returncode != 0 and f"{store / kind}" in pruned.stderr and "fix:" in pruned.stderr, pruned.stderr
    scene.write_shared("tiny.yaml", SPEC)
    (scene.bin / "debootstrap").write_text("#!/bin/sh\nexit 1\n")
    (scene.bin / "debootstrap").chmod(0o755)
    scene.run([ENVBUILD, "build", "tiny.yaml", "-o", "tiny.sif", "--cache-dir", str(store)])
    unharmed(scene, before, f"envbuild build's sweep with {kind} a link")


def test_cache_verify_fails_on_an_unrecorded_image_of_another_member(scene: Scene) -> None:
    store = store_with_debris(scene)
    give(store / "images" / "image-done" / "image.sif", attacker(), gid=scene.gid, mode=0o664)
    verified = scene.run([ENVBUILD, "cache", "verify", "--cache-dir", str(store)])
    assert verified.returncode == 1, verified.stdout + verified.stderr


# --- walked-up envrun.yaml ---------------------------------------------------------------------------------

def victims_project(scene: Scene) -> Path:
    """The victim's own project in their home: envrun.yaml with a relative image, and that image."""
    project = scene.home / "proj"
    (project / "build").mkdir(parents=True)
    (project / "envrun.yaml").write_text("image: build/env.sif\n")
    (project / "build" / "env.sif").write_text("the victim's image\n")
    for path in (project, project / "build", project / "envrun.yaml", project / "build" / "env.sif"):
        os.chown(path, victim().pw_uid, victim().pw_gid)
    return project


def attackers_dir(scene: Scene) -> Path:
    """A directory of the attacker's, 0755, in the group directory, with the attacker's build/env.sif."""
    place = plant_dir(scene, "attacker")
    place.chmod(0o755)
    (place / "build").mkdir()
    (place / "build" / "env.sif").write_text("the attacker's image\n")
    for path in (place / "build", place / "build" / "env.sif"):
        give(path, attacker(), mode=0o755 if path.is_dir() else 0o644)
    return place


def test_a_walked_up_link_to_the_victims_envrun_yaml_never_runs_the_attackers_image(scene: Scene) -> None:
    project = victims_project(scene)
    place = attackers_dir(scene)
    plant_link(place / "envrun.yaml", project / "envrun.yaml", scene.gid)
    os.lchown(place / "envrun.yaml", attacker().pw_uid, attacker().pw_gid)
    ran = scene.run([ENVRUN, "--dry-run", "python", "-c", "1"], cwd=place)
    assert str(place / "build" / "env.sif") not in ran.stdout, f"the attacker's image would run: {ran.stdout}"


def test_an_envrun_yaml_in_a_0755_directory_of_another_user_is_ignored(scene: Scene) -> None:
    place = attackers_dir(scene)
    (place / "envrun.yaml").write_text("image: build/env.sif\n")
    os.chown(place / "envrun.yaml", victim().pw_uid, victim().pw_gid)  # even a file of the victim's own
    ran = scene.run([ENVRUN, "--dry-run", "python", "-c", "1"], cwd=place)
    assert str(place / "build" / "env.sif") not in ran.stdout, f"the attacker's image would run: {ran.stdout}"
    assert f"ignoring {place / 'envrun.yaml'}" in ran.stderr or "ignored" in ran.stderr, ran.stderr


# --- output directories others can write -------------------------------------------------------------------

RECORDING_SBATCH = """#!/bin/sh
# what sbatch was given: the script named on the command line, else its stdin
out="$HOME/submitted"
last=""
for word in "$@"; do last="$word"; done
if [ -n "$last" ] && [ "${last#-}" = "$last" ] && [ -f "$last" ]; then cat -- "$last" > "$out"; else cat > "$out"; fi
echo 4242
"""
SWAPPER = """
while :; do
  for f in .envrun/jobs/*; do
    [ -e "$f" ] || continue
    grep -q ATTACKER "$f" 2>/dev/null && continue
    printf '#!/bin/sh\\necho ATTACKER\\n' > "$f.swap" 2>/dev/null && mv -f "$f.swap" "$f" 2>/dev/null
  done
done
"""


def test_a_job_script_in_jobs_the_attacker_made_is_never_the_one_submitted(scene: Scene) -> None:
    scene.write_shared("env.sif", "image\n")
    scene.write_shared("train.py", "print('trained')\n")  # envrun sbatch --submit refuses a program not there
    plant_dir(scene, ".envrun/jobs")
    (scene.bin / "sbatch").write_text(RECORDING_SBATCH)
    account = attacker()
    swapper = subprocess.Popen(
        ["setpriv", f"--reuid={account.pw_uid}", f"--regid={account.pw_gid}", "--init-groups", "sh", "-c", SWAPPER],
        cwd=scene.shared, start_new_session=True)
    try:
        for _ in range(3):
            submitted = scene.run([ENVRUN, "sbatch", "--image", "env.sif", "--submit", "--", "python", "train.py"])
            record = scene.home / "submitted"
            if record.exists():
                text = record.read_text()
                assert "ATTACKER" not in text and "python train.py" in text, f"submitted: {text!r}"
            else:
                assert submitted.returncode != 0 and "fix:" in submitted.stderr, submitted.stderr
    finally:
        os.killpg(swapper.pid, signal.SIGKILL)
        swapper.wait()


def test_report_partials_planted_for_the_coming_pids_overwrite_nothing(scene: Scene) -> None:
    reports = scene.mkdir_shared("reports/job-4242")
    next_pid = int(Path("/proc/sys/kernel/ns_last_pid").read_text())
    for name in ("report.json", "report.html", "timeline.png", "summary.txt"):
        for pid in range(next_pid, next_pid + 400):
            (reports / f".{name}.partial-{pid}").symlink_to(scene.canary / ".bashrc")
    before = scene.snapshot()
    written = scene.run([PYTHON, "-I", "-c", REPORT_SCRIPT, str(reports)])
    unharmed(scene, before, "the report written among planted partial links")
    assert (reports / "summary.txt").is_file() or "fix:" in written.stderr + written.stdout, written


def test_sbatch_o_onto_an_attackers_link_writes_nothing_through_it(scene: Scene) -> None:
    scene.write_shared("env.sif", "image\n")
    plant_link(scene.shared / "job.sbatch", scene.canary_file, scene.gid)
    next_pid = int(Path("/proc/sys/kernel/ns_last_pid").read_text())
    for pid in range(next_pid, next_pid + 400):  # and the partial names of the old writer, for the coming PIDs
        (scene.shared / f".job.sbatch.partial-{pid}").symlink_to(scene.canary / ".bashrc")
    before = scene.snapshot()
    scene.run([ENVRUN, "sbatch", "--image", "env.sif", "-o", "job.sbatch", "--", "python", "train.py"])
    unharmed(scene, before, "envrun sbatch -o onto a link")


def test_kernel_remove_never_deletes_what_a_hostile_kernel_json_names(scene: Scene) -> None:
    from envbuild.kernel.kernelspec import KernelEntry, kernelspec

    scene.write_shared("env.sif", "image\n")
    installed = scene.run([ENVRUN, "kernel", "install", "--image", str(scene.shared / "env.sif"), "--name", "envrun-env"])
    assert installed.returncode == 0, installed.stderr
    documents = scene.canary / "kernels" / "Documents"
    documents.mkdir(parents=True)
    (documents / "draft.md").write_text("the victim's draft\n")
    for path in (documents.parent, documents, documents / "draft.md"):
        os.chown(path, victim().pw_uid, victim().pw_gid)
    kernels = plant_dir(scene, "jupyter/share/jupyter/kernels/envrun-env")
    entry = KernelEntry(name="envrun-env", display_name="group env", image=str(scene.shared / "env.sif"), overlays=(),
                        ipykernel_overlay=str(documents / "overlay.sqsh"), python="python3", system="", binds=(),
                        log=str(scene.canary_file), envrun=ENVRUN)
    (kernels / "kernel.json").write_text(json.dumps(kernelspec(entry, str(kernels), "0")))
    give(kernels / "kernel.json", attacker(), gid=scene.gid, mode=0o664)
    before = scene.snapshot()
    scene.run([ENVRUN, "kernel", "remove", "envrun-env"],
              env={"JUPYTER_PATH": str(scene.shared / "jupyter/share/jupyter")})
    unharmed(scene, before, "envrun kernel remove with the attacker's kernel.json first on JUPYTER_PATH")


# --- host Python ---------------------------------------------------------------------------------------------

def plant_modules(scene: Scene) -> Path:
    """The attacker's json.py and envbuild/ package in the group directory: importing either leaves a mark."""
    mark = scene.shared / "RAN"
    code = f"open({str(mark)!r}, 'a').write(__name__ + '\\n')\n"
    plant_dir(scene, "envbuild")
    for name in ("json.py", "envbuild/__init__.py", "site.py"):
        (scene.shared / name).write_text(code)
        give(scene.shared / name, attacker(), gid=scene.gid, mode=0o664)
    return mark


@pytest.mark.parametrize("args", [
    [ENVRUN, "--version"], [ENVRUN, "--dry-run", "--image", "env.sif", "python", "-c", "1"], [ENVBUILD, "--version"],
    [ENVBUILD, "import", "env.def"]], ids=["envrun-version", "envrun-dry-run", "envbuild-version", "envbuild-import"])
def test_python_modules_in_the_working_directory_never_run_on_the_host(scene: Scene, args: list[str]) -> None:
    scene.write_shared("env.sif", "image\n")
    scene.write_shared("env.def", DEF_FILE)
    mark = plant_modules(scene)
    ran = scene.run(args)
    assert not mark.exists(), f"{args}: the attacker's module ran: {mark.read_text()!r}; {ran.stderr[-500:]}"


def test_the_report_sampler_starts_isolated_from_the_working_directory(scene: Scene) -> None:
    from envbuild.commands.launch import RunRequest, report_sampler

    command = report_sampler(RunRequest(command=["srun", "python", "train.py"], image="env.sif"), {})
    assert command, "the report is on by default for an srun step"
    mark = plant_modules(scene)
    scene.run(["timeout", "3", *command], timeout=30)  # it starts, imports, and waits for its key on stdin
    assert not mark.exists(), f"the attacker's module ran in the sampler: {mark.read_text()!r}"


# --- imports ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("source", ["~/.ssh/id_rsa", "../../../home/victim/.ssh/id_rsa"])
def test_import_refuses_a_copy_from_outside_the_build_context(scene: Scene, source: str) -> None:
    recipe = scene.write_shared("Dockerfile", f"FROM python:3.11-slim\nCOPY {source} /opt/app/config\n",
                                owner=attacker(), mode=0o664)
    imported = scene.run([ENVBUILD, "import", str(recipe), "-o", "spec.yaml"])
    spec = scene.shared / "spec.yaml"
    assert imported.returncode != 0, imported.stdout + imported.stderr
    assert "Dockerfile:2" in imported.stderr and "fix:" in imported.stderr, imported.stderr
    assert not spec.exists() or "allow_outside_spec_dir" not in spec.read_text()


# --- outputs that are not regular files --------------------------------------------------------------------

def device_node() -> Path:
    """A character device like /dev/null (1, 3) in a directory only root may write: what `-o /dev/null` as root
    meets, without risking the machine's own /dev/null."""
    directory = Path(tempfile.mkdtemp(prefix="envbuild-devnull-", dir="/var/tmp"))
    node = directory / "null"
    os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    node.chmod(0o666)
    return node


@pytest.mark.parametrize("args", [
    [ENVRUN, "sbatch", "--image", "env.sif", "-o", "{out}", "--", "python", "train.py"],
    [ENVBUILD, "import", "env.def", "-o", "{out}"]], ids=["sbatch-o", "import-o"])
def test_o_onto_a_device_as_root_writes_in_place_and_leaves_the_device(scene: Scene, args: list[str]) -> None:
    scene.write_shared("env.sif", "image\n")
    scene.write_shared("env.def", DEF_FILE)
    node = device_node()
    try:
        done = subprocess.run([word.replace("{out}", str(node)) for word in args], cwd=scene.shared,
                              capture_output=True, text=True, timeout=120,
                              env={**os.environ, "HOME": str(scene.base / "root-home"), "ENVBUILD_SYSTEM": "local"})
        info = os.lstat(node)
        assert stat.S_ISCHR(info.st_mode) and os.major(info.st_rdev) == 1, f"{node} was replaced: {done.stderr}"
        assert stat.S_IMODE(info.st_mode) == 0o666, f"{node}'s mode became {oct(stat.S_IMODE(info.st_mode))}"
        assert done.returncode == 0, done.stderr
    finally:
        node.unlink()
        node.parent.rmdir()


@pytest.mark.parametrize("args", [
    [ENVRUN, "sbatch", "--image", "env.sif", "-o", "/dev/stdout", "--", "python", "train.py"],
    [ENVBUILD, "import", "env.def", "-o", "/dev/stdout"]], ids=["sbatch-o", "import-o"])
def test_o_dev_stdout_as_a_user_prints(scene: Scene, args: list[str]) -> None:
    scene.write_shared("env.sif", "image\n")
    scene.write_shared("env.def", DEF_FILE)
    done = scene.run(["sh", "-c", 'exec "$@" | cat', "pipe", *args])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip(), "nothing printed"


# --- forged sampler records --------------------------------------------------------------------------------------

def test_a_programs_stderr_cannot_forge_sampler_records_or_reach_the_terminal() -> None:
    from envbuild.report.stepreport import StepReport
    from envbuild.report.wire import MARKER, StreamSplitter, encode

    report = StepReport(command=("python", "train.py"), environ={"SLURM_JOB_NAME": "train\x1b]0;pwned\x07\x1b[2J"})
    forged = {"v": 1, "t": 1.0, "node": "fake-node", "gpus": [{"index": 0, "util": 100}]}
    program_text = (MARKER + json.dumps(forged) + "\n").encode()
    program_text += b"".join(encode(forged, "f" * 32))  # a key of the program's own guessing
    rest, payloads = StreamSplitter(report.key).feed(program_text)
    assert payloads == [] and rest == program_text, "the program's lines must pass through as its text"
    first, body = (REPO / "tests/fixtures/report/eight-gpus-one-busy.stream").read_bytes().split(b"\n", 1)
    head = dict(word.split("=") for word in first.decode().lstrip("# ").split())
    for payload in StreamSplitter(head["key"]).feed(body)[1]:
        report.feed(payload)
    summary = report.finish(0)
    assert "\x1b" not in summary and "\x07" not in summary, repr(summary)
