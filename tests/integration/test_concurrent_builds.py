"""Builds that run at the same time against one store (issue 15): a job array building the same spec,
two specs sharing a base, and a build while `envbuild cache prune` empties the store around it. Real
builds of a tiny spec on a `localimage:` base, each test with a fresh store."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.support.build_faults import ENVBUILD, start_build, write_spec

pytestmark = [pytest.mark.apptainer, pytest.mark.slow]


def entries(store: Path) -> list[dict]:
    listed = run_cli([ENVBUILD, "cache", "ls", "--json"], env_extra={"ENVBUILD_CACHE_DIR": str(store)})
    return [e for e in json.loads(listed.stdout) if e["kind"] != "download"]


def finish(processes: list) -> list[str]:
    outputs = []
    for process in processes:
        out, _ = process.communicate(timeout=900)
        assert process.returncode == 0, out
        outputs.append(out)
    return outputs


def test_four_builds_of_one_spec_one_builds_the_others_wait_and_reuse(tmp_path: Path, debootstrap_base: Path) -> None:
    store = tmp_path / "store"
    spec = write_spec(tmp_path, debootstrap_base)
    outputs = finish([start_build(spec, tmp_path / f"job{i}" / "fault.sif", store) for i in range(4)])
    built = [out for out in outputs if "built " in out and "taken from the store" not in out]
    reused = [out for out in outputs if "image unchanged, taken from the store" in out]
    assert (len(built), len(reused)) == (1, 3), "\n=====\n".join(outputs)
    assert sum("waiting for another build that holds" in out for out in outputs) >= 3
    unpacked = [line for out in outputs for line in out.splitlines() if "unpack base" in line and ": done in" in line]
    assert len(unpacked) == 1, outputs
    kinds = sorted((e["kind"], e["complete"]) for e in entries(store))
    assert kinds == [("base", True), ("env", True), ("image", True)], kinds
    for i in range(4):
        assert (tmp_path / f"job{i}" / "fault.sif").is_file()


def test_two_specs_on_one_base_share_it_and_both_finish(tmp_path: Path, debootstrap_base: Path) -> None:
    store = tmp_path / "store"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = write_spec(tmp_path / "a", debootstrap_base, name="first", packages="six")
    second = write_spec(tmp_path / "b", debootstrap_base, name="second", packages="idna")
    outputs = finish([start_build(first, tmp_path / "a" / "first.sif", store),
                      start_build(second, tmp_path / "b" / "second.sif", store)])
    # One unpacks the base; the other waits for it and takes it as it is.
    # The step lines (the table of steps at the end names the step too, without its outcome).
    unpack = [[line for line in out.splitlines() if "unpack base" in line and line.startswith("[")] for out in outputs]
    assert sorted(lines[-1].rsplit(": ", 1)[1].split(" in ")[0] for lines in unpack) == ["cached", "done"], unpack
    assert any("waiting for another build that holds" in line for lines in unpack for line in lines), unpack
    kinds = sorted((e["kind"], e["complete"]) for e in entries(store))
    assert kinds == [("base", True), ("env", True), ("env", True), ("image", True), ("image", True)], kinds


def test_a_build_while_cache_prune_empties_the_store(tmp_path: Path, debootstrap_base: Path) -> None:
    """`cache prune --max-size 0` asks for everything to go, over and over while a build runs: the
    build's base and env layer (use locks), its image and work directory (its locks) are skipped, the
    build succeeds, and every prune exits 0."""
    store = tmp_path / "store"
    spec = write_spec(tmp_path, debootstrap_base)
    build = start_build(spec, tmp_path / "out" / "fault.sif", store)
    prunes, skipped = 0, 0
    while build.poll() is None:
        pruned = run_cli([ENVBUILD, "cache", "prune", "--max-size", "0"], env_extra={"ENVBUILD_CACHE_DIR": str(store)})
        assert pruned.returncode == 0, pruned.stdout + pruned.stderr
        prunes += 1
        skipped += "skipped" in pruned.stderr
        time.sleep(0.2)
    out, _ = build.communicate()
    assert build.returncode == 0, out
    assert skipped >= 1 and prunes >= 3, (prunes, skipped)
    check = run_cli(["apptainer", "exec", str(tmp_path / "out" / "fault.sif"), "python", "-c", "import six"])
    assert check.returncode == 0, check.stderr
    print(f"{prunes} prunes during the build, {skipped} skipped entries in use")
