"""A rank whose CPU use is known: it burns or sleeps as told and prints its own truth at exit.

    python known_load.py SECONDS PLAN [--workers N] [--exit-after S]

PLAN says per rank what it does: "busy" (one core all the time), "idle" (sleeps), or "half" (busy 50 ms,
sleeps 50 ms); a comma list gives rank 0, 1, ... their plans (the last one repeats). With --workers N the rank
burns in N worker processes as well (a DataLoader's shape: multiprocessing children it joins). --exit-after S
makes rank 1 leave after S seconds (a rank that exits early). At exit each rank prints one line:

    TRUTH rank=R cpu_s=<its own and its joined children's user+system seconds, from getrusage> wall_s=<its life>

(its life from its exec: the wall time since the script's first line plus the interpreter's start before it).

The job report must agree with these (tests/e2e/test_report.py).
"""

from __future__ import annotations

import time

BEGAN = time.monotonic()  # before the imports below: the rank's life as the report counts it starts at the exec
# What the interpreter's own start used before this line: CPU-bound, so also about the wall time it took.
STARTUP_S = time.process_time()

import argparse  # noqa: E402
import multiprocessing  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402


def burn(seconds: float, plan: str) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if plan == "idle":
            time.sleep(min(0.2, max(0.0, end - time.monotonic())))
        elif plan == "half":
            stop = time.monotonic() + 0.05
            while time.monotonic() < stop:
                pass
            time.sleep(0.05)
        else:
            pass


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("seconds", type=float)
    parser.add_argument("plan")
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--exit-after", type=float, default=None)
    args = parser.parse_args()
    rank = int(os.environ.get("RANK", "0"))
    plans = args.plan.split(",")
    plan = plans[min(rank, len(plans) - 1)]
    seconds = args.seconds
    if args.exit_after is not None and rank == 1:
        seconds = args.exit_after
    workers = [multiprocessing.get_context("fork").Process(target=burn, args=(seconds, plan))
               for _ in range(args.workers if plan != "idle" else 0)]
    for worker in workers:
        worker.start()
    burn(seconds, plan)
    for worker in workers:
        worker.join()
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
    print(f"TRUTH rank={rank} cpu_s={cpu:.3f} wall_s={time.monotonic() - BEGAN + STARTUP_S:.3f}", flush=True)


if __name__ == "__main__":
    main()
