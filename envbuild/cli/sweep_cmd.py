"""`envrun sweep`: the same training at several scales, one `envrun sbatch` job per point, then the scaling
table (median time, throughput, speed-up, parallel efficiency, spread), CSV, JSON, a plot and an HTML report.

    envrun sweep --nodes 1,2,4,8 -- python train.py --epochs 1
    envrun sweep --gpus 1,2,4,8 --repeat 3 --report runs/gpt-scaling -- python train.py
"""

from __future__ import annotations

import argparse
import shlex
import sys

from envbuild.cli.options import (
    ACCOUNT,
    FORCE_OVERLAY,
    IMAGE,
    OUTPUT,
    OVERLAY,
    PARTITION,
    SYSTEM,
    TEST_PARTITION,
    TIME,
    add_option,
    add_renamed,
)
from envbuild.commands.sweep import SweepRequest, sweep
from envbuild.launch.args import LAUNCHERS
from envbuild.shared.errors import exit_status_help, reporting_errors

EPILOG = """Each point is a batch job written by `envrun sbatch` (the same script, the same checks), with the
step's wall time printed by the script (an `envrun-step: wall_ms=N exit=S` line). On nodes without GPUs,
--gpus counts training processes. Throughput comes from one line the training script prints (rank 0,
after training; KEY=NUMBER words, the last such line counts):

  envrun-metric: samples_per_s=1234.5 train_s=12.3      (or tokens_per_s=...)

Without it the table compares the steps' wall times. Speed-up and efficiency are against the smallest point
that finished. The report directory (default sweep-SCRIPT) holds sweep.json, each run's script and output
(jobs/), table.txt/.csv/.json, scaling.png and report.html; running the same sweep again with it skips
finished runs, follows jobs still queued and retries failed ones. --report is now -o/--output (the old
spelling still works, with a note).

""" + exit_status_help("a run failed (its row says which and why)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="envrun sweep", formatter_class=argparse.RawDescriptionHelpFormatter,
                                     description="Run COMMAND as one batch job per scale point and report how it scales.",
                                     epilog=EPILOG)
    axis = parser.add_mutually_exclusive_group(required=True)
    axis.add_argument("--nodes", metavar="LIST", help="node counts, e.g. 1,2,4 (whole nodes each)")
    axis.add_argument("--gpus", metavar="LIST", help="GPU counts, e.g. 1,2,4,8 (one node while they fit); on nodes "
                      "without GPUs, training processes")
    add_option(parser, SYSTEM)
    add_option(parser, IMAGE)
    add_option(parser, OVERLAY, dest="overlays", action="append", default=[],
               default_help="$ENVRUN_OVERLAYS, else overlays: in envrun.yaml")
    add_option(parser, FORCE_OVERLAY)
    parser.add_argument("--repeat", type=int, default=1, metavar="R", help="runs per point (default 1); the median counts")
    add_option(parser, OUTPUT, metavar="DIR", note="the report directory; the same again resumes the sweep",
               default_help="sweep-SCRIPT")
    add_renamed(parser, "--report", OUTPUT, dest="output")
    parser.add_argument("--launcher", choices=LAUNCHERS,
                        help="as envrun sbatch (default: the command's own, config, else torchrun)")
    add_option(parser, TIME, note="one for each job")
    add_option(parser, ACCOUNT)
    add_option(parser, PARTITION)
    add_option(parser, TEST_PARTITION)
    parser.add_argument("--serial", action="store_true", help="one job at a time (nodes shared with other work, "
                        "e.g. a workstation: concurrent points would slow each other down)")
    parser.add_argument("--poll", type=float, default=2.0, metavar="S", help=argparse.SUPPRESS)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- python train.py ...")
    return parser


def main(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    sys.exit(reporting_errors(lambda: run(args, argv), interrupted=(
        "jobs already submitted keep running; run the same command again to follow them and finish the sweep")))


def run(args: argparse.Namespace, argv: list[str]) -> int:
    axis, counts = ("nodes", args.nodes) if args.nodes else ("gpus", args.gpus)
    return sweep(SweepRequest(
        command=tuple(args.command[1:] if args.command[:1] == ["--"] else args.command), axis=axis, counts=counts,
        regenerate=shlex.join(["envrun", "sweep", *argv]), system=args.system, image=args.image,
        overlays=tuple(args.overlays), force_overlay=args.force_overlay, repeat=args.repeat, report=args.output,
        launcher=args.launcher, time=args.time, account=args.account, partition=args.partition, test=args.test,
        serial=args.serial, poll_s=args.poll,
    ))
