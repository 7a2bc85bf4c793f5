"""The harness that finds the paths by itself (issue 40, "Done when"): each command that writes or deletes runs
once as the victim under strace; every name it created, renamed, removed or changed below the group directory
(which the attacker may write) is a place the attacker can plant a link. Then, for each such place, in a fresh
scene, the attacker plants a link there to the victim's canary (a file or a directory in the victim's private
home), the victim runs the same command, and nothing of the canary may change: no byte, no mode, no mtime, no
name. A name with random parts (a partial file) cannot be planted in advance: the traced command runs twice,
and a name that differs between the runs is planted at its parent directories and final name only; a name
with a time stamp in it is planted for the next seconds.

The commands: `envbuild build` (it sweeps a group store's abandoned entries, trash and work before building; the
base's debootstrap is a stand-in that fails at once; again with -o into directories not made yet, and with a
--cache-dir store not made yet), `envbuild cache prune`/`verify` on the same store, `envbuild import -o`, `envbuild
export -o`, the report files envrun's `--report DIR` writes (StepReport.finish, fed a recorded step), `envrun
sbatch -o`, `envrun sbatch --submit` (its script in .envrun/jobs; sbatch is a stand-in that answers a job id),
`envrun kernel install`/`remove` with a group --prefix (apptainer is a stand-in that answers the kernel's Python
probe), `envbuild cache rm --all` and `envbuild lock --cache-dir` (its log in the store's logs/) on the group
store, `envbuild lock` (the SPEC.lock beside the spec; the resolution, uv against PyPI, stands in), a build's
outputs (the image copied from the store to -o, its .build.log, the run wrappers in bin/ and the project's
envrun.yaml: the output steps through the build's executor, as the build session runs them), the build's later
steps in the store (a work directory's directories, an image tree's root, a parent prefetch: through the executor and
ParentPrefetch, as tests/hostile/test_store_steps.py runs them), `envbuild build --log FILE`, `envbuild
catalogue -o SITE` (a committed tiny SIF), `envrun recipe draft -o` (scontrol is a stand-in that answers the test
cluster's recorded output) and `envrun sweep -o DIR` (sbatch and scontrol stand-ins: the job writes its output and
completes at once). Each runs in well under a second or two.
test_every_output_option_is_exercised keeps the list whole: each option of either tool that names where to write is
one of the commands here or is excluded with its reason.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.hostile.test_store_steps import all_steps_args, group_store
from tests.support.attacker import (
    ENVBUILD,
    ENVRUN,
    PYTHON,
    Effect,
    Scene,
    changes,
    effects_below,
    give,
    give_tree,
    make_scene,
    plant_dir,
    plant_link,
    remove_scene,
    trace_effects,
    victim,
)

DEF_FILE = "Bootstrap: docker\nFrom: python:3.11-slim\n%post\n    pip install numpy==1.26.4\n"
SPEC = "name: tiny\nsystem: local\nbase: debootstrap:bookworm\npost:\n  - echo hi\n"
FAKE_DEBOOTSTRAP = "#!/bin/sh\necho 'debootstrap stand-in: no network here' >&2\nexit 1\n"
TIME_STAMP = re.compile(r"\d{8}-\d{6}")

# The job report as envrun's step supervisor writes it at the end of `envrun --report DIR srun ...`: a recorded
# step's records fed to StepReport, then finish() (python -I: nothing of the working directory is imported).
REPORT_SCRIPT = f"""
import os, sys
sys.path.insert(0, {str(REPO)!r})
from envbuild.report.stepreport import StepReport
from envbuild.report.wire import StreamSplitter
report = StepReport(command=("python", "train.py"), environ=os.environ, directory=sys.argv[1])
first, body = open({str(REPO / "tests/fixtures/report/eight-gpus-one-busy.stream")!r}, "rb").read().split(b"\\n", 1)
head = dict(word.split("=") for word in first.decode().lstrip("# ").split())
for payload in StreamSplitter(head["key"]).feed(body)[1]:
    report.feed(payload)
print(report.finish(0))
"""


LOCK_SPEC = SPEC + "python:\n  packages: [six]\n"

# `envbuild lock SPEC` with the resolution standing in (uv against PyPI: no network here): what it writes, SPEC.lock
# beside the spec, is written by the command's own code (envbuild.commands.lock.lock_spec, write_lock).
LOCK_SCRIPT = f"""
import sys
from pathlib import Path
sys.path.insert(0, {str(REPO)!r})
from envbuild.builder.sessions import buildlock
from envbuild.lock.lockmodel import Lock, LockedPackage, LockInputs, LockTarget

def resolved(loaded, previous, **_):
    return Lock(inputs=LockInputs(requirements=("six",), base="debootstrap:bookworm", system="local", torch_index=None,
                                  interpreter="python3"),
                target=LockTarget(python="3.11.2", platform="x86_64-manylinux_2_36"), base_digest="sha256:" + "9" * 64,
                recipe_digest="sha256:" + "8" * 64, resolver="uv 0.13.9",
                packages=(LockedPackage("six", "1.17.0", ("sha256:" + "a" * 64,)),), spec_name="tiny")

buildlock.resolve_spec_lock = resolved
from envbuild.commands.lock import lock_spec
from envbuild.shared.errors import reporting_errors

sys.exit(reporting_errors(lambda: print(lock_spec(Path(sys.argv[1]), upgrade=False, upgrade_packages=(), cache_dir=None,
                                                  verbose=False, out=sys.stderr)) or 0))
"""

# The end of `envbuild build tiny.yaml -o tiny.sif` as the build session runs it (envbuild.builder.sessions.imagesession):
# the previous log removed, then the output step (the store's image copied to a partial with the build's random id,
# renamed over the output) and the run wrappers through the build's executor, logged in <output>.build.log, then the
# project's envrun.yaml. A whole build needs a base and the container runtime (minutes); these are its writes in the
# output's directory.
BUILD_OUTPUT_SCRIPT = f"""
import os, sys
from pathlib import Path
sys.path.insert(0, {str(REPO)!r})
from envbuild.builder.execute.executor import BuildExecutor
from envbuild.builder.plan.actions import CopyFile, Remove, Rename, Step, WriteRunWrappers
from envbuild.builder.sessions.imagesession import note_project_file
from envbuild.envspec.loadspec import load_spec
from envbuild.shared import safefiles
from envbuild.shared.errors import reporting_errors

def build_outputs():
    store, output = Path(sys.argv[1]), Path(sys.argv[2]).absolute()
    log_path = Path(sys.argv[3]).absolute() if len(sys.argv) > 3 else output.with_name(output.name + ".build.log")
    safefiles.remove_file(log_path)
    partial = f"{{output}}.partial-{{os.urandom(4).hex()}}"
    steps = (
        Step("output", "copy the image to the output", (CopyFile(str(store / "images/image-done/image.sif"), partial),
                                                         Rename(partial, str(output))), cleanup=(Remove((partial,)),)),
        Step("wrappers", "write run wrappers", (WriteRunWrappers(None, str(output.parent / "bin"), str(output), "local",
                                                                 "apptainer", extra_commands=("python", "torchrun")),)),
    )
    executor = BuildExecutor(log_path, store_root=store, quiet=True)
    executor.execute_steps(steps, None, "build")
    note_project_file(load_spec(Path("tiny.yaml")), output, image=str(output), overlays=(), say=print)
    executor.finish(f"built {{output}}")
    return 0

sys.exit(reporting_errors(build_outputs))  # as the CLI ends: a refusal is a message and an exit status
"""

# scontrol as the one-node test cluster answers envrun recipe draft (tests/fixtures/scontrol/), and a job that
# completed at once for envrun sweep.
FAKE_SCONTROL = """#!/bin/sh
case "$2" in
  config) printf 'ClusterName = envbuild-local\nSLURM_CONF = /nonexistent/slurm.conf\n';;
  partition) cat "$(dirname "$0")/scontrol-partition.txt";;
  node) cat "$(dirname "$0")/scontrol-node.txt";;
  job) echo "JobId=$4 JobName=train JobState=COMPLETED ExitCode=0:0 RunTime=00:00:10";;
  *) echo "scontrol stand-in: $*" >&2; exit 1;;
esac
"""

# sbatch for envrun sweep: the job script comes on standard input; the "job" writes its output (the step's wall time
# and a metric) where the script's --output says, as Slurm would, and the id is answered at once. It writes only a
# regular file inside the group directory: Slurm's own writes are not what the harness tests.
FAKE_SWEEP_SBATCH = """#!/bin/sh
out=$(sed -n 's/^#SBATCH --output=//p' | sed 's/%j/4242/g')
case "$(realpath -m "$out")" in
  "$SHARED_DIR"/*) [ -L "$out" ] || [ -L "$(dirname "$out")" ] || \
      printf 'envrun-metric: samples_per_s=100\nenvrun-step: wall_ms=10000 exit=0\n' > "$out";;
esac
echo 4242
"""


def stand_in(scene: Scene, name: str, text: str) -> None:
    """A program the victim's PATH finds first (in its private bin/)."""
    path = scene.bin / name
    path.write_text(text)
    path.chmod(0o755)
    os.chown(path, victim().pw_uid, victim().pw_gid)


def store_with_debris(scene: Scene) -> Path:
    """A group build store (setgid 2770) with what killed builds left: trash, work, unfinished entries, and a
    finished image without a content record."""
    store = scene.mkdir_shared("store")
    scene.write_shared("store/trash/image-old-3f2a9c/image.sif", "old image bytes\n")
    scene.write_shared("store/trash/image-old-3f2a9c/meta.json", "{}\n")
    scene.write_shared("store/work/build-4242/sandbox/etc/hostname", "sandbox\n")
    scene.write_shared("store/work/build-4242/build.log", "killed\n")
    scene.write_shared("store/bases/debootstrap-bookworm-unfinished/rootfs/bin/sh", "not a shell\n")
    scene.write_shared("store/envs/env-unfinished/rootfs/usr/lib/x.py", "x = 1\n")
    scene.write_shared("store/images/image-unfinished/image.sif", "half an image\n")
    scene.write_shared("store/images/image-done/image.sif", "a whole image\n")
    scene.write_shared("store/images/image-done/meta.json", "{}\n")
    scene.write_shared("store/images/image-done/complete", "")
    give_tree(store, victim(), scene.gid)
    return store


def with_image(scene: Scene) -> None:
    scene.write_shared("env.sif", "a stand-in image: only the sbatch plan and the kernel probe see it\n")
    scene.write_shared("train.py", "print('the program the batch job runs: envrun sbatch --submit wants it there')\n")


def for_build(scene: Scene) -> None:
    store_with_debris(scene)
    scene.write_shared("tiny.yaml", SPEC)
    (scene.bin / "debootstrap").write_text(FAKE_DEBOOTSTRAP)
    (scene.bin / "debootstrap").chmod(0o755)
    os.chown(scene.bin / "debootstrap", victim().pw_uid, victim().pw_gid)


def for_build_in_a_new_store(scene: Scene) -> None:
    """As for_build, with no store yet: the build makes it (and its parents) where --cache-dir says."""
    scene.write_shared("tiny.yaml", SPEC)
    stand_in(scene, "debootstrap", FAKE_DEBOOTSTRAP)


def for_lock(scene: Scene) -> None:
    scene.write_shared("tiny.yaml", LOCK_SPEC)


def for_lock_in_store(scene: Scene) -> None:
    for_build(scene)
    scene.write_shared("tiny.yaml", LOCK_SPEC)


def for_build_output(scene: Scene) -> None:
    store_with_debris(scene)
    scene.write_shared("tiny.yaml", SPEC)


def with_sif(scene: Scene) -> None:
    """A committed tiny SIF (tests/fixtures/inventory: lay_out's tree squashed) in the group directory."""
    path = scene.shared / "layout.sif"
    shutil.copyfile(REPO / "tests/fixtures/inventory/layout-a.gzip.sif", path)
    give(path, victim(), gid=scene.gid, mode=0o660)


def for_recipe_draft(scene: Scene) -> None:
    stand_in(scene, "scontrol", FAKE_SCONTROL)
    for kind in ("partition", "node"):
        shutil.copyfile(REPO / f"tests/fixtures/scontrol/local-{kind}.txt", scene.bin / f"scontrol-{kind}.txt")
        os.chown(scene.bin / f"scontrol-{kind}.txt", victim().pw_uid, victim().pw_gid)


def for_sweep(scene: Scene) -> None:
    with_image(scene)
    stand_in(scene, "scontrol", FAKE_SCONTROL)
    stand_in(scene, "sbatch", FAKE_SWEEP_SBATCH)
    scene.env["SHARED_DIR"] = os.path.realpath(scene.shared)


def installed_kernel(scene: Scene) -> None:
    with_image(scene)
    done = scene.run(kernel_install(scene))
    assert done.returncode == 0, f"setup: kernel install failed: {done.stderr}"


def kernel_install(scene: Scene) -> list[str]:
    return [ENVRUN, "kernel", "install", "--image", str(scene.shared / "env.sif"), "--prefix",
            str(scene.shared / "jupyter"), "--name", "group-env", "--force"]


@dataclass(frozen=True)
class Command:
    name: str
    setup: Callable[[Scene], object]
    args: Callable[[Scene], list[str]]
    writes: bool = True  # the traced run must show an effect in the group directory (else the harness is blind)


COMMANDS = [
    Command("envbuild-build", for_build,
            lambda s: [ENVBUILD, "build", "tiny.yaml", "-o", "tiny.sif", "--cache-dir", str(s.shared / "store")]),
    # -o into directories not there yet: the build makes them before anything slow runs
    Command("envbuild-build-o-dirs", for_build,
            lambda s: [ENVBUILD, "build", "tiny.yaml", "-o", "images/v1/tiny.sif", "--cache-dir", str(s.shared / "store")]),
    # a store not made yet, in directories not made yet: the build makes them
    Command("envbuild-build-new-store", for_build_in_a_new_store,
            lambda s: [ENVBUILD, "build", "tiny.yaml", "--cache-dir", str(s.shared / "stores/team")]),
    Command("cache-prune", store_with_debris,
            lambda s: [ENVBUILD, "cache", "prune", "--cache-dir", str(s.shared / "store")]),
    Command("cache-verify", store_with_debris,
            lambda s: [ENVBUILD, "cache", "verify", "--cache-dir", str(s.shared / "store")], writes=False),
    Command("import-o", lambda s: s.write_shared("env.def", DEF_FILE),
            lambda s: [ENVBUILD, "import", "env.def", "-o", "spec.yaml"]),
    Command("export-o", lambda s: s.write_shared("tiny.yaml", SPEC),
            lambda s: [ENVBUILD, "export", "tiny.yaml", "--format", "def", "-o", "tiny.def"]),
    Command("report-dir", lambda s: None,
            lambda s: [PYTHON, "-I", "-c", REPORT_SCRIPT, str(s.shared / "reports" / "job-4242")]),
    Command("sbatch-o", with_image,
            lambda s: [ENVRUN, "sbatch", "--image", "env.sif", "-o", "job.sbatch", "--", "python", "train.py"]),
    Command("sbatch-submit", with_image,
            lambda s: [ENVRUN, "sbatch", "--image", "env.sif", "--job-name", "train", "--submit", "--",
                       "python", "train.py"]),
    Command("kernel-install", with_image, kernel_install),
    Command("kernel-remove", installed_kernel,
            lambda s: [ENVRUN, "kernel", "remove", "group-env", "--prefix", str(s.shared / "jupyter")]),
    Command("cache-rm", store_with_debris,
            lambda s: [ENVBUILD, "cache", "rm", "--all", "--cache-dir", str(s.shared / "store")]),
    Command("lock", for_lock, lambda s: [PYTHON, "-I", "-c", LOCK_SCRIPT, "tiny.yaml"]),
    Command("lock-store", for_lock_in_store,
            lambda s: [ENVBUILD, "lock", "tiny.yaml", "--cache-dir", str(s.shared / "store")]),
    Command("build-outputs", for_build_output,
            lambda s: [PYTHON, "-I", "-c", BUILD_OUTPUT_SCRIPT, str(s.shared / "store"), "tiny.sif"]),
    Command("build-log", for_build_output,
            lambda s: [PYTHON, "-I", "-c", BUILD_OUTPUT_SCRIPT, str(s.shared / "store"), "tiny.sif", "logs/build/tiny.log"]),
    # the build's later steps in the store (a whole build needs a base and the container runtime): the directories
    # of a work directory and of an image tree's root, and a parent prefetch, through the build's own executor
    Command("store-steps", group_store, all_steps_args),
    Command("catalogue-o", with_sif, lambda s: [ENVBUILD, "catalogue", "layout.sif", "-o", "site"]),
    Command("recipe-draft-o", for_recipe_draft,
            lambda s: [ENVRUN, "recipe", "draft", "-o", "mysite.yaml", "--force"]),
    Command("sweep-o", for_sweep,
            lambda s: [ENVRUN, "sweep", "--system", "local", "--image", "env.sif", "--gpus", "1", "--poll", "0.01",
                       "-o", "runs/scaling", "--", "python", "train.py"]),
]


@dataclass(frozen=True)
class Place:
    """Where the attacker plants: a path relative to the group directory, and what the victim's command makes
    or finds there (a directory gets a link to the canary directory, a file one to the canary file)."""

    relative: str
    directory: bool


def places(effects: list[Effect], shared: Path) -> dict[str, Place]:
    """Every name of every effect below `shared`, and each of its parent directories there. A time stamp in a
    name becomes {TIME} (planted for the coming seconds)."""
    found: dict[str, Place] = {}
    root = os.path.realpath(shared)
    for effect in effects_below(effects, shared):
        parts = Path(os.path.relpath(effect.path, root)).parts
        for depth in range(1, len(parts) + 1):
            relative = TIME_STAMP.sub("{TIME}", "/".join(parts[:depth]))
            directory = depth < len(parts) or effect.directory
            previous = found.get(relative)
            found[relative] = Place(relative, directory or (previous is not None and previous.directory))
    return found


def traced_places(command: Command, work: Path) -> tuple[dict[str, Place], list[str]]:
    """The places of two traced runs that both runs share (a random name is in one only), and what the
    first run did below the group directory (for the test's output)."""
    seen: list[dict[str, Place]] = []
    described: list[str] = []
    for attempt in range(2):
        scene = make_scene()
        try:
            command.setup(scene)
            trace = work / f"{command.name}-{attempt}.strace"
            scene.run(command.args(scene), trace=trace)
            effects = trace_effects(trace)
            seen.append(places(effects, scene.shared))
            if attempt == 0:
                root = os.path.realpath(scene.shared)
                described = [f"{e.what} {os.path.relpath(e.path, root)} ({e.syscall})"
                             for e in effects_below(effects, scene.shared)]
        finally:
            remove_scene(scene)
    shared = {name: place for name, place in seen[0].items() if name in seen[1]}
    return shared, described


def plant(scene: Scene, place: Place) -> list[str]:
    """The attacker's link(s) at `place`, to the canary; the parents that are missing made as the attacker's
    directories. Returns the planted paths."""
    names = [place.relative]
    if "{TIME}" in place.relative:
        now = time.time()
        names = [place.relative.replace("{TIME}", time.strftime("%Y%m%d-%H%M%S", time.localtime(now + s)))
                 for s in range(-1, 8)]
    planted = []
    for relative in names:
        parent = str(Path(relative).parent)
        if parent != "." and not (scene.shared / parent).exists():
            plant_dir(scene, parent)
        target = scene.canary_dir if place.directory else scene.canary_file
        planted.append(str(plant_link(scene.shared / relative, target, scene.gid)))
    return planted


@pytest.mark.parametrize("command", COMMANDS, ids=[c.name for c in COMMANDS])
def test_a_link_planted_where_the_command_writes_never_reaches_the_victims_files(
        command: Command, tmp_path: Path) -> None:
    found, described = traced_places(command, tmp_path)
    print(f"{command.name}: below the group directory the traced run did:\n  " + "\n  ".join(described))
    if command.writes:
        assert found, f"{command.name}: the traced run changed nothing below the group directory: {described}"
    harmed: list[str] = []
    for place in sorted(found.values(), key=lambda p: p.relative):
        scene = make_scene()
        try:
            command.setup(scene)
            planted = plant(scene, place)
            before = scene.snapshot()
            result = scene.run(command.args(scene))
            after = scene.snapshot()
            print(f"planted {', '.join(p.removeprefix(str(scene.shared) + '/') for p in planted)} -> "
                  f"{scene.canary_dir if place.directory else scene.canary_file}: exit {result.returncode}, "
                  f"{result.stderr.strip().splitlines()[-1] if result.stderr.strip() else 'no stderr'}")
            changed = changes(before, after)
            if changed:
                harmed.append(f"a link at {place.relative} (to the canary {'directory' if place.directory else 'file'}): "
                              + "; ".join(changed))
            if "Traceback (most recent call last)" in result.stderr:
                harmed.append(f"a link at {place.relative}: the command crashed instead of refusing with a fix:\n"
                              + result.stderr[-1500:])
        finally:
            remove_scene(scene)
    assert not harmed, f"{command.name}: " + "\n".join(harmed)


def test_the_harness_sees_a_link_followed(tmp_path: Path) -> None:
    """The harness itself: a victim's command that writes through a planted link is caught (a plain shell
    redirection, which follows links), and strace's record of it names the place."""
    scene = make_scene()
    try:
        trace = tmp_path / "echo.strace"
        scene.run(["sh", "-c", "echo hello > out.txt && mkdir -p logs && echo x > logs/run.log"], trace=trace)
        found = places(trace_effects(trace), scene.shared)
        assert {"out.txt", "logs", "logs/run.log"} <= found.keys() and found["logs"].directory
        plant(scene, found["logs"])
        before = scene.snapshot()
        scene.run(["sh", "-c", "mkdir -p logs && echo x > logs/run.log"])
        assert "created data/run.log" in changes(before, scene.snapshot())
    finally:
        remove_scene(scene)


# --- every option that names where to write is exercised above ----------------------------------------------
# An option is "<command> <its longest name>". The harness command that runs it, or why none needs to.
OUTPUT_OPTION = re.compile(r"^(-o|--(.+-)?out.*|--prefix|--report|--log|--cache-dir|--dir|--dest.*)$")
COVERED = {
    "envbuild build --output": "build-outputs",
    "envbuild build --cache-dir": "envbuild-build",
    "envbuild build --log": "build-log",
    "envbuild cache prune --cache-dir": "cache-prune",
    "envbuild cache rm --cache-dir": "cache-rm",
    "envbuild cache verify --cache-dir": "cache-verify",
    "envbuild catalogue --output": "catalogue-o",
    "envbuild export --output": "export-o",
    "envbuild import --output": "import-o",
    "envbuild lock --cache-dir": "lock-store",
    "envrun --report": "report-dir",
    "envrun sbatch --output": "sbatch-o",
    "envrun sbatch --script": "sbatch-o",  # the old spelling of -o (the same destination)
    "envrun sweep --output": "sweep-o",
    "envrun sweep --report": "sweep-o",  # the old spelling of -o
    "envrun kernel install --prefix": "kernel-install",
    "envrun kernel remove --prefix": "kernel-remove",
    "envrun recipe draft --output": "recipe-draft-o",
}
EXCLUDED = {
    "envbuild cache dir --cache-dir": "prints the store's path: creates, replaces and removes nothing",
    "envbuild cache ls --cache-dir": "lists the store's entries: reads only",
    "envrun kernel list --prefix": "lists the kernelspecs there: reads only",
    "envrun sbatch --job-output": "the pattern Slurm's slurmd opens for the job's output, as the job's user; envrun "
                                  "writes nothing there (it only reads the file to follow a job with --wait)",
    "envrun sbatch --log": "the old spelling of --job-output (excluded above)",
}


def output_options() -> set[str]:
    """Every option of envbuild's click app and of envrun's argparse parsers (the launch's and each
    subcommand's, subparsers included) whose name says it names a place to write, or whose value is the
    command's output."""
    import argparse

    import click

    from envbuild.cli import envrun_main
    from envbuild.cli.envbuild_main import main

    found: set[str] = set()

    def of_click(command: click.Command, path: str) -> None:
        context = click.Context(command)
        if isinstance(command, click.Group):
            for name in command.list_commands(context):
                sub = command.get_command(context, name)
                assert sub is not None, f"{path} {name}"
                of_click(sub, f"{path} {name}")
        for param in command.params:
            names = [*param.opts, *param.secondary_opts] if isinstance(param, click.Option) else []
            if any(OUTPUT_OPTION.match(name) for name in names) or (names and param.name == "output"):
                found.add(f"{path} {max(names, key=len)}")

    def of_argparse(parser: argparse.ArgumentParser) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in dict.fromkeys(action.choices.values()):
                    of_argparse(sub)
            names = action.option_strings
            if any(OUTPUT_OPTION.match(name) for name in names) or (names and action.dest == "output"):
                found.add(f"{parser.prog} {max(names, key=len)}")

    of_click(main, "envbuild")
    of_argparse(envrun_main.build_parser())
    for subcommand in envrun_main.SUBCOMMANDS.values():
        if subcommand.parser:
            of_argparse(envrun_main.imported(subcommand.parser)())
    return found


def test_every_output_option_is_exercised() -> None:
    """A new option that names where to write (or a new command with one) fails here until a Command above
    runs it or EXCLUDED says why it needs none; a Command named here that is gone fails too."""
    found = output_options()
    assert found, "the option walk found nothing: it no longer sees the CLI"
    missing = sorted(found - COVERED.keys() - EXCLUDED.keys())
    assert not missing, ("options that name where to write with no harness command (add a Command to COMMANDS and "
                         f"name it in COVERED, or say in EXCLUDED why it writes nothing there): {missing}")
    stale = sorted((COVERED.keys() | EXCLUDED.keys()) - found)
    assert not stale, f"COVERED/EXCLUDED name options the CLI no longer has: {stale}"
    names = {command.name for command in COMMANDS}
    assert set(COVERED.values()) <= names, sorted(set(COVERED.values()) - names)
    assert not COVERED.keys() & EXCLUDED.keys()
