"""`envbuild catalogue` on a directory of 50 images, with the inventory cache cold and warm, side by side
with `envbuild packages --matrix` (the same matrix as text, without the per-image facts and the page):

    envbuild catalogue DIR -o site        (cold: an empty cache directory, so every SIF is read and indexed)
    envbuild catalogue DIR -o site        (warm: the same again, the inventories come from the cache)
    envbuild packages --matrix DIR/*      (cold and warm likewise)

Two directories of 50:
  reference  50 hard links to the reference image (build/local-cpu-pytorch.sif, 393 MiB, 46,000 inodes,
             53 packages): each has its own path, hence its own cache entry, so the cold run reads all 50.
  small      50 distinct small SIFs (tests/support/catalogue_images.py: the inventory layout, 21 packages in six
             environments, a build record), gzip and zstd in turn.
The OS page cache is warm for every run alike (the files were just written or read): "cold" is the
inventory cache, not the disk. Each command runs --repeat times; medians are reported.

    .venv/bin/python bench/catalogue_50_images.py [-n 3] [--count 50] [--workdir DIR] [--keep] [--small-only]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.catalogue_images import make_layout_sif  # noqa: E402

ENVBUILD = str(REPO / "bin" / "envbuild")
REFERENCE = REPO / "build" / "local-cpu-pytorch.sif"


def reference_links(work: Path, count: int) -> Path:
    shelf = work / "reference"
    shelf.mkdir(parents=True, exist_ok=True)
    for number in range(1, count + 1):
        link = shelf / f"ref-{number:02d}.sif"
        if not link.exists():
            os.link(REFERENCE, link)  # same file system needed; a copy would be 20 GB
    return shelf


def small_images(work: Path, count: int) -> Path:
    shelf = work / "small"
    shelf.mkdir(parents=True, exist_ok=True)
    roots = work / "small-roots"
    roots.mkdir(exist_ok=True)
    for number in range(1, count + 1):
        image = shelf / f"small-{number:02d}.sif"
        if not image.exists():
            made = make_layout_sif(roots, f"small-{number:02d}", variant="ab"[number % 2],
                                   compression=("gzip", "zstd")[number % 2])
            made.rename(image)
            shutil.rmtree(roots / f"small-{number:02d}.root")
    return shelf


def timed(argv: list[str], cache: Path) -> tuple[float, float]:
    """(wall, CPU) seconds. The CPU time (user + system of the command) is reported beside the wall time
    because this 2-core machine is shared: under load the wall time of the same run varied 5x, its CPU
    time much less."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    # XDG_CACHE_HOME: the inventory cache is the user's own (~/.cache/envrun), not in ENVBUILD_CACHE_DIR
    env = {**os.environ, "ENVBUILD_CACHE_DIR": str(cache), "XDG_CACHE_HOME": str(cache)}
    result = subprocess.run(argv, capture_output=True, text=True, env=env)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:3])} ... exited {result.returncode}:\n{result.stderr[-2000:]}")
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _median(runs: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def measure(shelf: Path, work: Path, repeat: int) -> dict[str, tuple[tuple[float, float], tuple[float, float]]]:
    """command name -> ((wall, CPU) cold, (wall, CPU) warm), medians in seconds."""
    images = sorted(str(p) for p in shelf.glob("*.sif"))
    commands = {
        "envbuild catalogue DIR -o site": [ENVBUILD, "catalogue", str(shelf), "-o", str(work / "site")],
        "envbuild packages --matrix DIR/*.sif": [ENVBUILD, "packages", "--matrix", *images],
    }
    results = {}
    for name, argv in commands.items():
        cold, warm = [], []
        for _ in range(repeat):
            cache = Path(tempfile.mkdtemp(prefix="cache-", dir=work))
            cold.append(timed(argv, cache))
            warm.append(timed(argv, cache))
            shutil.rmtree(cache)
        results[name] = (_median(cold), _median(warm))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--repeat", type=int, default=3)
    parser.add_argument("--count", type=int, default=50)
    parser.add_argument("--workdir", type=Path, help="keep the images here between runs (default: a temporary dir)")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--small-only", action="store_true", help="leave the reference set out even when it is built")
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="catalogue-bench-", dir="/var/tmp"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        shelves = {"small": small_images(work, args.count)}
        if args.small_only:
            pass
        elif REFERENCE.is_file():
            shelves["reference"] = reference_links(work, args.count)
        else:
            print(f"{REFERENCE} not built: the reference set is left out (examples/run_main.sh builds it)")
        print(f"{args.count} images per set, median of {args.repeat}; cold = empty inventory cache\n")
        print("| set | command | cold: wall (CPU) | warm: wall (CPU) | cold/warm (CPU) | per image, warm (CPU) |")
        print("|---|---|---|---|---|---|")
        for label, shelf in shelves.items():
            for name, (cold, warm) in measure(shelf, work, args.repeat).items():
                print(f"| {label} | `{name}` | {cold[0]:.2f} s ({cold[1]:.2f} s) | {warm[0]:.2f} s ({warm[1]:.2f} s) | "
                      f"{cold[1] / warm[1]:.1f}x | {warm[1] / args.count * 1000:.0f} ms |", flush=True)
        page = work / "site" / "index.html"
        print(f"\npage: {page.stat().st_size / 1024:.0f} KiB, catalogue.json: "
              f"{(work / 'site' / 'catalogue.json').stat().st_size / 1024:.0f} KiB (last set)")
    finally:
        if not (args.keep or args.workdir):
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
