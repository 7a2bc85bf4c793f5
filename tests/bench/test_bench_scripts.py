"""Every bench/ script runs to its end on a tiny input and prints its side-by-side comparison (issue 31: a
benchmark that crashes at its last step is found here, not by the next person who needs its figures).

The build benchmarks run with --quick (bench/quick.py: one small package, the base from the shared test
store); the ones that read an image take the session's reference image (built once for the e2e tests) or the
store's debootstrap base. The figures printed mean nothing here; only that each script gets to its line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

BENCH = REPO / "bench"
HELPERS = {"quick.py"}  # imported by the scripts, not one


def run_bench(script: str, *args: str, store: Path | None = None, timeout: int = 300) -> str:
    env = dict(os.environ)
    if store is not None:
        env["ENVBUILD_TEST_CACHE"] = str(store)  # bench/quick.py seeds its stores from the tests' own
    result = subprocess.run([sys.executable, str(BENCH / script), *args], capture_output=True, text=True,
                            timeout=timeout, env=env, cwd=REPO)
    assert result.returncode == 0, f"{script} exit {result.returncode}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


def assert_line(output: str, pattern: str) -> None:
    assert re.search(pattern, output, re.MULTILINE), f"no line matching {pattern!r} in:\n{output[-3000:]}"


COVERED = {"envrun_overlay_dryrun.py", "catalogue_50_images.py", "envrun_latency.py", "packages_vs_loop.py",
           "noop_rebuild.py", "compression.py", "build_cache.py", "build_vs_manual.py", "plus_one.py",
           "overlay_vs_image.py", "store_verify.py", "report_overhead.py", "check_parser.py",
           "check_live_wait.py"}


def test_every_bench_script_has_a_test_here() -> None:
    scripts = {path.name for path in BENCH.glob("*.py")} - HELPERS
    assert scripts == COVERED, f"fix: add a tiny run of {sorted(scripts - COVERED)} here (and drop {sorted(COVERED - scripts)})"


# --- no container ------------------------------------------------------------------------------------------


def test_check_parser() -> None:
    output = run_bench("check_parser.py", "--quick")
    assert_line(output, r"^right +10 of 10 ")  # tree-sitter-bash reads every construct of issue 38
    assert_line(output, r"^`envrun sbatch --check` of it, end to end")


@pytest.mark.slurm
def test_check_live_wait() -> None:
    """The live controller of the test cluster and a down one (a copy of its slurm.conf, another port); this tree
    on both sides."""
    output = run_bench("check_live_wait.py", "--old", ".", "--runs", "1", "--only", "live", "down")
    assert_line(output, r"^ +live new: wall \d+\.\d{3} s .*, CPU \d+\.\d{3} s")
    assert_line(output, r"^ +down new: wall \d+\.\d{3} s .*, CPU \d+\.\d{3} s")
    assert_line(output, r"new note: no Slurm answered in .*DOWN")


def test_envrun_overlay_dryrun() -> None:
    output = run_bench("envrun_overlay_dryrun.py", "--runs", "2")
    assert_line(output, r"^variant\s+median \(ms\)\s+vs --image$")
    assert_line(output, r"^--overlay \(same SIF id\)\s+\d+\.\d\s+[+-]\d+\.\d$")


def test_catalogue_50_images(tmp_path: Path) -> None:
    output = run_bench("catalogue_50_images.py", "--count", "3", "-n", "1", "--small-only", "--workdir", str(tmp_path))
    assert_line(output, r"^\| small \| `envbuild catalogue DIR -o site` \|.*\| \d+\.\dx \| \d+ ms \|$")
    assert_line(output, r"^\| small \| `envbuild packages --matrix DIR/\*\.sif` \|.*\| \d+\.\dx \|")


# --- on the session's reference image ----------------------------------------------------------------------


@pytest.mark.apptainer
@pytest.mark.slow
def test_envrun_latency(reference_image: Path) -> None:
    output = run_bench("envrun_latency.py", str(reference_image), "--runs", "2")
    assert_line(output, r"^envrun --image IMG true: \+-?\d+\.\d ms over bare apptainer exec \(\d+\.\d\dx\); median of "
                        r"the 2 runs' differences with the bare run beside them: \+-?\d+\.\d ms$")


@pytest.mark.apptainer
@pytest.mark.slow
def test_packages_vs_loop(reference_image: Path, tmp_path: Path) -> None:
    output = run_bench("packages_vs_loop.py", "--images", str(reference_image), "--repeat", "2", "--workdir", str(tmp_path))
    assert_line(output, r"^envbuild packages, empty index \(cold\)\s+[\d.]+\s+[\d.]+\s+\d+\.\dx\s+[\d.]+-[\d.]+$")
    assert_line(output, r"^envbuild packages --no-cache \(reads the SIFs\)\s+[\d.]+\s+[\d.]+\s+\d+\.\dx\s+[\d.]+-[\d.]+$")
    assert_line(output, r"^side by side: cold \d+\.\dx, warm \d+\.\dx the loop's speed")
    assert_line(output, r"^answers agree: yes \([1-9]\d* matching packages\)$")


@pytest.mark.apptainer
@pytest.mark.slow
def test_noop_rebuild(reference_image: Path, build_cache: Path) -> None:
    output = run_bench("noop_rebuild.py", "-o", str(reference_image), "--cache-dir", str(build_cache),
                       "--runs", "2", "--compare", str(REPO))  # the same checkout side by side: only the line counts
    assert_line(output, r"^this / other: \d+\.\d\dx$")


@pytest.mark.apptainer
@pytest.mark.slurm
@pytest.mark.slow
def test_report_overhead(reference_image: Path) -> None:
    output = run_bench("report_overhead.py", str(reference_image), "--runs", "1", "--work", "1000", "--intervals", "1",
                       "--sampler-seconds", "2")
    assert_line(output, r"^step wall time, report / no report: \d+\.\d{3}x \([+-]\d+ ms\)$")
    assert_line(output, r"^start-up \(.*\): \d+ ms CPU$")
    assert_line(output, r"^1\s+\d+\.\d\s+\d+\s+\d+\.\d{3}\s+\d+\.\d\s+\d+\.\d\d\s+\d+\.\d{3}$")


# --- on the shared store's debootstrap base ----------------------------------------------------------------


@pytest.mark.apptainer
def test_compression(debootstrap_base: Path, tmp_path: Path) -> None:
    output = run_bench("compression.py", "--tree", str(debootstrap_base), "--compressions", "gzip,lz4", "--runs", "1",
                       "--start", "python3 -c pass", "--workdir", str(tmp_path / "work"))
    assert_line(output, r"^lz4(\s+\d+\.\d+){6}$")


# The build benchmarks' --quick: (script, its options, the lines it must print).
QUICK_BUILDS = [
    ("build_cache.py", ["--compression", "zstd", "--repeat", "1", "--workdir"],
     [r"^zstd\s+[\d.]+s\s+[\d.]+s\s+[\d.]+s\s+\d+%\s+[\d.]+s\s+\d+ MiB$"]),
    ("build_vs_manual.py", ["--compression", "zstd", "--workdir"], [r"^envbuild zstd\s+[\d.]+\s+[\d.]+x\s+\d+\s+[\d.]+x$"]),
    ("plus_one.py", ["--compression", "zstd", "--workdir"],
     [r"^\+1 --full\s+[\d.]+s\s+[\d.]+%\s+\d+ MiB$", r"^\+1 default\s+[\d.]+s\s+[\d.]+%\s+\d+ MiB$",
      r"^layered image: yes$", r"^goal: \+1 default <= 10 % of cold: [\d.]+%\.$",
      r"^packages of the two \+1 images equal: yes; the stale lock was rewritten: yes$"]),
    ("overlay_vs_image.py", ["--compression", "zstd", "--workdir"],
     [r"^median ratio overlay / image rebuild: \d+\.\d{3} \(goal <= 0\.05\)"]),
    ("store_verify.py", ["--runs", "1", "--plus-one-runs", "1", "--work"],
     [r"^reuse \(image taken from the store\)\s+[\d.]+\s+[\d.]+\s+[\d.]+x"]),
]


@pytest.mark.apptainer
@pytest.mark.parametrize(("script", "options", "lines"), QUICK_BUILDS, ids=[row[0] for row in QUICK_BUILDS])
def test_build_benchmark_quick(script: str, options: list[str], lines: list[str], debootstrap_base: Path,
                               build_cache: Path, tmp_path: Path) -> None:
    """Each takes its scratch directory last (--workdir or --work) and seeds its stores from the shared one."""
    output = run_bench(script, "--quick", *options, str(tmp_path), store=build_cache)
    for line in lines:
        assert_line(output, line)
