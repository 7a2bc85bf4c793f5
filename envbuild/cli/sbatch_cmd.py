"""`envrun sbatch`: write, check, submit and follow a Slurm batch script from the system recipe.

    envrun sbatch --nodes 2 -- python train.py --lr 3e-4           # print the script
    envrun sbatch --nodes 2 -o train.sbatch -- python train.py      # write it
    envrun sbatch --submit --wait -- python train.py                 # submit, follow the output, exit with the job's code
    envrun sbatch --check my_job.sh                                  # the pitfall rules on a hand-written script
    envrun sbatch --check my_job.sh --json                           # the same as JSON
    envrun sbatch --check my_job.sh --test-only                      # and what sbatch --test-only says
"""

from __future__ import annotations

import argparse
import shlex
import sys

from envbuild.cli.options import (
    ACCOUNT,
    BIND,
    DRY_RUN,
    FORCE_OVERLAY,
    IMAGE,
    JOB_OUTPUT,
    JSON,
    OUTPUT,
    OVERLAY,
    PARTITION,
    SYSTEM,
    TEST_PARTITION,
    TIME,
    add_option,
    add_renamed,
    duration_type,
)
from envbuild.commands.sbatch import SbatchRequest, check_script, sbatch
from envbuild.commands.sbatch import file_name as file_name  # re-exported: the job file's name, as tests see it
from envbuild.launch.args import LAUNCHERS
from envbuild.shared.errors import UsageError, exit_status_help, reporting_errors

EPILOG = """Defaults for --account, --partition, --time, --launcher and --requeue-max can be set in the envrun
config (~/.config/envbuild/envrun.yaml, or $ENVRUN_CONFIG):
  batch: {time: '04:00:00'}
  systems:
    lumi-g: {batch: {account: project_465000000}}
--account also comes from $SBATCH_ACCOUNT. Arguments of the training command may name staged data as
{staged} (the first --stage) or {staged:2}; it also sees $ENVRUN_STAGED, $ENVRUN_STAGED_2, ...
With --requeue the training sees $ENVRUN_CHECKPOINT_FILE (it appears when the time limit is near; each
rank also gets SIGUSR1) and $ENVRUN_RESTART (0 on the first run).

Renamed (the old spelling still works, with a note): --script is -o/--output, --print is --dry-run,
--log is --job-output.

""" + exit_status_help("--check found errors or warnings; with --submit --wait, the job's own exit status")

CHECK_JSON = ('{"file", "system", "site_rules", "findings": [{"rule", "level": error|warning|info, "line", "what", '
              '"why", "source", "fix", "edit": [LINE, NEW LINE] or null}], "notes": [...]}')


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="envrun sbatch", formatter_class=argparse.RawDescriptionHelpFormatter,
                                     description="Write a Slurm batch script that runs COMMAND with envrun, from the "
                                     "system's recipe; check one; submit and follow it.", epilog=EPILOG)
    add_option(parser, SYSTEM)
    parser.add_argument("--nodes", "-N", type=int, default=1, metavar="N", help="nodes (default 1)")
    parser.add_argument("--gpus-per-node", type=int, metavar="G", help="GPUs per node (default: all of a node's)")
    add_option(parser, TIME)
    add_option(parser, ACCOUNT)
    add_option(parser, PARTITION)
    add_option(parser, TEST_PARTITION)
    parser.add_argument("--launcher", choices=LAUNCHERS,
                        help="torchrun/accelerate/deepspeed: one launcher per node; srun: one task per GPU "
                             "(default: the command's own, config, else torchrun)")
    parser.add_argument("--job-name", "-J", metavar="NAME", help="job name (default: the script's name)")
    add_option(parser, JOB_OUTPUT)
    add_renamed(parser, "--log", JOB_OUTPUT, dest="job_output")
    add_option(parser, IMAGE)
    add_option(parser, OVERLAY, dest="overlays", action="append", default=[],
               default_help="$ENVRUN_OVERLAYS, else overlays: in envrun.yaml")
    add_option(parser, FORCE_OVERLAY)
    add_option(parser, BIND, dest="binds", action="append", default=[], note="for the job's envrun")
    parser.add_argument("--stage", dest="stages", action="append", default=[], metavar="SRC",
                        help="a directory or archive copied/extracted once per node to node-local storage (repeatable)")
    parser.add_argument("--requeue", action="store_true",
                        help="checkpoint on a signal before the time limit and requeue the job")
    parser.add_argument("--requeue-max", type=int, metavar="N", help="most restarts with --requeue (default 3)")
    parser.add_argument("--signal-before", type=duration_type("--signal-before", bare="s"), default=90,
                        metavar="DURATION", help="how long before the time limit the checkpoint signal comes, e.g. 90s "
                        "or 2m (a bare number is seconds, as sbatch --signal counts them; default 90s)")
    mode = parser.add_mutually_exclusive_group()
    add_option(mode, DRY_RUN, note="print the script (the default)")
    add_renamed(mode, "--print", DRY_RUN, dest="dry_run")
    add_option(mode, OUTPUT, note="the batch script")
    add_renamed(mode, "--script", OUTPUT, dest="output")
    mode.add_argument("--submit", action="store_true", help="submit it (sbatch reads it on stdin; a copy is kept in "
                      ".envrun/jobs/); prints the job id")
    mode.add_argument("--check", metavar="SCRIPT", help="check a batch script's #SBATCH and srun lines instead")
    parser.add_argument("--wait", action="store_true", help="with --submit: follow the output, exit with the job's code")
    parser.add_argument("--test-only", action="store_true",
                        help="with --check: also ask Slurm itself (sbatch --test-only: whether it accepts the script, "
                             "and where and when the job would start)")
    parser.add_argument("--no-report", action="store_true",
                        help="no job report (by default the step writes it next to the job output: OUTPUT.report/, "
                             "and its summary ends the output)")
    add_option(parser, JSON, note=f"with --check: {CHECK_JSON}")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- python train.py ...")
    return parser


def main(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    sys.exit(reporting_errors(lambda: run(args, argv)))


def run(args: argparse.Namespace, argv: list[str]) -> int:
    if args.check:
        return check_script(args.check, args.system, as_json=args.json, test_only=args.test_only)
    if args.test_only:
        raise UsageError("--test-only goes with --check", "envrun sbatch --check SCRIPT --test-only")
    if args.json:
        raise UsageError("--json is the output of --check", "envrun sbatch --check SCRIPT --json")
    if args.wait and not args.submit:
        raise UsageError("--wait follows a submitted job", "add --submit")
    return sbatch(sbatch_request(args, argv), script=args.output, submit=args.submit, wait=args.wait)


def sbatch_request(args: argparse.Namespace, argv: list[str]) -> SbatchRequest:
    """What the options ask for; the script regenerates itself with the same words, less the delivery."""
    return SbatchRequest(
        command=tuple(args.command[1:] if args.command[:1] == ["--"] else args.command),
        regenerate=shlex.join(["envrun", "sbatch", *(a for a in argv if a not in ("--submit", "--wait", "--dry-run",
                                                                                  "--print"))]),
        system=args.system, nodes=args.nodes, gpus_per_node=args.gpus_per_node, time=args.time,
        account=args.account, partition=args.partition, test=args.test, launcher=args.launcher,
        job_name=args.job_name, output=args.job_output, image=args.image, overlays=tuple(args.overlays),
        force_overlay=args.force_overlay, binds=tuple(args.binds), stages=tuple(args.stages),
        requeue=args.requeue, requeue_max=args.requeue_max, signal_before=args.signal_before,
        report=not args.no_report,
    )
