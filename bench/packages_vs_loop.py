"""`envbuild packages` against the shell loop users run today, side by side on the same images:

    for f in IMAGES; do apptainer exec $f /bin/bash -c 'eval "$WITH_CONDA"; pip list' | grep lightning; done
    envbuild packages --no-cache --grep lightning IMAGES      (cold: reads every SIF)
    envbuild packages --grep lightning IMAGES                 (index cache warm)

The images are N variants of the reference image (build/local-cpu-pytorch.sif, made by
examples/run_main.sh): its root file system is unpacked once, and each variant gets a marker package
of its own and a squashfs compression of its own (gzip, zstd, lz4 in turn), then `apptainer build`.
Or pass your own images with --images. Each method runs --repeat times; the median is reported, with
the ratio to the loop. The answers are compared too: the loop's and envbuild's lightning lines must agree.
The OS page cache is warm for all methods alike (the images were just written or read).

    .venv/bin/python bench/packages_vs_loop.py [-n 5] [--images A.sif B.sif ...] [--workdir DIR] [--keep]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from envbuild.sif.reader import read_sif_layout  # noqa: E402

ENVBUILD = str(REPO / "bin" / "envbuild")
COMPRESSIONS = ("gzip", "zstd -Xcompression-level 3", "lz4")


def run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload]


def make_variants(reference: Path, count: int, work: Path) -> list[Path]:
    images = [work / f"variant-{number}.sif" for number in range(1, count + 1)]
    if all(image.is_file() for image in images):  # made by an earlier run with the same --workdir
        return images
    part = read_sif_layout(reference).primary_partition()
    rootfs = work / "rootfs"
    if not rootfs.is_dir():
        print(f"unpacking {reference} ...", flush=True)
        done = run(["unsquashfs", "-q", "-n", "-d", str(rootfs), "-o", str(part.offset), str(reference)])
        if done.returncode != 0:
            raise SystemExit(f"unsquashfs failed:\n{done.stderr[-2000:]}")
    site = next((rootfs / "opt/envbuild/venv/lib").glob("python3*/site-packages"))
    for number, image in enumerate(images, 1):
        if image.is_file():
            continue
        for old in site.glob("bench_variant_*.dist-info"):
            shutil.rmtree(old)
        marker = site / f"bench_variant_{number}-1.{number}.dist-info"
        marker.mkdir()
        (marker / "METADATA").write_text(f"Metadata-Version: 2.1\nName: bench-variant-{number}\nVersion: 1.{number}\n\n")
        compression = COMPRESSIONS[(number - 1) % len(COMPRESSIONS)]
        print(f"building {image.name} ({compression.split()[0]}) ...", flush=True)
        started = time.monotonic()
        built = run(["apptainer", "build", "--force", "--mksquashfs-args", f"-comp {compression}", str(image), str(rootfs)])
        if built.returncode != 0:
            raise SystemExit(f"apptainer build failed:\n{built.stderr[-2000:]}")
        print(f"  {time.monotonic() - started:.0f} s, {image.stat().st_size / 2**20:.0f} MiB", flush=True)
    return images


def timed(argv: list[str], env: dict[str, str], repeat: int) -> tuple[float, str]:
    times, output = [], ""
    for _ in range(repeat):
        started = time.perf_counter()
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
        times.append(time.perf_counter() - started)
        if proc.returncode not in (0, 1):  # grep's 1 (no match) is an answer too
            raise SystemExit(f"{argv[:3]} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
        output = proc.stdout
    return statistics.median(times), output


def loop_answer(output: str) -> set[tuple[str, str, str]]:
    """`IMAGE pip-list-line` lines -> (image, name, version)."""
    answer = set()
    for line in output.splitlines():
        image, name, version = line.split()[:3]
        answer.add((image, name.lower(), version))
    return answer


def envbuild_answer(output: str) -> set[tuple[str, str, str]]:
    """`envbuild packages` table -> (image, name, version), its columns found by the header's names (a column
    added to the table, as ARCH was, must not break the comparison)."""
    lines = output.splitlines()
    if not lines:
        return set()
    header = lines[0].split()
    image, name, version = header.index("IMAGE"), header.index("PACKAGE"), header.index("VERSION")
    answer = set()
    for line in lines[1:]:
        cells = line.split()
        answer.add((cells[image], cells[name].lower(), cells[version]))
    return answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", "--count", type=int, default=5, help="number of variant images (default 5)")
    parser.add_argument("--images", nargs="+", type=Path, help="use these images instead of making variants")
    parser.add_argument("--reference", type=Path, default=REPO / "build" / "local-cpu-pytorch.sif")
    parser.add_argument("--workdir", type=Path, help="keep variants here (reused by the next run)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary work directory")
    parser.add_argument("--repeat", type=int, default=3, help="runs per method; the median is reported (default 3)")
    parser.add_argument("--grep", default="lightning")
    args = parser.parse_args()

    work = args.workdir or Path(tempfile.mkdtemp(prefix="envbuild-bench-packages-", dir="/var/tmp"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        if args.images:
            images = args.images
        else:
            if not args.reference.is_file():
                raise SystemExit(f"no reference image at {args.reference}: run examples/run_main.sh, or pass --images")
            images = make_variants(args.reference, args.count, work)
        paths = [str(p) for p in images]
        env = dict(os.environ, ENVBUILD_CACHE_DIR=str(work / "envbuild-cache"), XDG_CACHE_HOME=str(work / "envbuild-cache"),
                   PYTHONPATH=str(REPO))  # XDG: the inventory cache is the user's own (~/.cache/envrun)
        shutil.rmtree(work / "envbuild-cache", ignore_errors=True)
        loop = ('for f in "$@"; do apptainer exec "$f" /bin/bash -c \'eval "$WITH_CONDA"; pip list 2>/dev/null\' '
                f'| grep -i {args.grep} | sed "s|^|$f |"; done')
        grep = re.escape(args.grep)
        size = sum(p.stat().st_size for p in images) / 2**30
        print(f"\n{len(images)} images, {size:.1f} GiB; --grep {args.grep}; median of {args.repeat} runs; "
              f"{os.cpu_count()} cores; {time.strftime('%Y-%m-%d %H:%M %Z')}", flush=True)

        results: list[tuple[str, float]] = []
        startup, _ = timed([ENVBUILD, "--version"], env, args.repeat)
        loop_time, loop_out = timed(["bash", "-c", loop, "loop", *paths], env, args.repeat)
        results.append(("shell loop: apptainer exec ... pip list | grep", loop_time))
        cold_runs = []
        for _ in range(args.repeat):  # --no-cache reads every image each time, never touching the cache
            cold, cold_out = timed([ENVBUILD, "packages", "--no-cache", "--grep", grep, *paths], env, 1)
            cold_runs.append(cold)
        results.append(("envbuild packages --no-cache (reads the SIFs)", statistics.median(cold_runs)))
        timed([ENVBUILD, "packages", "--grep", grep, *paths], env, 1)  # fills the index cache
        cached, cached_out = timed([ENVBUILD, "packages", "--grep", grep, *paths], env, args.repeat)
        results.append(("envbuild packages (index cache warm)", cached))
        # The same command without the start-up of the whole envbuild CLI (which imports the build
        # planner and pydantic): what `packages` itself costs.
        alone = [sys.executable, "-c", "import sys; from envbuild.cli.inventory_cmds import packages_command; "
                 "packages_command(sys.argv[1:], prog_name='envbuild packages')"]
        own_cold, own_out = timed([*alone, "--no-cache", "--grep", grep, *paths], env, args.repeat)
        results.append(("  the packages command alone, --no-cache", own_cold))
        own_cached, _ = timed([*alone, "--grep", grep, *paths], env, args.repeat)
        results.append(("  the packages command alone, cache warm", own_cached))
        via, via_out = timed([ENVBUILD, "packages", "--via-runtime", "--grep", grep, *paths], env, 1)
        results.append(("envbuild packages --via-runtime (1 run)", via))

        print(f"\n{'method':<50} {'total s':>8} {'per image s':>12} {'loop / this':>12}")
        for label, seconds in results:
            print(f"{label:<50} {seconds:8.3f} {seconds / len(images):12.3f} {loop_time / seconds:11.1f}x")
        print(f"(of which envbuild's Python start-up, `envbuild --version`: {startup:.3f} s per call)")

        same = (loop_answer(loop_out) == envbuild_answer(cold_out) == envbuild_answer(cached_out) == envbuild_answer(via_out)
                == envbuild_answer(own_out))
        print(f"\nanswers agree: {'yes' if same else 'NO'} ({len(envbuild_answer(cold_out))} matching packages)")
        if not same:
            print("loop:", sorted(loop_answer(loop_out)), "\nenvbuild:", sorted(envbuild_answer(cold_out)))
            raise SystemExit(1)
    finally:
        if not (args.keep or args.workdir):
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
