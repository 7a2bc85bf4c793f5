"""What the build store saves, per squashfs compression, on the reference environment
(envs/local-cpu-pytorch.yaml: torch 2.13.0 CPU + transformers + lightning + accelerate):

    cold       empty store and empty uv cache: debootstrap, install, squash
    no-op      the same spec again (median of --repeat runs): the image is up to date
    +1 pkg     the spec plus one small pure-Python package (tabulate): the base and the parent env
               layer are reused, only the difference is installed, the image is squashed again
    from store the output deleted, then built again: the image is copied from the store

Prints one row per compression with the ratios the issue sets goals for (no-op <= 1 s,
+1 pkg <= 15 % of cold).

    .venv/bin/python bench/build_cache.py [--compression gzip:6,zstd] [--repeat 5] [--workdir DIR] [--quick]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
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


def build(spec: Path, output: Path, store: Path, compression: str) -> float:
    env = dict(os.environ, ENVBUILD_CACHE_DIR=str(store))
    started = time.monotonic()
    proc = subprocess.run([str(REPO / "bin/envbuild"), "build", str(spec), "-o", str(output), "--compression", compression],
                          env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"build of {spec} failed:\n{proc.stderr[-4000:]}")
    return elapsed


def specs(work: Path, quick: bool) -> tuple[Path, Path]:
    text, marker = (QUICK_SPEC, QUICK_LAST_PACKAGE) if quick else (SPEC.read_text(), "    - accelerate")
    assert marker in text, f"{SPEC} changed: cannot find {marker!r} to add a package after"
    plain, plus = work / "ref.yaml", work / "ref-plus.yaml"
    plain.write_text(text)
    plus.write_text(text.replace(marker, f"{marker}\n    - {EXTRA}", 1))
    return plain, plus


def measure(compression: str, work: Path, repeat: int, quick: bool) -> dict[str, float]:
    store = work / f"store-{compression.replace(':', '-')}"
    shutil.rmtree(store, ignore_errors=True)
    if quick:
        seed_store(store)
    plain, plus = specs(work, quick)
    image = work / f"out-{compression.replace(':', '-')}" / "ref.sif"
    row: dict[str, float] = {}
    print(f"[{compression}] cold build ({'the base from the test store' if quick else 'empty store'}, empty uv cache) ...",
          flush=True)
    row["cold"] = build(plain, image, store, compression)
    print(f"[{compression}] cold {row['cold']:.1f} s; no-op x{repeat} ...", flush=True)
    row["noop"] = statistics.median(build(plain, image, store, compression) for _ in range(repeat))
    print(f"[{compression}] no-op {row['noop']:.2f} s; +{EXTRA} ...", flush=True)
    row["plus"] = build(plus, image, store, compression)
    print(f"[{compression}] +1 pkg {row['plus']:.1f} s; from store ...", flush=True)
    image.unlink()
    row["restore"] = build(plus, image, store, compression)
    row["size_mib"] = image.stat().st_size / 2**20
    shutil.rmtree(store, ignore_errors=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--compression", default="gzip:6,zstd", help="comma-separated list (default gzip:6,zstd)")
    parser.add_argument("--repeat", type=int, default=5, help="no-op runs (median)")
    parser.add_argument("--workdir", type=Path, help="scratch directory (default: a temporary one under /var/tmp)")
    parser.add_argument("--quick", action="store_true", help="tiny input (bench/quick.py: one small package, the base "
                        "from the test store): shows the script runs to its end, not the reference figures")
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="envbuild-bench-cache-", dir="/var/tmp"))
    work.mkdir(parents=True, exist_ok=True)
    rows = {c: measure(c, work, args.repeat, args.quick) for c in args.compression.split(",")}
    print()
    print(f"{'compression':<12}{'cold':>9}{'no-op':>9}{'+1 pkg':>9}{'+1/cold':>9}{'store':>9}{'size':>10}")
    for name, row in rows.items():
        print(f"{name:<12}{row['cold']:>8.1f}s{row['noop']:>8.2f}s{row['plus']:>8.1f}s{row['plus'] / row['cold']:>8.0%} "
              f"{row['restore']:>7.2f}s{row['size_mib']:>7.0f} MiB")
    print(f"goals: no-op <= 1 s; +1 pkg <= 15 % of cold.  {sys.platform}, {os.cpu_count()} CPUs, "
          f"{time.strftime('%Y-%m-%d')}")
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
