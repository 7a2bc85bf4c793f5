"""The tiny input of the build benchmarks' --quick mode (tests/bench/test_bench_scripts.py runs every script
with it): a spec of one small pure-Python package on the debootstrap base, and a store seeded with the
shared test store's complete debootstrap bases (hard links), so that a "cold" build skips debootstrap.

A quick run shows that the script runs to its end and prints its comparison; its figures say nothing about
the reference environment (a 10 MB env layer, not a 1.3 GB one)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from envbuild.store.layout import kind_dir

# The test suite's shared store (tests/conftest.py, fixture build_cache): it holds the base once any real
# build test ran on this machine.
TEST_STORE = Path(os.environ.get("ENVBUILD_TEST_CACHE", "/var/tmp/envbuild-test-cache"))
# The last package line of QUICK_SPEC: the benchmarks that add a package add it after this line.
QUICK_LAST_PACKAGE = "    - six"
QUICK_SPEC = f"""\
name: bench-quick
system: local
base: debootstrap:bookworm
python:
  packages:
{QUICK_LAST_PACKAGE}
tests:
  - python -c "import six"
"""


def write_quick_spec(directory: Path, name: str = "quick.yaml") -> Path:
    spec = directory / name
    spec.write_text(QUICK_SPEC)
    return spec


def seed_store(store: Path, source: Path = TEST_STORE) -> None:
    """Hard-link SOURCE's complete debootstrap bases into STORE (nothing is copied; a base is never
    written to once complete)."""
    kind_dir(store, "base").mkdir(parents=True, exist_ok=True)
    bases = sorted(kind_dir(source, "base").glob("debootstrap-bookworm-*")) if kind_dir(source, "base").is_dir() else []
    complete = [entry for entry in bases if (entry / "complete").exists()]
    if not complete:
        raise SystemExit(f"--quick needs a debootstrap base in {source} (any real build test makes one, or "
                         f"ENVBUILD_CACHE_DIR={source} bin/envbuild build envs/local-cpu-pytorch.yaml)")
    for entry in complete:
        if not (kind_dir(store, "base") / entry.name).exists():
            subprocess.run(["cp", "-al", str(entry), str(kind_dir(store, "base") / entry.name)], check=True)


def seed_caches(store: Path, source: Path = TEST_STORE) -> None:
    """Hard-link SOURCE's uv and pip download caches into STORE: the builds there download what SOURCE's did
    not, and each run of a benchmark still starts from a store of its own (no image or env layer of an earlier
    run in it). uv and pip replace cache files by renaming, never writing into one."""
    for installer in ("uv", "pip"):
        cache, target = source / installer, store / installer
        if cache.is_dir() and not target.exists():
            subprocess.run(["cp", "-al", str(cache), str(target)], check=True)


def quick_base_rootfs(source: Path = TEST_STORE) -> Path:
    """The root file system of SOURCE's debootstrap base (the manual method's --quick sandbox is a copy)."""
    for entry in sorted(kind_dir(source, "base").glob("debootstrap-bookworm-*")):
        if (entry / "complete").exists() and (entry / "rootfs" / "usr/bin/python3").exists():
            return entry / "rootfs"
    raise SystemExit(f"--quick needs a debootstrap base in {source}")
