"""The build's later steps in a group store (setgid 2770, umask 007), reached offline and at once: the victim runs
the build executor's own actions (the directories of a work directory, of an entry, of an image tree's root, and the
parent prefetch's work directory) on a store where the attacker, another member of the group, planted a link where
one of those directories goes, or a directory of their own (in their own group, so not one of the store's). A
whole build needs a base and the container runtime (minutes); these are its steps that make directories below
the store. Nothing of the victim's canary may change, and the refusal names the place and its fix. Each planted
case also runs clean (nothing planted) to show that the refusal is the link's, not the script's.

Before, os.makedirs made these directories through the link (and the image tree's writes followed a link at its
root): the canary got `tmp/cache`, `etc/dpkg` and the prefetched copy."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.support.attacker import (
    PYTHON,
    Scene,
    attacker,
    changes,
    give,
    give_tree,
    plant_link,
    scene_fixture,
    victim,
)

# The victim's side: the executor runs a step of the given actions as a build does, for each (what, path) given
# (python -I: nothing of the working directory is imported); a refusal ends as the CLI ends, a message and an exit
# status. tests/hostile/test_link_planting.py runs it too (its store-steps command), planting wherever it writes.
STEP_SCRIPT = f"""
import sys
from pathlib import Path
sys.path.insert(0, {str(REPO)!r})
from envbuild.builder.execute.executor import BuildExecutor
from envbuild.builder.plan.actions import MakeDirs, Step, WriteFile
from envbuild.shared.errors import reporting_errors

def step(store, log, what, path):
    if what == "prefetch":
        from envbuild.builder.sessions.prefetch import ParentPrefetch

        prefetch = ParentPrefetch(parent="env-parent", store_root=str(store), work_dir=path, tree=path + "/rootfs",
                                  snapshot=path + "/parent.snapshot")
        prefetch.start(str(store / "envs/env-parent/rootfs"))
        taken = prefetch.take()
        prefetch.remove()
        return 0 if taken else 1
    if what == "tree":  # the debootstrap step's first action in its tree, then a file written there
        actions = (MakeDirs((path + "/etc/dpkg/dpkg.cfg.d",), 0o755, root=path),
                   WriteFile(path + "/etc/dpkg/dpkg.cfg.d/unsafe-io", "force-unsafe-io\\n", 0o644, root=path))
    else:  # a work directory's or an entry's directories, then a file written in the last
        actions = (MakeDirs((path,)), WriteFile(path + "/marker", "made by the build\\n"))
    executor = BuildExecutor(log, store_root=store, quiet=True)
    executor.execute_steps((Step("dirs", "make the step's directories", actions),), None, "build")
    return 0

def run():  # STORE LOG (WHAT PATH)...: each step in turn, the first that fails ends the run
    store, log = Path(sys.argv[1]), Path(sys.argv[2])
    for what, path in zip(sys.argv[3::2], sys.argv[4::2]):
        if step(store, log, what, path):
            return 1
    return 0

sys.exit(reporting_errors(run))
"""


@dataclass(frozen=True)
class Case:
    """A step's directory `path` (relative to the store) and where the attacker plants (relative to the store)."""

    name: str
    what: str  # dirs | tree | prefetch
    path: str
    planted: str


CASES = [
    Case("work-dir", "dirs", "work/build-4343/tmp/cache", "work/build-4343"),
    Case("inside-work-dir", "dirs", "work/build-4242/tmp/cache", "work/build-4242/tmp"),
    Case("entry", "dirs", "envs/env-1234", "envs/env-1234"),
    Case("kind-dir", "dirs", "overlays/overlay-5678", "overlays"),
    Case("tree-root", "tree", "work/build-4242/sandbox", "work/build-4242/sandbox"),
    Case("tree-root-parent", "tree", "work/build-4242/sandbox", "work/build-4242"),
    Case("prefetch", "prefetch", "work/tiny-4242-abc123-prefetch", "work/tiny-4242-abc123-prefetch"),
]


@pytest.fixture
def scene() -> Iterator[Scene]:
    yield from scene_fixture()


# The three kinds of steps in one run, for the link-planting harness: a work directory's directories, an image tree's
# root in another build's work directory, and a parent prefetch (relative to the store).
ALL_STEPS = (("dirs", "work/build-4343/tmp/cache"), ("tree", "work/build-4242/sandbox"),
             ("prefetch", "work/tiny-4242-abc123-prefetch"))


def all_steps_args(scene: Scene) -> list[str]:
    store = scene.shared / "store"
    return [PYTHON, "-I", "-c", STEP_SCRIPT, str(store), str(scene.home / "step.log"),
            *(word for what, path in ALL_STEPS for word in (what, str(store / path)))]


def group_store(scene: Scene) -> Path:
    """A group store with a build's work directory and a finished env layer (the prefetch's parent), all the
    victim's, group-writable as under umask 007."""
    store = scene.mkdir_shared("store")
    scene.write_shared("store/work/build-4242/build.log", "running\n")
    scene.write_shared("store/envs/env-parent/rootfs/usr/lib/python3/x.py", "x = 1\n")
    scene.write_shared("store/envs/env-parent/complete", "")
    give_tree(store, victim(), scene.gid)
    return store


def run_step(scene: Scene, store: Path, case: Case) -> tuple[int, str]:
    log = scene.home / "step.log"  # the log where nobody else writes: the store's directories are under test
    done = scene.run([PYTHON, "-I", "-c", STEP_SCRIPT, str(store), str(log), case.what, str(store / case.path)])
    return done.returncode, done.stderr


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_link_planted_where_a_store_step_makes_a_directory_is_refused(scene: Scene, case: Case) -> None:
    store = group_store(scene)
    parent = (store / case.planted).parent
    if not parent.exists():
        scene.mkdir_shared(str(parent.relative_to(scene.shared)))
    plant_link(store / case.planted, scene.canary_dir, scene.gid)
    before = scene.snapshot()
    code, stderr = run_step(scene, store, case)
    changed = changes(before, scene.snapshot())
    assert not changed, f"{case.name}: the step wrote through the attacker's link at {case.planted}: {changed}"
    assert code != 0, f"{case.name}: the step went on through a link it did not follow? {stderr}"
    assert "Traceback" not in stderr, stderr
    assert "symbolic link" in stderr and str(store / case.planted) in stderr and "fix:" in stderr, stderr


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_same_steps_make_their_directories_where_nothing_is_planted(scene: Scene, case: Case) -> None:
    store = group_store(scene)
    code, stderr = run_step(scene, store, case)
    assert code == 0, stderr
    made = store / case.path
    if case.what == "prefetch":
        assert not made.exists()  # made, filled, then removed as the build removes what it did not take
    else:
        assert made.is_dir() and made.stat().st_uid == victim().pw_uid
    if case.what == "tree":
        assert (made / "etc/dpkg/dpkg.cfg.d/unsafe-io").read_text() == "force-unsafe-io\n"


def test_a_directory_of_someone_the_store_does_not_trust_is_refused(scene: Scene) -> None:
    """The attacker makes `tmp` in the victim's work directory and hands it to their own group: not a member's
    directory of the store any more (the store's group would have it), so the victim never makes or writes in it."""
    store = group_store(scene)
    tmp = store / "work/build-4242/tmp"
    tmp.mkdir()
    give(tmp, attacker(), mode=0o777)  # the attacker's own group, open to all: what is in it, they decide
    case = Case("strangers-dir", "dirs", "work/build-4242/tmp/cache", "work/build-4242/tmp")
    code, stderr = run_step(scene, store, case)
    assert code != 0 and "Traceback" not in stderr, stderr
    assert f"{tmp} belongs to another user (uid {attacker().pw_uid})" in stderr and "fix:" in stderr, stderr
    assert not (tmp / "cache").exists()


def test_a_members_directory_in_the_store_is_the_stores(scene: Scene) -> None:
    """A group store is shared: an entry's directory another member made (in the store's group, as the setgid
    root gives it) is used, not refused."""
    store = group_store(scene)
    entry = store / "envs/env-1234"
    entry.mkdir()
    give(entry, attacker(), gid=scene.gid, mode=0o2770)
    code, stderr = run_step(scene, store, Case("members-entry", "dirs", "envs/env-1234", "envs/env-1234"))
    assert code == 0, stderr
    assert (entry / "marker").read_text() == "made by the build\n"
    assert os.stat(entry).st_uid == attacker().pw_uid


def test_a_prefetch_work_directory_a_member_made_ahead_is_refused(scene: Scene) -> None:
    """The prefetch's work directory has a name of its build's own: one already there, the attacker's (in the
    store's group, as a member's is) with rootfs a link to the victim's files, would have `cp -al PARENT rootfs`
    copy the layer into the link's target."""
    store = group_store(scene)
    work = scene.mkdir_shared("store/work/tiny-4242-abc123-prefetch", owner=attacker())
    plant_link(work / "rootfs", scene.canary_dir, scene.gid)
    before = scene.snapshot()
    code, stderr = run_step(scene, store, Case("prefetch-ahead", "prefetch", str(work.relative_to(store)), ""))
    assert not changes(before, scene.snapshot())
    assert code != 0 and "Traceback" not in stderr, stderr
    assert f"{work} is already there" in stderr and "fix:" in stderr, stderr
