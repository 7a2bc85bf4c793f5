"""`envbuild packages` against the shell loop users run today, side by side on the same images:

    for f in IMAGES; do apptainer exec $f /bin/bash -c 'eval "$WITH_CONDA"; pip list' | grep lightning; done
    envbuild packages --grep lightning IMAGES                 (cold: an empty index, every SIF read, the index written)
    envbuild packages --no-cache --grep lightning IMAGES      (every SIF read, the index neither read nor written)
    envbuild packages --grep lightning IMAGES                 (warm: the index knows every image)

The images are N variants of the reference image (build/local-cpu-pytorch.sif, made by
examples/run_main.sh): its root file system is unpacked once, and each variant gets a marker package
of its own and a squashfs compression of its own (gzip, zstd, lz4 in turn), then `apptainer build`.
Or pass your own images with --images. Each method runs --repeat times, the methods taking turns, so a
noisy machine weighs on all alike; the median is reported with the range, and the ratio to the loop.
Every cold run starts from an index directory of its own, so each run measures the same thing however
often the script is run. The answers are compared too: the loop's and envbuild's lightning lines must
agree. The OS page cache is warm for all methods alike (the images were just written or read).
With --compare OTHER_CHECKOUT the other checkout's `bin/envbuild` takes its turn beside this one's.

    .venv/bin/python bench/packages_vs_loop.py [-n 20] [--images A.sif B.sif ...] [--workdir DIR] [--keep]
        [--repeat 3] [--compare OTHER_CHECKOUT]
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
from collections.abc import Callable
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


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    started = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    seconds = time.perf_counter() - started
    if proc.returncode not in (0, 1):  # grep's 1 (no match) is an answer too
        raise SystemExit(f"{argv[:3]} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return seconds, proc.stdout


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
    parser.add_argument("--compare", type=Path, metavar="CHECKOUT", help="another checkout's bin/envbuild, taking turns")
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
        base_env = dict(os.environ, ENVBUILD_CACHE_DIR=str(work / "envbuild-cache"), PYTHONPATH=str(REPO))

        def index_env(name: str) -> dict[str, str]:  # XDG: the inventory index is the user's own (~/.cache/envrun)
            shutil.rmtree(work / name, ignore_errors=True)
            return dict(base_env, XDG_CACHE_HOME=str(work / name))

        loop = ('for f in "$@"; do apptainer exec "$f" /bin/bash -c \'eval "$WITH_CONDA"; pip list 2>/dev/null\' '
                f'| grep -i {args.grep} | sed "s|^|$f |"; done')
        grep = re.escape(args.grep)
        size = sum(p.stat().st_size for p in images) / 2**30
        print(f"\n{len(images)} images, {size:.1f} GiB; --grep {args.grep}; median of {args.repeat} runs, the methods "
              f"taking turns; {os.cpu_count()} cores; {time.strftime('%Y-%m-%d %H:%M %Z')}", flush=True)

        checkouts = {"": REPO}
        if args.compare:
            checkouts[f" [{args.compare}]"] = args.compare.resolve()
        # (label, argv, environment per run): the cold runs get an empty index each time (index_env empties it).
        methods: list[tuple[str, list[str], Callable[[], dict[str, str]]]] = [
            ("shell loop: apptainer exec ... pip list | grep", ["bash", "-c", loop, "loop", *paths], lambda: base_env)]
        for suffix, checkout in checkouts.items():
            envbuild = str(checkout / "bin" / "envbuild")
            warm_env = index_env(f"index-warm{len(methods)}")
            timed([envbuild, "packages", "--grep", grep, *paths], warm_env)  # fills the warm index
            methods += [
                (f"envbuild packages, empty index (cold){suffix}", [envbuild, "packages", "--grep", grep, *paths],
                 lambda: index_env("index-cold")),  # emptied before each run
                (f"envbuild packages --no-cache (reads the SIFs){suffix}",
                 [envbuild, "packages", "--no-cache", "--grep", grep, *paths], lambda: base_env),
                (f"envbuild packages (index warm){suffix}", [envbuild, "packages", "--grep", grep, *paths],
                 lambda env=warm_env: env),
            ]
        times: dict[str, list[float]] = {label: [] for label, _, _ in methods}
        outputs: dict[str, str] = {}
        python_start = []
        for _ in range(args.repeat):
            for label, argv, environment in methods:
                seconds, outputs[label] = timed(argv, environment())
                times[label].append(seconds)
            python_start.append(timed([sys.executable, "-I", "-c", "pass"], base_env)[0])
        via_label = "envbuild packages --via-runtime (1 run)"
        via, outputs[via_label] = timed([str(REPO / "bin" / "envbuild"), "packages", "--via-runtime", "--grep", grep, *paths],
                                        base_env)
        times[via_label] = [via]

        loop_time = statistics.median(times[methods[0][0]])
        width = max(map(len, times))
        print(f"\n{'method':<{width}} {'total s':>8} {'per image s':>12} {'loop / this':>12}  range s")
        for label, values in times.items():
            seconds = statistics.median(values)
            print(f"{label:<{width}} {seconds:8.3f} {seconds / len(images):12.3f} {loop_time / seconds:11.1f}x  "
                  f"{min(values):.3f}-{max(values):.3f}")
        print(f"(Python's own start-up, `python -I -c pass`: {statistics.median(python_start):.3f} s per call)")
        cold, warm = (statistics.median(times[methods[index][0]]) for index in (1, 3))
        print(f"side by side: cold {loop_time / cold:.1f}x, warm {loop_time / warm:.1f}x the loop's speed "
              "(issue 39's goal: >= 100x cold, >= 500x warm over 20 images)")
        if args.compare:
            other_cold, other_warm = (statistics.median(times[methods[index][0]]) for index in (4, 6))
            print(f"this / other checkout: cold {cold / other_cold:.2f}x, warm {warm / other_warm:.2f}x the time")
        print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")

        answers = {label: (loop_answer if label == methods[0][0] else envbuild_answer)(text) for label, text in outputs.items()}
        same = len(set(map(frozenset, answers.values()))) == 1
        print(f"\nanswers agree: {'yes' if same else 'NO'} ({len(answers[methods[1][0]])} matching packages)")
        if not same:
            for label, answer in answers.items():
                print(f"{label}: {sorted(answer)}")
            raise SystemExit(1)
    finally:
        if not (args.keep or args.workdir):
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
