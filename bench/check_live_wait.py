"""How long `envrun sbatch --check job.sh` waits for the Slurm it runs on, two trees side by side, alternating:
with the controller live, slow (a proxy started here holds each reply for --delay seconds), down (a port nothing
listens on: scontrol retries for seconds, `scontrol ping` says DOWN at once) and hung (a listener that never
answers; --hung to include it, each run waits out scontrol's MessageTimeout). The shared test cluster is never
touched: the slow, down and hung controllers are copies of slurm.conf with SlurmctldPort changed, given by
SLURM_CONF. Wall time, and the CPU time (user+sys) of envrun and what it started.

    git archive <old commit> | tar -x -C /tmp/old && ln -s $PWD/.venv /tmp/old/.venv
    .venv/bin/python bench/check_live_wait.py --old /tmp/old [--new .] [--runs 10] [--delay 1] [--test-only]
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SLURM_CONF = Path(os.environ.get("SLURM_CONF", "/etc/slurm/slurm.conf"))
CONTROLLER = ("127.0.0.1", 6817)
JOB = "#!/bin/bash\n#SBATCH --partition=debug\n#SBATCH --account=project_2001234\n#SBATCH --time=00:05:00\n" \
      "srun python train.py\n"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def listen(port: int) -> socket.socket:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", port))
    server.listen(64)
    return server


def slow_proxy(port: int, delay_s: float) -> None:
    """Forward each connection to slurmctld, holding its reply for `delay_s`."""
    def pipe(source: socket.socket, target: socket.socket, hold_s: float) -> None:
        try:
            while data := source.recv(65536):
                time.sleep(hold_s)
                hold_s = 0.0
                target.sendall(data)
        except OSError:
            pass
        finally:
            try:
                target.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    server = listen(port)
    while True:
        client, _address = server.accept()
        upstream = socket.create_connection(CONTROLLER)
        threading.Thread(target=pipe, args=(client, upstream, 0.0), daemon=True).start()
        threading.Thread(target=pipe, args=(upstream, client, delay_s), daemon=True).start()


def silent_listener(port: int) -> None:
    """Accept connections and never answer: a hung controller."""
    server = listen(port)
    held = []
    while True:
        held.append(server.accept()[0])


def conf_with_port(work: Path, name: str, port: int) -> Path:
    path = work / f"{name}.conf"
    lines = [line for line in SLURM_CONF.read_text().splitlines() if not line.startswith("SlurmctldPort=")]
    path.write_text("\n".join(lines) + f"\nSlurmctldPort={port}\n")
    return path


def one_run(tree: Path, work: Path, conf: Path | None, test_only: bool) -> tuple[float, float, str]:
    env = dict(os.environ, SBATCH_ACCOUNT="")
    if conf is not None:
        env["SLURM_CONF"] = str(conf)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    done = subprocess.run([str(tree / "bin/envrun"), "sbatch", "--check", "job.sh", *(["--test-only"] * test_only)],
                          cwd=work, env=env, capture_output=True, text=True, timeout=120, check=False)
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    note = next((line for line in done.stdout.splitlines() if "note:" in line), "")
    return wall, cpu, note


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} s ({min(values):.3f}-{max(values):.3f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old", type=lambda p: Path(p).resolve(), required=True, help="the tree before the change (with its .venv)")
    parser.add_argument("--new", type=lambda p: Path(p).resolve(), default=REPO)
    parser.add_argument("--runs", type=int, default=10, help="runs of each tree per controller (alternating)")
    parser.add_argument("--delay", type=float, default=1.0, help="seconds the slow controller holds each reply")
    parser.add_argument("--test-only", action="store_true", help="check with --test-only (sbatch asked too)")
    parser.add_argument("--hung", action="store_true", help="include a controller that never answers")
    parser.add_argument("--only", nargs="*", default=None, help="controllers to run (live slow down hung)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="check-live-wait-") as directory:
        work = Path(directory)
        (work / "job.sh").write_text(JOB)
        (work / "train.py").write_text("print('trained')\n")
        slow, hung = free_port(), free_port()
        threading.Thread(target=slow_proxy, args=(slow, args.delay), daemon=True).start()
        threading.Thread(target=silent_listener, args=(hung,), daemon=True).start()
        controllers: dict[str, Path | None] = {
            "live": None, f"slow ({args.delay:g} s a reply)": conf_with_port(work, "slow", slow),
            "down": conf_with_port(work, "down", free_port()),
        }
        if args.hung:
            controllers["hung"] = conf_with_port(work, "hung", hung)
        if args.only:
            controllers = {name: conf for name, conf in controllers.items() if name.split()[0] in args.only}
        load = os.getloadavg()
        print(f"{'--test-only, ' if args.test_only else ''}{args.runs} alternating runs each; load average "
              f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
        for name, conf in controllers.items():
            runs = args.runs if name != "hung" else min(args.runs, 3)
            times: dict[str, list[tuple[float, float, str]]] = {"old": [], "new": []}
            for _index in range(runs):
                for label, tree in (("old", args.old), ("new", args.new)):
                    times[label].append(one_run(tree, work, conf, args.test_only))
            for label in ("old", "new"):
                walls, cpus = [run[0] for run in times[label]], [run[1] for run in times[label]]
                print(f"{name:>22} {label}: wall {summary(walls)}, CPU {summary(cpus)}")
            for label in ("old", "new"):
                print(f"{'':>22} {label} note: {times[label][-1][2][len('job.sh: note: '):][:150]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
