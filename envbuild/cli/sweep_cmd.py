"""`envrun sweep`: the same training at several scales, one `envrun sbatch` job per point, then the scaling
table (median time, throughput, speed-up, parallel efficiency, spread), CSV, JSON, a plot and an HTML report.

    envrun sweep --nodes 1,2,4,8 -- python train.py --epochs 1
    envrun sweep --gpus 1,2,4,8 --repeat 3 --report runs/gpt-scaling -- python train.py
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from typing import Any

from envbuild.errors import EnvbuildError, UsageError

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


def run(args: Any, argv: list[str]) -> int:
    from envbuild.host.node import read_host_node
    from envbuild.recipes.detect import resolve_recipe
    from envbuild.slurm.batch.plan import job_name
    from envbuild.slurm.batch.resources import node_shape
    from envbuild.slurm.batch.stepcommand import infer_launcher
    from envbuild.slurm.sweep import state as sweepstate
    from envbuild.slurm.sweep.points import parse_counts, plan_points
    from envbuild.slurm.sweep.report import write_reports
    from envbuild.slurm.sweep.runner import Slurm as SlurmCalls
    from envbuild.slurm.sweep.runner import SweepRunner
    from envbuild.slurm.sweep.table import build_table, render_text

    command = tuple(args.command[1:] if args.command[:1] == ["--"] else args.command)
    if not command:
        raise UsageError("no training command given", "e.g. envrun sweep --nodes 1,2 -- python train.py")
    if args.repeat < 1:
        raise UsageError(f"--repeat {args.repeat}: each point needs at least one run", "e.g. --repeat 3")
    recipe, _why = resolve_recipe(args.system, os.environ)
    shape = node_shape(recipe, read_host_node(os.environ) if recipe.node is None else None)
    unit = "GPU" if shape.gpus else "process"
    capacity = shape.gpus or max(1, shape.cpus // shape.cores_per_process)
    axis, text = ("nodes", args.nodes) if args.nodes else ("gpus", args.gpus)
    points = plan_points(axis, parse_counts(text, f"--{axis}"), capacity, unit)
    launcher = args.launcher or infer_launcher(command)
    directory = args.report or f"sweep-{job_name(command)}"
    image = os.path.abspath(args.image) if args.image else None
    identity = {"command": list(command), "system": recipe.name, "image": image,
                "overlays": [os.path.abspath(o) for o in args.overlays], "launcher": launcher, "unit": unit}
    state = sweepstate.load(directory, identity)
    state.points = sweepstate.merge_points(state.points, points)
    work = sweepstate.todo(state, points, args.repeat)
    say = sys.stderr
    done = len(points) * args.repeat - len(work)
    say.write(f"envrun sweep: {len(points)} point(s) x {args.repeat} run(s) on {recipe.name} "
              f"({shape.why}); report in {directory}" + (f"; {done} run(s) finished earlier" if done else "") + "\n")
    scripts = {(p.key, r): write_script(args, recipe, command, argv, directory, p, r) for p, r, what in work
               if what == "run"}  # every script first: a request Slurm would refuse stops the sweep before any job
    sweepstate.save(directory, state)
    runner = SweepRunner(directory, state, lambda p, r: scripts[(p.key, r)], SlurmCalls.real(), say, os.getcwd(),
                         args.repeat, poll_s=args.poll)
    runner.run(work, args.serial)
    rows = build_table(state.points, state.table_runs())
    sys.stdout.write(render_text(rows))
    written = write_reports(directory, rows, identity, warn=lambda text: say.write(f"envrun sweep: warning: {text}\n"))
    say.write("envrun sweep: wrote " + ", ".join(written) + "\n")
    return 1 if any(r.failed or r.runs == 0 for r in rows if r.point in points) else 0


_WARNED: set[str] = set()


def write_script(args: Any, recipe: Any, command: tuple[str, ...], argv: list[str], directory: str, point: Any,
                 repeat: int) -> tuple[str, str]:
    """The run's batch script from envrun sbatch's planner (its checks and warnings included), written into
    the report directory; (script path, output pattern)."""
    from envbuild.atomicfile import atomic_write
    from envbuild.cli.sbatch_cmd import plan
    from envbuild.slurm.batch.script import render_script
    from envbuild.slurm.sweep.runner import log_pattern

    pattern = log_pattern(directory, point, repeat)
    options = argparse.Namespace(
        image=args.image, overlays=args.overlays, force_overlay=args.force_overlay, launcher=args.launcher,
        stages=[], account=args.account, partition=args.partition, time=args.time, test=args.test,
        nodes=point.nodes, gpus_per_node=point.per_node if point.unit == "GPU" else None,
        processes_per_node=point.per_node if point.unit == "process" else None,
        requeue=False, requeue_max=None, signal_before=90, job_name=None, log=pattern, time_step=True,
        regenerate=shlex.join(["envrun", "sweep", *argv]),
    )
    job = plan(options, recipe, command, argv)
    job.job_name = f"{job.job_name}-{point.key}"
    if point.key not in _WARNED:  # once per point, not once per repeat
        _WARNED.add(point.key)
        for warning in job.warnings:
            print(f"envrun sweep: {point.describe()}: warning: {warning}", file=sys.stderr)
    path = os.path.join(directory, "jobs", f"{point.key}-r{repeat + 1}.sbatch")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    atomic_write(path, render_script(job).encode(), mode=0o755)
    return path, pattern
