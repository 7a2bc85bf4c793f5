"""Cold build of envs/local-cpu-pytorch.yaml with envbuild against the manual way, side by side.

The manual way is what users do today (LUMI/CSC course material, cotainr's method by hand):
    debootstrap (or pull) a base into a sandbox dir
    apptainer exec --writable sandbox python3 -m venv /opt/venv
    apptainer exec --writable sandbox /opt/venv/bin/pip install torch==2.13.0 transformers lightning
    apptainer build image.sif sandbox/            (default compression)
Both start cold: empty envbuild cache and empty pip/uv caches, so both download and debootstrap.
Prints each phase, the total times, the ratio envbuild/manual and the image sizes.

    .venv/bin/python bench/build_vs_manual.py [--keep] [--workdir DIR] [--quick]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.quick import quick_base_rootfs, seed_store, write_quick_spec  # noqa: E402
from envbuild.host.buildhost import host_debian_mirror  # noqa: E402
from envbuild.host.pip import read_host_pip_settings  # noqa: E402

PACKAGES = ["torch==2.13.0", "transformers", "lightning", "accelerate"]  # as envs/local-cpu-pytorch.yaml
QUICK_PACKAGES = ["six"]  # as bench/quick.py's spec


def timed(label: str, argv: list[str], results: dict[str, float], env: dict[str, str] | None = None) -> str:
    started = time.monotonic()
    proc = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    results[label] = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"{label} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    print(f"  {label:<34} {results[label]:7.1f} s", flush=True)
    return proc.stderr


def manual(work: Path, quick: bool) -> tuple[float, int]:
    """The by-hand method, with pip honouring the host's pip configuration the way a user would set it up."""
    print("manual (debootstrap + exec --writable pip install + apptainer build):", flush=True)
    results: dict[str, float] = {}
    sandbox = work / "manual-sandbox"
    image = work / "manual.sif"
    if quick:  # a copy of the test store's base stands in for debootstrap, as envbuild's seeded store does
        timed("copy of the test store's base", ["cp", "-a", str(quick_base_rootfs()), str(sandbox)], results)
    else:
        cmd = ["debootstrap", "--variant=minbase", "--include=python3,python3-venv,ca-certificates", "bookworm", str(sandbox)]
        mirror = host_debian_mirror()
        if mirror:
            cmd.append(mirror)
        timed("debootstrap", cmd, results)
    (sandbox / "etc/hosts").write_text("127.0.0.1\tlocalhost\n")
    timed("venv", ["apptainer", "exec", "--writable", "--no-home", "--cleanenv", str(sandbox), "python3", "-m", "venv", "/opt/venv"],
          results)
    # The same package sources envbuild uses (the host's pip configuration), bound at their own paths;
    # --cleanenv keeps the host's PIP_* variables (host paths) out, as envbuild does.
    pip = read_host_pip_settings()
    binds, args = [], []
    local_dirs = [p for p in pip.find_links if "://" not in p]
    local_dirs += [u[len("file://"):].rsplit("/", 1)[0] for u in pip.extra_index_urls if u.startswith("file://")]
    for directory in dict.fromkeys(local_dirs):
        (sandbox / directory.lstrip("/")).mkdir(parents=True, exist_ok=True)
        binds += ["--bind", f"{directory}:{directory}:ro"]
    for link in pip.find_links:
        args += ["--find-links", link]
    for url in pip.extra_index_urls:
        args += ["--extra-index-url", url]
    if pip.cert:
        binds += ["--bind", f"{pip.cert}:/etc/ssl/certs/ca-certificates.crt:ro"]
        args += ["--cert", "/etc/ssl/certs/ca-certificates.crt"]
    timed("pip install", ["apptainer", "exec", "--writable", "--no-home", "--cleanenv", *binds, str(sandbox),
                          "/opt/venv/bin/pip", "install", "--no-cache-dir", *args,
                          *(QUICK_PACKAGES if quick else PACKAGES)], results)
    timed("apptainer build (default gzip)", ["apptainer", "build", "--force", str(image), str(sandbox)], results)
    total = sum(results.values())
    print(f"  {'total':<34} {total:7.1f} s", flush=True)
    return total, image.stat().st_size


def with_envbuild(work: Path, compression: str, quick: bool) -> tuple[float, int]:
    print(f"envbuild build --compression {compression} (empty store, empty uv cache):", flush=True)
    image = work / f"envbuild-{compression.replace(':', '-')}.sif"
    cache = work / f"envbuild-cache-{compression.replace(':', '-')}"
    env = dict(os.environ, ENVBUILD_CACHE_DIR=str(cache))
    if quick:
        seed_store(cache)
    spec = write_quick_spec(work) if quick else REPO / "envs/local-cpu-pytorch.yaml"
    results: dict[str, float] = {}
    stderr = timed("envbuild build", [str(REPO / "bin/envbuild"), "build", str(spec), "-o",
                                      str(image), "--compression", compression], results, env=env)
    # Where the time went: each step's line (the build log has each action's time too).
    for line in stderr.splitlines():
        if ": done in " in line:
            print(f"    {line.strip()}", flush=True)
    shutil.rmtree(cache, ignore_errors=True)
    return results["envbuild build"], image.stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=None, help="scratch dir (default: a temp dir under /var/tmp)")
    parser.add_argument("--keep", action="store_true", help="keep images and sandboxes")
    parser.add_argument("--compression", default="gzip:6,zstd", help="envbuild runs, comma-separated (default gzip:6,zstd)")
    parser.add_argument("--quick", action="store_true", help="tiny input (bench/quick.py: one small package, the base "
                        "from the test store, no debootstrap): shows the script runs to its end, not the reference figures")
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="envbuild-bench-", dir="/var/tmp"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        manual_s, manual_size = manual(work, args.quick)
        runs = {c: with_envbuild(work, c, args.quick) for c in args.compression.split(",")}
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print()
    print(f"{'':<22}{'time (s)':>10}{'vs manual':>11}{'image (MiB)':>14}{'vs manual':>11}")
    print(f"{'manual (gzip)':<22}{manual_s:>10.1f}{'1.00x':>11}{manual_size / 2**20:>14.0f}{'1.00x':>11}")
    for compression, (seconds, size) in runs.items():
        print(f"{'envbuild ' + compression:<22}{seconds:>10.1f}{seconds / manual_s:>10.2f}x{size / 2**20:>14.0f}"
              f"{size / manual_size:>10.2f}x")


if __name__ == "__main__":
    main()
