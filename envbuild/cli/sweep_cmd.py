"""`envrun sweep`: the same training at several scales, one `envrun sbatch` job per point, then the scaling
table (median time, throughput, speed-up, parallel efficiency, spread), CSV, JSON, a plot and an HTML report.

    envrun sweep --nodes 1,2,4,8 -- python train.py --epochs 1
    envrun sweep --gpus 1,2,4,8 --repeat 3 --report runs/gpt-scaling -- python train.py
"""

from __future__ import annotations

import argparse
import shlex
import sys

from envbuild.app.run.sweep import SweepRequest, sweep
from envbuild.errors import EnvbuildError

EPILOG = """Each point is a batch job written by `envrun sbatch` (the same script, the same checks), with the
step's wall time printed by the script (an `envrun-step: wall_ms=N exit=S` line). On nodes without GPUs,
--gpus counts training processes. Throughput comes from one line the training script prints (rank 0,
after training; KEY=NUMBER words, the last such line counts):

  envrun-metric: samples_per_s=1234.5 train_s=12.3      (or tokens_per_s=...)

Without it the table compares the steps' wall times. Speed-up and efficiency are against the smallest point
that finished. The report directory (default sweep-SCRIPT) holds sweep.json, each run's script and output
(jobs/), table.txt/.csv/.json, scaling.png and report.html; running the same sweep again with it skips
finished runs, follows jobs still queued and retries failed ones. The exit status is 1 when a run failed."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="envrun sweep", formatter_class=argparse.RawDescriptionHelpFormatter,
                                     description="Run COMMAND as one batch job per scale point and report how it scales.",
                                     epilog=EPILOG)
    axis = parser.add_mutually_exclusive_group(required=True)
    axis.add_argument("--nodes", metavar="LIST", help="node counts, e.g. 1,2,4 (whole nodes each)")
    axis.add_argument("--gpus", metavar="LIST", help="GPU counts, e.g. 1,2,4,8 (one node while they fit); on nodes "
                      "without GPUs, training processes")
    parser.add_argument("--system", metavar="S", help="system recipe (default: $ENVBUILD_SYSTEM or detected)")
    parser.add_argument("--image", metavar="IMG", help="the .sif image (default: as envrun finds it)")
    parser.add_argument("--overlay", dest="overlays", action="append", default=[], metavar="SQSH",
                        help="a venv overlay over IMG (repeatable)")
    parser.add_argument("--force-overlay", action="store_true", help="an overlay built for another base")
    parser.add_argument("--repeat", type=int, default=1, metavar="R", help="runs per point (default 1); the median counts")
    parser.add_argument("--report", metavar="DIR", help="report directory (default: sweep-SCRIPT); re-run to resume")
    parser.add_argument("--launcher", choices=("torchrun", "srun", "accelerate", "deepspeed"),
                        help="as envrun sbatch (default: the command's own, config, else torchrun)")
    parser.add_argument("--time", "-t", metavar="T", help="time limit of each job (default: as envrun sbatch)")
    parser.add_argument("--account", "-A", metavar="A", help="project/budget (default: config, $SBATCH_ACCOUNT)")
    parser.add_argument("--partition", "-p", metavar="P", help="partition (default: the smallest that fits)")
    parser.add_argument("--test", action="store_true", help="use the system's test/development partition")
    parser.add_argument("--serial", action="store_true", help="one job at a time (nodes shared with other work, "
                        "e.g. a workstation: concurrent points would slow each other down)")
    parser.add_argument("--poll", type=float, default=2.0, metavar="S", help=argparse.SUPPRESS)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- python train.py ...")
    return parser


def main(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    try:
        sys.exit(run(args, argv))
    except EnvbuildError as exc:
        print(exc.render(), file=sys.stderr)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        print("envrun sweep: interrupted; jobs already submitted keep running. Run the same command again to "
              "follow them and finish the sweep.", file=sys.stderr)
        sys.exit(130)


def run(args: argparse.Namespace, argv: list[str]) -> int:
    axis, counts = ("nodes", args.nodes) if args.nodes else ("gpus", args.gpus)
    return sweep(SweepRequest(
        command=tuple(args.command[1:] if args.command[:1] == ["--"] else args.command), axis=axis, counts=counts,
        regenerate=shlex.join(["envrun", "sweep", *argv]), system=args.system, image=args.image,
        overlays=tuple(args.overlays), force_overlay=args.force_overlay, repeat=args.repeat, report=args.report,
        launcher=args.launcher, time=args.time, account=args.account, partition=args.partition, test=args.test,
        serial=args.serial, poll_s=args.poll,
    ))
