"""`envrun sbatch`: write, check, submit and follow a Slurm batch script from the system recipe.

    envrun sbatch --nodes 2 -- python train.py --lr 3e-4           # print the script
    envrun sbatch --nodes 2 -o train.sbatch -- python train.py      # write it
    envrun sbatch --submit --wait -- python train.py                 # submit, follow the output, exit with the job's code
    envrun sbatch --check my_job.sh                                  # the pitfall rules on a hand-written script
    envrun sbatch --check my_job.sh --json                           # the same as JSON
"""

from __future__ import annotations

import argparse
import shlex
import sys

from envbuild.app.run.batchjob import SbatchRequest, check_script, sbatch
from envbuild.app.run.batchjob import file_name as file_name  # re-exported: the job file's name, as tests see it
from envbuild.errors import EnvbuildError, UsageError

EPILOG = """Defaults for --account, --partition, --time, --launcher and --requeue-max can be set in the envrun
config (~/.config/envbuild/envrun.yaml, or $ENVRUN_CONFIG):
  batch: {time: '04:00:00'}
  systems:
    lumi-g: {batch: {account: project_465000000}}
--account also comes from $SBATCH_ACCOUNT. Arguments of the training command may name staged data as
{staged} (the first --stage) or {staged:2}; it also sees $ENVRUN_STAGED, $ENVRUN_STAGED_2, ...
With --requeue the training sees $ENVRUN_CHECKPOINT_FILE (it appears when the time limit is near; each
rank also gets SIGUSR1) and $ENVRUN_RESTART (0 on the first run)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="envrun sbatch", formatter_class=argparse.RawDescriptionHelpFormatter,
                                     description="Write a Slurm batch script that runs COMMAND with envrun, from the "
                                     "system's recipe; check one; submit and follow it.", epilog=EPILOG)
    parser.add_argument("--system", metavar="S", help="system recipe (default: $ENVBUILD_SYSTEM or detected)")
    parser.add_argument("--nodes", "-N", type=int, default=1, metavar="N", help="nodes (default 1)")
    parser.add_argument("--gpus-per-node", type=int, metavar="G", help="GPUs per node (default: all of a node's)")
    parser.add_argument("--time", "-t", metavar="T", help="time limit, e.g. 02:00:00 (default: config, else 1 hour)")
    parser.add_argument("--account", "-A", metavar="A", help="project/budget (default: config, $SBATCH_ACCOUNT)")
    parser.add_argument("--partition", "-p", metavar="P", help="partition (default: the smallest that fits)")
    parser.add_argument("--test", action="store_true", help="use the system's test/development partition")
    parser.add_argument("--launcher", choices=("torchrun", "srun", "accelerate", "deepspeed"),
                        help="torchrun/accelerate/deepspeed: one launcher per node; srun: one task per GPU "
                             "(default: the command's own, config, else torchrun)")
    parser.add_argument("--job-name", "-J", metavar="NAME", help="job name (default: the script's name)")
    parser.add_argument("--log", metavar="PATTERN", help="the job's output file (default %%x-%%j.out)")
    parser.add_argument("--image", metavar="IMG", help="the .sif image (default: as envrun finds it)")
    parser.add_argument("--overlay", dest="overlays", action="append", default=[], metavar="SQSH",
                        help="a venv overlay over IMG (repeatable)")
    parser.add_argument("--force-overlay", action="store_true", help="an overlay built for another base")
    parser.add_argument("--bind", "-B", dest="binds", action="append", default=[], metavar="SRC[:DEST[:OPTS]]",
                        help="extra bind mount for the job's envrun (repeatable)")
    parser.add_argument("--stage", dest="stages", action="append", default=[], metavar="SRC",
                        help="a directory or archive copied/extracted once per node to node-local storage (repeatable)")
    parser.add_argument("--requeue", action="store_true",
                        help="checkpoint on a signal before the time limit and requeue the job")
    parser.add_argument("--requeue-max", type=int, metavar="N", help="most restarts with --requeue (default 3)")
    parser.add_argument("--signal-before", type=int, default=90, metavar="S",
                        help="seconds before the time limit that the checkpoint signal comes (default 90)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--print", action="store_true", help="print the script (the default)")
    mode.add_argument("-o", "--script", metavar="FILE", help="write the script to FILE")
    mode.add_argument("--submit", action="store_true", help="submit it (written to -o FILE or .envrun/jobs/); "
                      "prints the job id")
    mode.add_argument("--check", metavar="SCRIPT", help="check a batch script's #SBATCH and srun lines instead")
    parser.add_argument("--wait", action="store_true", help="with --submit: follow the output, exit with the job's code")
    parser.add_argument("--json", action="store_true", help="with --check: the findings as JSON (rule, level, line, "
                        "what, why, fix, edit)")
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
        sys.exit(130)


def run(args: argparse.Namespace, argv: list[str]) -> int:
    if args.check:
        return check_script(args.check, args.system, as_json=args.json)
    if args.json:
        raise UsageError("--json is the output of --check", "envrun sbatch --check SCRIPT --json")
    if args.wait and not args.submit:
        raise UsageError("--wait follows a submitted job", "add --submit")
    return sbatch(sbatch_request(args, argv), script=args.script, submit=args.submit, wait=args.wait)


def sbatch_request(args: argparse.Namespace, argv: list[str]) -> SbatchRequest:
    """What the options ask for; the script regenerates itself with the same words, less the delivery."""
    return SbatchRequest(
        command=tuple(args.command[1:] if args.command[:1] == ["--"] else args.command),
        regenerate=shlex.join(["envrun", "sbatch", *(a for a in argv if a not in ("--submit", "--wait", "--print"))]),
        system=args.system, nodes=args.nodes, gpus_per_node=args.gpus_per_node, time=args.time,
        account=args.account, partition=args.partition, test=args.test, launcher=args.launcher,
        job_name=args.job_name, output=args.log, image=args.image, overlays=tuple(args.overlays),
        force_overlay=args.force_overlay, binds=tuple(args.binds), stages=tuple(args.stages),
        requeue=args.requeue, requeue_max=args.requeue_max, signal_before=args.signal_before,
    )
