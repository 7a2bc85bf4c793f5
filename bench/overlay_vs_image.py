"""Adding one package to the reference environment (envs/local-cpu-pytorch.yaml): a venv overlay on the
reference image vs rebuilding the full image with that package (issue 11; goal: overlay <= 5 % of the
image rebuild), side by side in one run, plus the files each puts on the file system.

For each package in --packages (small, pure Python, none of them in the reference image), alternately:
    image    the reference spec plus the package, built into a new .sif with --full: the store reuses the
             base and the parent env layer, installs the difference, and squashes the whole image again
    overlay  an overlay spec on the reference image with the package: venv, install (uv, or pip where uv
             cannot see what the base has), squash of the venv
Both start from a warm store (the reference image is built first, untimed) and use the same --compression.
Every run measures the same thing: the store is a fresh one of the run's own, seeded from --store with
hard links of its bases and its uv and pip download caches only (so the reference build is not a debootstrap
and downloads little), never the image or overlay of an earlier run. File count: what a user's project
directory would hold as an unsquashed venv (the overlay's files, counted in its squashfs) vs the one .sqsh.

    .venv/bin/python bench/overlay_vs_image.py [--packages tabulate,humanize,termcolor] [--compression gzip:6] [--quick]
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

from bench.quick import TEST_STORE, seed_caches, seed_store, write_quick_spec  # noqa: E402

SPEC = REPO / "envs/local-cpu-pytorch.yaml"


_STEP = re.compile(r"^\s+(?:overlay|base) \d+/\d+\s+(.*?)\s+(\d+\.\d) s$")


def overlay_steps(log: str) -> list[tuple[str, float]]:
    """The steps of an overlay build as its summary lists them (name, seconds)."""
    return [(m.group(1)[:28], float(m.group(2))) for m in map(_STEP.match, log.splitlines()) if m]


def build(spec: Path, output: Path, store: Path, compression: str, *extra: str) -> float:
    env = dict(os.environ, ENVBUILD_CACHE_DIR=str(store))
    started = time.monotonic()
    proc = subprocess.run([str(REPO / "bin/envbuild"), "build", str(spec), "-o", str(output), "--compression", compression,
                           *extra],
                          env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=spec.parent)
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"build of {spec} failed:\n{proc.stderr[-4000:]}")
    STEPS[output] = overlay_steps(proc.stderr)
    return elapsed


STEPS: dict[Path, list[tuple[str, float]]] = {}


def squashfs_files(path: Path) -> int:
    listing = subprocess.run(["unsquashfs", "-l", str(path)], capture_output=True, text=True, check=True).stdout
    return sum(1 for line in listing.splitlines() if line.startswith("squashfs-root/"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--packages", default="tabulate,humanize,termcolor")
    parser.add_argument("--compression", default="gzip:6")
    parser.add_argument("--store", type=Path, help="the store whose bases and download caches seed the run's own (hard "
                        "links; default: $ENVBUILD_CACHE_DIR, else the test suite's store, which --quick always uses)")
    parser.add_argument("--workdir")
    parser.add_argument("--quick", action="store_true", help="tiny input (bench/quick.py: one small package on the base; "
                        "the first of --packages only): shows the script runs to its end, not the reference figures, so "
                        "the goal does not set the exit status")
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-overlay-", dir="/var/tmp"))
    work.mkdir(parents=True, exist_ok=True)
    store = work / f"store-{os.getpid()}"
    shutil.rmtree(store, ignore_errors=True)
    seed = TEST_STORE if args.quick or not (args.store or os.environ.get("ENVBUILD_CACHE_DIR")) else \
        (args.store or Path(os.environ["ENVBUILD_CACHE_DIR"]))
    seed_store(store, seed)
    seed_caches(store, seed)
    if args.quick:
        args.packages = args.packages.split(",")[0]
    spec = write_quick_spec(work) if args.quick else SPEC
    if not args.quick:  # the repository's lock: the reference build installs it as the README's main job does
        shutil.copyfile(SPEC.with_suffix(".lock"), work / "reference.lock")
        spec = work / "reference.yaml"
        spec.write_text(SPEC.read_text())
    base = work / "reference.sif"
    print(f"reference image (own store {store}, seeded from {seed}): "
          f"{build(spec, base, store, args.compression):.1f} s (untimed setup)", flush=True)
    spec_text = spec.read_text()
    image_times, overlay_times, files = [], [], []
    for package in args.packages.split(","):
        stamp = f"{package}-{os.getpid()}-{int(time.time())}"
        image_spec = work / f"image-{stamp}.yaml"
        # the reference spec plus one package (a new env layer on the reference's, then a new image)
        image_spec.write_text(spec_text.replace("  packages:\n", f"  packages:\n    - {package}\n", 1)
                              .replace("name: local-cpu-pytorch", f"name: plus-{package}", 1)
                              .replace("name: bench-quick", f"name: plus-{package}", 1))
        if f"    - {package}\n" not in image_spec.read_text():
            raise SystemExit(f"could not add {package} to {spec}: expected a `  packages:` block")
        overlay_spec = work / f"overlay-{stamp}.yaml"
        overlay_spec.write_text(f"# {stamp}\nname: extras-{package}\nbase: localimage:{base}\noverlay: {{}}\n"
                                f"python: {{packages: [{package}]}}\n")
        image_times.append(build(image_spec, work / f"plus-{package}.sif", store, args.compression, "--full"))
        output = work / f"extras-{package}.sqsh"
        overlay_times.append(build(overlay_spec, output, store, args.compression))
        files.append(squashfs_files(output))
        print(f"{package:>12}: image rebuild (--full) {image_times[-1]:6.1f} s   overlay {overlay_times[-1]:5.1f} s   "
              f"ratio {overlay_times[-1] / image_times[-1]:.3f}   overlay venv: {files[-1]} files -> 1 .sqsh", flush=True)
        steps = STEPS.get(output, [])
        print(f"{'':>12}  overlay steps: " + "; ".join(f"{name} {seconds:.1f} s" for name, seconds in steps)
              + f"; the rest (start-up, spec, lock, store) {overlay_times[-1] - sum(t for _, t in steps):.1f} s", flush=True)
    ratio = statistics.median(o / i for o, i in zip(overlay_times, image_times, strict=True))
    print(f"median ratio overlay / image rebuild: {ratio:.3f} (goal <= 0.05); "
          f"median files: {statistics.median(files):.0f} in a venv vs 1 overlay file; compression {args.compression}; "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f} at the end, {time.strftime('%Y-%m-%d')}")
    shutil.rmtree(store, ignore_errors=True)
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(0 if ratio <= 0.05 or args.quick else 1)


if __name__ == "__main__":
    main()
