"""What the job report costs (issue 32): a short CPU step under the local Slurm with and without it, side by side,
and the per-node sampler's own CPU time.

1. The step: `envrun --image IMG srun -n1 python -c LOOP` (a fixed amount of pure-Python work on one core) run
   `--runs` times with the report (`--report-interval`, by default envrun's own REPORT_INTERVAL) and as many
   times with `--no-report`, alternating (so drifting machine load hits both alike): median and p90 wall time
   of each and their ratio.
2. The sampler alone: `python -S -m envbuild.report.sampler` started as envrun's host shim starts it, against a
   stand-in step (a parent process holding `--ranks` sleeping rank processes with RANK and LOCAL_RANK set, the
   shape the sampler reads in /proc), for `--sampler-seconds` at each interval of `--intervals`, then stopped with
   SIGTERM. Its CPU seconds (user + system, from wait4's rusage, its children included) give the start-up cost
   (a run stopped right after its start record), the cost per sample and the share of one core over a minute.
   No GPU is read here unless this machine has a GPU tool: the GPU reader's cost is the tool's (or NVML's).

    .venv/bin/python bench/report_overhead.py [IMAGE] [--runs 5] [--work 30000000] [--interval 5s]
        [--intervals 1,5] [--sampler-seconds 60] [--ranks 2]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from envbuild.commands.launch import REPORT_INTERVAL  # noqa: E402 - after the checkout is on sys.path
from envbuild.report.wire import MARKER_BYTES, new_key  # noqa: E402

LOOP = "n = 0\nfor i in range({work}):\n    n += i\nprint(n)\n"


def timed_step(image: str, work: int, report: list[str], cwd: str) -> float:
    argv = [str(REPO / "bin/envrun"), "--image", image, *report, "srun", "-n1", "python", "-c", LOOP.format(work=work)]
    started = time.perf_counter()
    result = subprocess.run(argv, capture_output=True, text=True, cwd=cwd)
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        sys.exit(f"step failed ({' '.join(report) or 'report'}): exit {result.returncode}\n{result.stderr[-2000:]}")
    if report[:1] != ["--no-report"] and "envrun report:" not in result.stderr:
        sys.exit(f"the step with the report printed no summary:\n{result.stderr[-2000:]}")
    return elapsed


def p90(values: list[float]) -> float:
    return sorted(values)[int(0.9 * (len(values) - 1))]


def bench_step(image: str, runs: int, work: int, interval: str) -> None:
    variants = {"--no-report": ["--no-report"], f"report every {interval}": ["--report-interval", interval]}
    times: dict[str, list[float]] = {name: [] for name in variants}
    with tempfile.TemporaryDirectory(prefix="report-overhead-") as cwd:
        timed_step(image, work // 10, ["--no-report"], cwd)  # warm the page cache and Slurm's first step
        for _ in range(runs):
            for name, words in variants.items():
                times[name].append(timed_step(image, work, words, cwd))
    print(f"step: envrun srun -n1 python (loop of {work:,}), {runs} run(s) each, alternating")
    print(f"{'variant':<24}{'median (s)':>12}{'p90 (s)':>10}")
    for name, values in times.items():
        print(f"{name:<24}{statistics.median(values):>12.2f}{p90(values):>10.2f}")
    base, with_report = (statistics.median(values) for values in times.values())
    print(f"step wall time, report / no report: {with_report / base:.3f}x ({(with_report - base) * 1000:+.0f} ms)")


def sampler_run(interval: float, seconds: float, ranks: int) -> tuple[float, int, float]:
    """(CPU seconds of the sampler and its children, samples written, wall seconds) of one run against a
    stand-in step of `ranks` sleeping processes."""
    hold = max(seconds + 30.0, 60.0)
    children = " ".join(f"RANK={r} LOCAL_RANK={r} sleep {hold:.0f} &" for r in range(ranks))
    step = subprocess.Popen(["/bin/sh", "-c", f"{children} wait"], start_new_session=True)
    try:
        time.sleep(0.2)  # the ranks are started
        read_end, write_end = os.pipe()
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        key = new_key()  # as envrun makes one per step; the host shim hands it over on the sampler's stdin
        prefix = MARKER_BYTES + key.encode()
        started = time.perf_counter()
        sampler = subprocess.Popen([sys.executable, "-S", "-m", "envbuild.report.sampler", "--interval", str(interval),
                                    "--task-pid", str(step.pid), "--step-pid", str(step.pid)],
                                   stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=write_end, env=env)
        assert sampler.stdin is not None
        sampler.stdin.write(f"{key}\n".encode())
        sampler.stdin.close()
        os.close(write_end)
        records = bytearray()
        deadline = started + seconds
        os.set_blocking(read_end, False)
        while True:  # read its records (so the pipe never fills) until the time is up
            try:
                chunk = os.read(read_end, 65536)
            except BlockingIOError:
                chunk = None
            if chunk:
                records += chunk
            if seconds == 0 and prefix + b'{"v":1,"kind":"start"' in records:
                break
            if seconds and time.perf_counter() >= deadline:
                break
            time.sleep(0.05)
        sampler.send_signal(signal.SIGTERM)
        _pid, status, usage = os.wait4(sampler.pid, 0)
        wall = time.perf_counter() - started
        sampler.returncode = os.waitstatus_to_exitcode(status)
        os.set_blocking(read_end, True)
        while chunk := os.read(read_end, 65536):
            records += chunk
        os.close(read_end)
    finally:
        os.killpg(step.pid, signal.SIGTERM)
        step.wait()
    if sampler.returncode != 0:
        sys.exit(f"the sampler exited {sampler.returncode}")
    lines = bytes(records).split(b"\n")
    if not any(line.startswith(prefix + b'{"v":1,"kind":"end"') for line in lines):
        sys.exit(f"the sampler wrote no end record:\n{bytes(records)[-2000:]!r}")
    seqs = {line.split(b'"seq":')[1].split(b",")[0] for line in lines
            if line.startswith(prefix) and b'"kind":"start"' not in line}
    return usage.ru_utime + usage.ru_stime, len(seqs), wall


def bench_sampler(intervals: list[float], seconds: float, ranks: int) -> None:
    starts = sorted(sampler_run(1.0, 0, ranks)[:2] for _ in range(3))
    start_cpu, start_samples = starts[1]  # the median of three: one start-up is a few tens of ms, noisy
    processes = sum(1 for name in os.listdir("/proc") if name.isdigit())
    print(f"\nsampler alone (python -S -m envbuild.report.sampler), {ranks} rank processes, {processes} processes "
          f"on this node")
    print(f"start-up (start record, end record, stop; median of 3): {start_cpu * 1000:.0f} ms CPU")
    print(f"{'interval (s)':<14}{'wall (s)':>9}{'samples':>9}{'CPU (s)':>9}{'CPU/sample (ms)':>17}"
          f"{'% of a core':>13}{'steady % of a core':>20}")
    for interval in intervals:
        cpu, samples, wall = sampler_run(interval, seconds, ranks)
        per_sample = max(cpu - start_cpu, 0.0) / max(samples - start_samples, 1)
        print(f"{interval:<14g}{wall:>9.1f}{samples:>9}{cpu:>9.3f}{per_sample * 1000:>17.1f}"
              f"{cpu / wall * 100:>13.2f}{per_sample / interval * 100:>20.3f}")


def seconds_of(text: str) -> float:
    from envbuild.shared.durations import parse_duration

    return float(parse_duration(text, "--intervals", bare="s"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("image", nargs="?", default=str(REPO / "build/local-cpu-pytorch.sif"))
    parser.add_argument("--runs", type=int, default=5, help="steps with and without the report, each")
    parser.add_argument("--work", type=int, default=30_000_000, help="loop iterations of the step's program")
    parser.add_argument("--interval", default=REPORT_INTERVAL, help="--report-interval of the steps with the report")
    parser.add_argument("--intervals", default="1,5", help="the sampler's intervals measured alone (seconds)")
    parser.add_argument("--sampler-seconds", type=float, default=60.0, help="how long each sampler run lasts")
    parser.add_argument("--ranks", type=int, default=2, help="rank processes of the stand-in step")
    parser.add_argument("--no-step", action="store_true", help="measure the sampler alone (no Slurm, no image)")
    args = parser.parse_args()
    if not args.no_step:
        bench_step(os.path.abspath(args.image), args.runs, args.work, args.interval)
    bench_sampler([seconds_of(word) for word in args.intervals.split(",")], args.sampler_seconds, args.ranks)


if __name__ == "__main__":
    main()
