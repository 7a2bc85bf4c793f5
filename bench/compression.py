"""Squashfs compressions for the final image, side by side: squash time, image size, start-up time.

For each compression, envbuild.sif.writer turns the same tree into a SIF (mksquashfs straight into the
image + the SIF framing; timed as a whole), then `apptainer exec IMG python -c 'import torch'` is
timed N times per image, the images taken in turn (a b c, a b c, ...) so that drift in the machine's
load hits them alike; the median is reported. Ratios are against gzip, the default (the only
compression every apptainer and singularity can run).
The tree defaults to the reference image (build/local-cpu-pytorch.sif, envs/local-cpu-pytorch.yaml)
unsquashed into a temp dir; --apptainer-build also times today's `apptainer build --force` of it.

    .venv/bin/python bench/compression.py [--tree DIR] [--runs 5] [--compressions gzip,zstd,lz4,xz] [--start CMD]
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from envbuild.builder.plan.squashplan import squash_actions  # noqa: E402
from envbuild.sif.reader import read_sif_layout  # noqa: E402

REFERENCE = REPO / "build/local-cpu-pytorch.sif"
START = ["python", "-c", "import torch"]  # the default --start: what a user's job does first


def unsquash(image: Path, dest: Path) -> None:
    print(f"unsquashing {image} -> {dest}", flush=True)
    offset = read_sif_layout(image).primary_partition().offset
    subprocess.run(["unsquashfs", "-q", "-n", "-d", str(dest), "-o", str(offset), str(image)], check=True,
                   stdout=subprocess.DEVNULL)


def run_actions(actions: tuple, work: Path) -> None:
    """Through the build executor, exactly as `envbuild build` squashes (its log goes to work/)."""
    import io

    from envbuild.builder.execute.executor import BuildExecutor
    from envbuild.builder.plan.actions import Step

    executor = BuildExecutor(work / "squash.log", store_root=work / "store", out=io.StringIO())
    executor.execute_steps((Step("squash", "squash", actions),), None, "bench")


def squash(tree: Path, image: Path, work: Path, compression: str, runtime: str, processors: int | None) -> float:
    actions = squash_actions(str(tree), str(image), compression=compression, processors=processors,
                             source_date_epoch=1_700_000_000, runtime_path=runtime, work_dir=str(work))
    started = time.monotonic()
    run_actions(actions, work)
    return time.monotonic() - started


def apptainer_build(tree: Path, image: Path, runtime: str) -> float:
    started = time.monotonic()
    proc = subprocess.run([runtime, "build", "--force", str(image), str(tree)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"apptainer build failed:\n{proc.stderr[-3000:]}")
    return time.monotonic() - started


def start_time(runtime: str, image: Path, start: list[str]) -> float:
    started = time.monotonic()
    proc = subprocess.run([runtime, "exec", str(image), *start], capture_output=True, text=True)
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"{runtime} exec {image} {' '.join(start)} failed:\n{proc.stderr[-2000:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=None, help="sandbox tree to squash (default: the reference image, unsquashed)")
    parser.add_argument("--image", type=Path, default=REFERENCE, help="image to unsquash when --tree is not given")
    parser.add_argument("--compressions", default="gzip,zstd,lz4,xz", help="comma-separated; the first is the baseline")
    parser.add_argument("--runs", type=int, default=5, help="start-up runs per image (median reported)")
    parser.add_argument("--start", default=shlex.join(START), help=f"the command timed in each image (default: {shlex.join(START)})")
    parser.add_argument("--processors", type=int, default=None, help="mksquashfs -processors (default: CPUs we may use)")
    parser.add_argument("--runtime", default=shutil.which("apptainer") or shutil.which("singularity") or "apptainer")
    parser.add_argument("--apptainer-build", action="store_true", help="also time `apptainer build --force` of the tree (gzip)")
    parser.add_argument("--workdir", type=Path, default=None, help="scratch dir (default: a temp dir under /var/tmp)")
    parser.add_argument("--keep", action="store_true", help="keep the images (and the unsquashed tree)")
    args = parser.parse_args()
    names = [c.strip() for c in args.compressions.split(",") if c.strip()]
    start = shlex.split(args.start)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="envbuild-compression-", dir="/var/tmp"))
    work.mkdir(parents=True, exist_ok=True)
    squash_s: dict[str, float] = {}
    sizes: dict[str, int] = {}
    starts: dict[str, list[float]] = {name: [] for name in names}
    build_s: float | None = None
    try:
        tree = args.tree
        if tree is None:
            tree = work / "tree"
            unsquash(args.image, tree)
        images = {name: work / f"{name.replace(':', '-')}.sif" for name in names}
        print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
        for name in names:
            squash_s[name] = squash(tree, images[name], work / "scratch", name, args.runtime, args.processors)
            sizes[name] = images[name].stat().st_size
            print(f"  squash {name:<10} {squash_s[name]:7.1f} s  {sizes[name] / 2**20:8.1f} MiB", flush=True)
            if args.apptainer_build and name == names[0]:
                # Right after the baseline, so that both see the same machine load.
                built = work / "apptainer-build.sif"
                build_s = apptainer_build(tree, built, args.runtime)
                print(f"  apptainer build (gzip) {build_s:7.1f} s  {built.stat().st_size / 2**20:8.1f} MiB", flush=True)
                built.unlink()
        start_time(args.runtime, images[names[0]], start)  # warm-up: the runtime's own files into the page cache
        for run in range(args.runs):
            for name in names:  # in turn, so that drift in the machine's load hits every image alike
                starts[name].append(start_time(args.runtime, images[name], start))
            print(f"  start-up run {run + 1}/{args.runs}: " + "  ".join(f"{n} {starts[n][-1]:.2f} s" for n in names), flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    base = names[0]
    median = {name: statistics.median(values) for name, values in starts.items()}
    print()
    print(f"tree: {args.tree or args.image}   start-up: {args.runtime} exec IMG {' '.join(start)} (median of {args.runs})")
    print(f"{'compression':<12}{'squash (s)':>11}{'x' + base:>9}{'size (MiB)':>12}{'x' + base:>9}{'start-up (s)':>14}{'x' + base:>9}")
    for name in names:
        print(f"{name:<12}{squash_s[name]:>11.1f}{squash_s[name] / squash_s[base]:>9.2f}{sizes[name] / 2**20:>12.1f}"
              f"{sizes[name] / sizes[base]:>9.2f}{median[name]:>14.2f}{median[name] / median[base]:>9.2f}")
    if build_s is not None:
        print(f"today's `apptainer build --force` of the same tree (gzip, copies the tree first): {build_s:.1f} s "
              f"= {build_s / squash_s[base]:.2f}x envbuild.sif.writer {base}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()
