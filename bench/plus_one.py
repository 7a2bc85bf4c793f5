"""The reference spec plus one small pure-Python package (tabulate), full image, against the reference
spec's cold build, side by side in one run (issue 17, P3: +1 <= 10 % of cold):

    cold          empty store and empty uv cache: debootstrap, install, squash (gzip:6, the default),
                  from the lock the repository ships (envs/local-cpu-pytorch.lock), as the README's main job
    +1 --full     the spec plus tabulate, as a user edits it: the lock is now stale, so the build resolves
                  again and rewrites it; parent env layer reused, the whole 1.3 GB tree squashed again
    +1 default    the same with no flag: the difference written as a SIF overlay partition over the cold
                  image (the default where a stored image fits; the build checks the runtime shows it)

Every run starts from a store of its own (WORKDIR/store, emptied first). Between the two +1 builds the +1
env layer and image are removed from the store and the stale lock is put back, so both resolve and install
the difference on the same parent. Every build starts after `sync`, so that none pays for writing back the
previous one's 800 MB. Prints each build's steps (the breakdown), the ratios, whether the default +1 image
is layered, and whether `envbuild packages` lists the same packages in both +1 images.

    .venv/bin/python bench/plus_one.py [--compression gzip:6] [--workdir DIR] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.quick import QUICK_LAST_PACKAGE, QUICK_SPEC, seed_store  # noqa: E402

SPEC = REPO / "envs/local-cpu-pytorch.yaml"
EXTRA = "tabulate"
_STEP = re.compile(r"^\s+build \d+/\d+\s+(.*?)\s+(\d+\.\d) s$")


def build(spec: Path, output: Path, store: Path, compression: str, *extra: str) -> tuple[float, list[tuple[str, float]]]:
    env = dict(os.environ, ENVBUILD_CACHE_DIR=str(store))
    os.sync()
    started = time.monotonic()
    proc = subprocess.run([str(REPO / "bin/envbuild"), "build", str(spec), "-o", str(output), "--compression", compression,
                           *extra], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"build of {spec} failed:\n{proc.stderr[-4000:]}")
    steps = [(m.group(1)[:44], float(m.group(2))) for m in map(_STEP.match, proc.stderr.splitlines()) if m]
    return elapsed, steps


def packages(image: Path, store: Path) -> list[tuple[str, str, str]]:
    proc = subprocess.run([str(REPO / "bin/envbuild"), "packages", "--json", "--no-cache", str(image)],
                          env=dict(os.environ, ENVBUILD_CACHE_DIR=str(store)), capture_output=True, text=True, check=True)
    return sorted((r["environment"], r["name"], r["version"]) for r in json.loads(proc.stdout)["packages"])


def layered_form(image: Path) -> bool:
    """Whether the SIF holds an overlay partition (a layered image) besides its root file system."""
    from envbuild.sif.reader import read_sif_layout

    return any(o.data_type == "partition" and o.part_type == "overlay" for o in read_sif_layout(image).objects)


def forget(store: Path, keep: set[str]) -> None:
    """Remove the env and image entries made after `keep` was taken (the +1 build's)."""
    for kind in ("envs", "images"):
        for entry in (store / kind).iterdir():
            if f"{kind}/{entry.name}" not in keep:
                shutil.rmtree(entry)


def entries(store: Path) -> set[str]:
    return {f"{kind}/{e.name}" for kind in ("envs", "images") if (store / kind).is_dir() for e in (store / kind).iterdir()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--compression", default="gzip:6")
    parser.add_argument("--workdir", type=Path, help="scratch directory (default: a temporary one under /var/tmp)")
    parser.add_argument("--quick", action="store_true", help="tiny input (bench/quick.py: one small package, the base "
                        "from the test store): shows the script runs to its end, not the reference figures")
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="envbuild-bench-plus-one-", dir="/var/tmp"))
    work.mkdir(parents=True, exist_ok=True)
    store = work / "store"
    shutil.rmtree(store, ignore_errors=True)
    text, marker = (QUICK_SPEC, QUICK_LAST_PACKAGE) if args.quick else (SPEC.read_text(), "    - accelerate")
    assert marker in text, f"{SPEC} changed: cannot find {marker!r} to add a package after"
    plain, plus = work / "ref.yaml", work / "ref-plus.yaml"
    plain.write_text(text)
    plus.write_text(text.replace(marker, f"{marker}\n    - {EXTRA}", 1))
    if args.quick:  # the quick spec ships no lock: made here, before any timing
        seed_store(store)
        subprocess.run([str(REPO / "bin/envbuild"), "lock", str(plain)], env=dict(os.environ, ENVBUILD_CACHE_DIR=str(store)),
                       check=True, capture_output=True)
        lock = plain.with_suffix(".lock").read_text()
    else:
        lock = SPEC.with_suffix(".lock").read_text()
        plain.with_suffix(".lock").write_text(lock)
    load = os.getloadavg()[0]

    print(f"cold build ({'the base from the test store' if args.quick else 'empty store'}, empty uv cache) ...", flush=True)
    cold, cold_steps = build(plain, work / "cold.sif", store, args.compression)
    after_cold = entries(store)
    print(f"cold {cold:.1f} s; +{EXTRA}, full squash ...", flush=True)
    plus.with_suffix(".lock").write_text(lock)  # stale now: the spec has one more requirement
    full, full_steps = build(plus, work / "plus-full.sif", store, args.compression, "--full")
    relocked = plus.with_suffix(".lock").read_text() != lock
    forget(store, after_cold)
    plus.with_suffix(".lock").write_text(lock)
    print(f"+1 --full {full:.1f} s; +{EXTRA}, default (layered) ...", flush=True)
    layered, layered_steps = build(plus, work / "plus-layered.sif", store, args.compression)
    same = packages(work / "plus-full.sif", store) == packages(work / "plus-layered.sif", store)
    sizes = {name: (work / f"{name}.sif").stat().st_size / 2**20 for name in ("cold", "plus-full", "plus-layered")}

    print()
    for title, steps in (("cold", cold_steps), ("+1 --full", full_steps), ("+1 default", layered_steps)):
        print(f"{title}: " + "; ".join(f"{name} {seconds:.1f} s" for name, seconds in steps if seconds >= 0.1))
    print()
    print(f"{'':<14}{'time':>9}{'/ cold':>9}{'image':>11}")
    print(f"{'cold':<14}{cold:>8.1f}s{1:>9.0%}{sizes['cold']:>7.0f} MiB")
    print(f"{'+1 --full':<14}{full:>8.1f}s{full / cold:>9.1%}{sizes['plus-full']:>7.0f} MiB")
    print(f"{'+1 default':<14}{layered:>8.1f}s{layered / cold:>9.1%}{sizes['plus-layered']:>7.0f} MiB")
    print(f"layered image: {'yes' if layered_form(work / 'plus-layered.sif') else 'NO (the build fell back to a full squash)'}")
    print(f"packages of the two +1 images equal: {'yes' if same else 'NO'}; the stale lock was rewritten: "
          f"{'yes' if relocked else 'NO'}")
    print(f"goal: +1 default <= 10 % of cold: {layered / cold:.1%}.")
    print(f"{args.compression}, {os.cpu_count()} CPUs, load {load:.1f} at the start, "
          f"{os.getloadavg()[0]:.1f} at the end, {time.strftime('%Y-%m-%d')}")
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
