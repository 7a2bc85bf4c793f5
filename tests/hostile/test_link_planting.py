"""The harness that finds the paths by itself (issue 40, "Done when"): each command that writes or deletes runs
once as the victim under strace; every name it created, renamed, removed or changed below the group directory
(which the attacker may write) is a place the attacker can plant a link. Then, for each such place, in a fresh
scene, the attacker plants a link there to the victim's canary (a file or a directory in the victim's private
home), the victim runs the same command, and nothing of the canary may change: no byte, no mode, no mtime, no
name. A name with random parts (a partial file) cannot be planted in advance: the traced command runs twice,
and a name that differs between the runs is planted at its parent directories and final name only; a name
with a time stamp in it is planted for the next seconds.

The commands: `envbuild build` (it sweeps a group store's abandoned entries, trash and work before building;
the base's debootstrap is a stand-in that fails at once), `envbuild cache prune`/`verify` on the same store,
`envbuild import -o`, `envbuild export -o`, the report files envrun's `--report DIR` writes (StepReport.finish,
fed a recorded step), `envrun sbatch -o`, `envrun sbatch --submit` (its script in .envrun/jobs; sbatch is a
stand-in that answers a job id), `envrun kernel install`/`remove` with a group --prefix (apptainer is a
stand-in that answers the kernel's Python probe). Each runs in well under a second.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.support.attacker import (
    ENVBUILD,
    ENVRUN,
    PYTHON,
    Effect,
    Scene,
    changes,
    effects_below,
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
