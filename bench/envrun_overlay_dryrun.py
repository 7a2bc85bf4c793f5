"""envrun's own start-up with and without a venv overlay, side by side in one run (`--dry-run`, so no
container starts: what is measured is envrun's work before it would exec).

Variants, alternated run by run: --image IMG; the image found in the project's envrun.yaml; --overlay on
the base it was built for (the SIF id matches: only the header is read); --overlay whose record has no
SIF id (the image's sha256, from the digest cache after the first run). Needs mksquashfs. Optionally
every variant run by another checkout too (--baseline DIR, e.g. an export of the commit before).

    .venv/bin/python bench/envrun_overlay_dryrun.py [--runs 41] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import json
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


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env, cwd=cwd)
    return time.perf_counter() - started


def main() -> None:
    from tests.support.envrun_overlays import FIXTURE_SIF, base_record, make_overlay

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=41)
    parser.add_argument("--baseline", help="another checkout whose bin/envrun runs every variant too")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="envrun-overlay-bench-"))
    try:
        base = work / "base.sif"
        base.write_bytes(FIXTURE_SIF.read_bytes())
        make_overlay(work, "env", base_record(base))
        make_overlay(work, "noid", {**base_record(base), "sif_id": ""})
        project = work / "project"
        project.mkdir()
        (project / "envrun.yaml").write_text(f"image: {base}\n")
        env = {**os.environ, "HOME": str(work), "ENVBUILD_CACHE_DIR": str(work / "cache"), "ENVBUILD_SYSTEM": "local",
               "ENVRUN_CONFIG": "", "ENVRUN_IMAGE": "", "ENVRUN_OVERLAYS": ""}
        envrun = str(REPO / "bin/envrun")
        tail = ["--dry-run", "python", "x.py"]
        variants = {
            "--image IMG": ([envrun, "--image", str(base), *tail], work),
            "image from envrun.yaml": ([envrun, *tail], project),
            "--overlay (same SIF id)": ([envrun, "--image", str(base), "--overlay", str(work / "env.sqsh"), *tail], work),
            "--overlay (sha256, cached)": ([envrun, "--image", str(base), "--overlay", str(work / "noid.sqsh"), *tail], work),
        }
        if args.baseline:  # the same variants, side by side, run by the other checkout's envrun
            other = str(Path(args.baseline) / "bin/envrun")
            variants.update({f"baseline {name}": ([other, *argv[1:]], cwd) for name, (argv, cwd) in list(variants.items())})
        times: dict[str, list[float]] = {name: [] for name in variants}
        for argv, cwd in variants.values():  # fill the recipe, config and digest caches
            timed(argv, env, cwd)
        for _ in range(args.runs):
            for name, (argv, cwd) in variants.items():
                times[name].append(timed(argv, env, cwd))
        medians = {name: statistics.median(values) * 1000 for name, values in times.items()}
        reference = medians["--image IMG"]
        print(f"{'variant':<30}{'median (ms)':>12}{'vs --image':>12}")
        for name, median in medians.items():
            print(f"{name:<30}{median:>12.1f}{median - reference:>+12.1f}")
        print(json.dumps({name: round(m, 1) for name, m in medians.items()}))

    finally:
        shutil.rmtree(work, ignore_errors=True)  # its images and caches: nothing is left behind

if __name__ == "__main__":
    main()
