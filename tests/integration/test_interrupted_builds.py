"""Interrupted and killed builds against the real tools (issue 15): SIGINT, SIGTERM and SIGHUP at six
points of a build, SIGKILL debris, and what each leaves behind (nothing).

One store goes through the whole sequence, so every interruption also checks that the next build
reuses what the earlier ones completed. The points are reached two ways:
- in a running tool: the test watches the build log for the tool's command line and signals while it
  runs (the post command sleeping inside apptainer), so the tool itself must be stopped;
- between two actions of a step: ENVBUILD_FAULT_PAUSE=STEP:N holds the build after N actions (for
  instance after the partial output copy is written, before its rename); the test first checks that the
  half-made file exists, so each interruption has something to clean up.
The base is a `localimage:` directory (the shared test cache's debootstrap rootfs), so its unpacking is a
real step of each fresh store.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from envbuild.store.layout import kind_dir
from tests.conftest import run_cli
from tests.support.build_faults import ENVBUILD, assert_nothing_left, log_has, start_build, wait_for, write_spec

pytestmark = [pytest.mark.apptainer, pytest.mark.slow]

# (step, signal, how the point is reached, whole group or the envbuild process only)
POINTS = [
    ("base", signal.SIGTERM, ("pause", "base:4", "bases/*/rootfs.partial"), False),
    ("env", signal.SIGINT, ("pause", "env:4", "envs/*/rootfs.partial"), True),
    ("post", signal.SIGHUP, ("log", "sleep 30"), False),
    # The spec's tests start in the record step and run beside the squash (envbuild.builder.execute.beside): stopped there.
    ("squash", signal.SIGTERM, ("pause", "squash:3", "work/*/sandbox"), True),
    ("squash", signal.SIGINT, ("pause", "squash:6", "images/*/image.sif.partial-*"), True),
    # The output's copy is made in the squash step (beside the tests); the output step renames it into place.
    ("output", signal.SIGHUP, ("pause", "output:0", "OUT/fault.sif.partial-*"), False),
]


def test_signals_at_six_points_leave_nothing_and_the_next_build_reuses_what_was_complete(
        tmp_path: Path, debootstrap_base: Path) -> None:
    store, out_dir = tmp_path / "store", tmp_path / "out"
    out_dir.mkdir()
    output = out_dir / "fault.sif"
    spec = write_spec(tmp_path, debootstrap_base)
    # The post point needs a post command that runs long enough to be interrupted: another spec with the
    # same Python part, so it shares the env layer.
    (tmp_path / "slow").mkdir()
    slow_post = write_spec(tmp_path / "slow", debootstrap_base, post="sleep 30")
    log = out_dir / "fault.sif.build.log"
    seen = []
    for step, signum, how, to_group in POINTS:
        env = {"ENVBUILD_FAULT_PAUSE": how[1]} if how[0] == "pause" else {}
        log.unlink(missing_ok=True)  # so the watch never reads the previous build's log
        process = start_build(slow_post if step == "post" else spec, output, store, **env)
        if how[0] == "pause":
            wait_for(log_has(log, f"fault pause: step {step}"), 240, f"the pause in step {step}", process)
            pattern = how[2].replace("OUT/", "")
            base = out_dir if how[2].startswith("OUT/") else store
            assert list(base.glob(pattern)), f"nothing half-made at {how[2]} to clean up"
        else:
            wait_for(log_has(log, how[1]), 240, f"{how[1]!r} in the log", process)
            time.sleep(0.3)  # the tool is running now
        (os.killpg if to_group else os.kill)(process.pid, signum)
        signalled = time.monotonic()
        out, _ = process.communicate(timeout=60)
        # Cleanup included, well within Slurm's KillWait (30 s) before its SIGKILL.
        ended = time.monotonic() - signalled
        assert ended < 30, out
        name = signal.Signals(signum).name
        assert process.returncode == 128 + signum, out
        assert f"interrupted by {name} during step '{step}'" in out, out
        assert_nothing_left(store, out_dir, output)
        seen.append((step, name, round(ended, 1)))
    print("interrupted:", seen)
    done = run_cli([ENVBUILD, "build", str(spec), "-o", str(output), "--compression", "zstd"],
                   env_extra={"ENVBUILD_CACHE_DIR": str(store)}, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    # Interrupted last while copying to the output: the image squashed before that is complete in the
    # store and is all the next build needs.
    assert "image unchanged, taken from the store" in done.stderr, done.stderr
    assert output.is_file()


def test_sigkill_debris_goes_with_the_next_build_or_a_prune(tmp_path: Path, debootstrap_base: Path) -> None:
    store, out_dir = tmp_path / "store", tmp_path / "out"
    out_dir.mkdir()
    output = out_dir / "fault.sif"
    spec = write_spec(tmp_path, debootstrap_base)
    log = out_dir / "fault.sif.build.log"

    def kill_at(point: str) -> None:
        log.unlink(missing_ok=True)
        process = start_build(spec, output, store, ENVBUILD_FAULT_PAUSE=point)
        wait_for(log_has(log, f"fault pause: step {point.split(':')[0]}"), 240, f"the pause at {point}", process)
        os.killpg(process.pid, signal.SIGKILL)  # the whole group, as the OOM killer or a dying node would
        process.wait(timeout=30)

    # 1. Killed during the squash: a work directory and an unfinished image entry stay. `cache prune`
    #    removes both at once (their builds' locks are free), with no hour of waiting.
    kill_at("squash:6")
    listed = json.loads(run_cli([ENVBUILD, "cache", "ls", "--json"], env_extra={"ENVBUILD_CACHE_DIR": str(store)}).stdout)
    debris = sorted(f"{e['kind']}" for e in listed if e["kind"] == "work" or (e["kind"] == "image" and not e["complete"]))
    assert debris == ["image", "work"], listed
    pruned = run_cli([ENVBUILD, "cache", "prune"], env_extra={"ENVBUILD_CACHE_DIR": str(store)})
    assert pruned.returncode == 0, pruned.stderr
    assert pruned.stdout.count("removed ") == 2, pruned.stdout
    assert_nothing_left(store, out_dir, output)

    # 2. Killed after the partial output copy: the work directory and the partial file beside the output
    #    stay; the next build removes both before it starts, and succeeds.
    kill_at("output:0")
    assert list(out_dir.glob("fault.sif.partial-*")) and any(kind_dir(store, "work").iterdir())
    done = run_cli([ENVBUILD, "build", str(spec), "-o", str(output), "--compression", "zstd"],
                   env_extra={"ENVBUILD_CACHE_DIR": str(store)}, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "removed what killed builds left" in done.stderr and ".partial-" in done.stderr, done.stderr
    assert not list(out_dir.glob("*partial*")) and not any(kind_dir(store, "work").iterdir())
    assert output.is_file()
