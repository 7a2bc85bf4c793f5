"""envrun's added start-up latency over a bare `apptainer exec IMG true`, side by side in one run.

Alternates the variants run by run (so drifting machine load hits both alike) and prints medians,
the added latency and the ratio; beside the difference of the medians, the median of each round's difference
with the bare run of the same round (pairs taken a fraction of a second apart: a load that comes and goes over
seconds moves both alike). Goal (issue 3): envrun adds under 50 ms median; issue 39: 20 ms.
Beside the wall time, each variant's CPU time (user + system of the process and all it waited for): on a
shared machine whose load comes and goes it moves far less than the wall time, so it tells two
versions apart where the wall time cannot.

After the warm-up run envrun execs the plan it kept for the command line (envbuild.launch.plancache), as a
repeat launch outside a Slurm job does; the variant with ENVRUN_PLAN_CACHE=off plans every launch, as a
launch in a job does (and a first launch, less the recording of its plan).

    .venv/bin/python bench/envrun_latency.py [IMAGE] [--runs 31]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


# Variables a variant runs with, on top of this process's.
PLANNING = {"ENVRUN_PLAN_CACHE": "off"}


def timed(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    # From / : `python -c`/`-m` put the working directory first on sys.path (a checkout's directory would
    # import its own envbuild instead of the one the compared script runs).
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/",
                   env={**os.environ, **env} if env else None)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("image", nargs="?", default=str(REPO / "build/local-cpu-pytorch.sif"))
    parser.add_argument("--runs", type=int, default=31)
    parser.add_argument("--compare", metavar="CHECKOUT", help="another checkout (e.g. `git worktree` of an older commit): "
                                                             "its bin/envrun runs side by side as a further variant")
    args = parser.parse_args()
    image = os.path.abspath(args.image)
    variants = {
        "apptainer exec IMG true": ["apptainer", "exec", image, "true"],
        "envrun --image IMG true": [str(REPO / "bin/envrun"), "--image", image, "true"],
        "installed envrun (.venv/bin/envrun)": [str(REPO / ".venv/bin/envrun"), "--image", image, "true"],
        "envrun, planning every launch": [str(REPO / "bin/envrun"), "--image", image, "true"],
    }
    variant_env = {"envrun, planning every launch": PLANNING}
    if args.compare:
        variants["other checkout's bin/envrun"] = [str(Path(args.compare) / "bin/envrun"), "--image", image, "true"]
    wrapper = Path(image).parent / "bin" / "python"
    if wrapper.exists():
        variants["run wrapper bin/python -c pass"] = [str(wrapper), "-c", "pass"]
        variants["apptainer exec IMG python -c pass"] = ["apptainer", "exec", image, "python", "-c", "pass"]
    times: dict[str, list[float]] = {name: [] for name in variants}
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    for name, argv in variants.items():  # warm the page cache once (and keep envrun's plan)
        timed(argv, variant_env.get(name))
    for _ in range(args.runs):
        for name, argv in variants.items():
            wall, used = timed(argv, variant_env.get(name))
            times[name].append(wall)
            cpu[name].append(used)
    medians = {name: statistics.median(values) for name, values in times.items()}
    cpu_medians = {name: statistics.median(values) for name, values in cpu.items()}
    print(f"{'variant':<40}{'median (ms)':>12}{'p90 (ms)':>10}{'CPU median (ms)':>17}")
    for name, values in times.items():
        p90 = sorted(values)[int(0.9 * (len(values) - 1))]
        print(f"{name:<40}{medians[name] * 1000:>12.1f}{p90 * 1000:>10.1f}{cpu_medians[name] * 1000:>17.1f}")
    base = medians["apptainer exec IMG true"]
    cpu_base = cpu_medians["apptainer exec IMG true"]
    for name in ("envrun --image IMG true", "installed envrun (.venv/bin/envrun)", "envrun, planning every launch",
                 "other checkout's bin/envrun"):
        if name not in medians:
            continue
        added = (medians[name] - base) * 1000
        paired = statistics.median(a - b for a, b in zip(times[name], times["apptainer exec IMG true"], strict=True))
        print(f"{name}: +{added:.1f} ms over bare apptainer exec ({medians[name] / base:.2f}x); "
              f"median of the {len(times[name])} runs' differences with the bare run beside them: +{paired * 1000:.1f} ms")
        print(f"{name}: CPU +{(cpu_medians[name] - cpu_base) * 1000:.1f} ms over bare apptainer exec")
    if "run wrapper bin/python -c pass" in medians:
        added = (medians["run wrapper bin/python -c pass"] - medians["apptainer exec IMG python -c pass"]) * 1000
        print(f"run wrapper: +{added:.1f} ms over bare apptainer exec IMG python")


if __name__ == "__main__":
    main()
