"""`envrun sbatch`: write, check, submit and follow a Slurm batch script from the system recipe.

    envrun sbatch --nodes 2 -- python train.py --lr 3e-4           # print the script
    envrun sbatch --nodes 2 -o train.sbatch -- python train.py      # write it
    envrun sbatch --submit --wait -- python train.py                 # submit, follow the output, exit with the job's code
    envrun sbatch --check my_job.sh                                  # the pitfall rules on a hand-written script
    envrun sbatch --check my_job.sh --json                           # the same as JSON
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from typing import Any

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


def run(args: Any, argv: list[str]) -> int:
    if args.check:
        from envbuild.recipes.detect import resolve_site_recipe
        from envbuild.slurm.check.pitfalls import check_script_file

        # the check runs a site's rules only on that site's evidence: with no recipe for the site, none
        site_recipe, site = resolve_site_recipe(args.system, os.environ)
        return check_script_file(args.check, site_recipe, sys.stdout, site=site, as_json=args.json)
    if args.json:
        raise UsageError("--json is the output of --check", "envrun sbatch --check SCRIPT --json")
    from envbuild.recipes.detect import resolve_recipe

    recipe, _why = resolve_recipe(args.system, os.environ)
    command = tuple(args.command[1:] if args.command[:1] == ["--"] else args.command)
    if args.wait and not args.submit:
        raise UsageError("--wait follows a submitted job", "add --submit")
    job = plan(args, recipe, command, argv)
    from envbuild.slurm.batch.script import render_script

    text = render_script(job)
    for warning in job.warnings:
        print(f"envrun sbatch: warning: {warning}", file=sys.stderr)
    if not (args.script or args.submit):
        sys.stdout.write(text)
        return 0
    path = args.script or os.path.join(".envrun", "jobs", f"{file_name(job.job_name)}-{time.strftime('%Y%m%d-%H%M%S')}.sbatch")
    _write_script(path, text)
    if not args.submit:
        print(f"envrun sbatch: wrote {path}; submit it with: sbatch {shlex.quote(path)}", file=sys.stderr)
        return 0
    from envbuild.slurm.batch.submit import submit, wait_for_job

    job_id = submit(path, os.getcwd())
    print(job_id, flush=True)
    print(f"envrun sbatch: submitted job {job_id} ({path}; output {job.request.output.replace('%x', job.job_name).replace('%j', job_id)})",
          file=sys.stderr, flush=True)
    if args.wait:
        return wait_for_job(job_id, os.getcwd())
    return 0


def plan(args: Any, recipe: Any, command: tuple[str, ...], argv: list[str]) -> Any:
    from envbuild.host.node import read_host_node
    from envbuild.host.runtime import Runtime, find_runtime
    from envbuild.launch.project import find_environment, image_and_overlays
    from envbuild.launch.visibility import HostPaths
    from envbuild.slurm.batch.plan import DEFAULT_OUTPUT, BatchRequest, Requeue, plan_batch
    from envbuild.slurm.batch.resources import JobRequest
    from envbuild.slurm.batch.staging import describe_source
    from envbuild.slurm.batch.stepcommand import infer_launcher

    cwd = os.getcwd()
    defaults = _batch_defaults(recipe.name)
    environment = find_environment(image=args.image, overlays=args.overlays, environ=os.environ, cwd=cwd)
    image, overlays, warnings, _notes = image_and_overlays(environment, args.force_overlay)
    binds = tuple(getattr(args, "binds", ()))
    for bind in binds:  # as envrun refuses it in the job, but before the queue
        if not os.path.exists(bind.split(":", 1)[0]):
            raise UsageError(f"bind source {bind.split(':', 1)[0]} does not exist (--bind {bind})",
                             "create the directory, or fix the path given to --bind")
    launcher = args.launcher or infer_launcher(command) or defaults.get("launcher") or "torchrun"
    stages = tuple(describe_source(source, cwd) for source in args.stages)
    account, account_source = args.account, "--account"
    if not account and defaults.get("account"):
        account, account_source = defaults["account"], "the envrun config (batch.account)"
    for variable in ("SBATCH_ACCOUNT", "SLURM_ACCOUNT"):
        if not account and os.environ.get(variable):
            account, account_source = os.environ[variable], f"${variable}"
    partition, partition_source = args.partition, "--partition"
    if not partition and defaults.get("partition"):
        partition, partition_source = defaults["partition"], "the envrun config (batch.partition)"
    job = JobRequest(
        nodes=args.nodes, gpus_per_node=args.gpus_per_node, time=args.time or defaults.get("time"),
        account=account, account_source=account_source, partition=partition, partition_source=partition_source,
        launcher=launcher, test=args.test, stage_gb=sum(s.size_gb for s in stages),
        processes_per_node=getattr(args, "processes_per_node", None),  # envrun sweep on CPU-only nodes
    )
    requeue = None
    if args.requeue:
        limit = args.requeue_max if args.requeue_max is not None else defaults.get("requeue_max", 3)
        requeue = Requeue(max_restarts=limit, grace_s=args.signal_before)
    elif args.requeue_max is not None:
        raise UsageError("--requeue-max without --requeue", "add --requeue")
    request = BatchRequest(
        command=command, job=job, image=image, overlays=overlays, job_name=args.job_name,
        output=args.log or DEFAULT_OUTPUT, stages=stages, requeue=requeue, envrun=_envrun_command(), cwd=cwd,
        regenerate=getattr(args, "regenerate", None) or
        shlex.join(["envrun", "sbatch", *(a for a in argv if a not in ("--submit", "--wait", "--print"))]),
        time_step=getattr(args, "time_step", False), binds=binds, config_binds=_config_binds(recipe.name, environment),
        host_paths=HostPaths(),
    )
    runtime = find_runtime(probe=False) or Runtime("apptainer", "apptainer")
    host = read_host_node(os.environ) if recipe.node is None else None
    job_plan = plan_batch(recipe, request, runtime, host)
    job_plan.warnings[:0] = warnings
    return job_plan


def file_name(job_name: str) -> str:
    """The job name as one file name under .envrun/jobs: `/`, blanks, quotes and the like become `_`
    (a job name is anything sbatch takes; a file name must stay in its directory)."""
    import re

    return re.sub(r"[^A-Za-z0-9_.+-]", "_", job_name).lstrip(".") or "job"


def _batch_defaults(system: str) -> dict[str, Any]:
    from envbuild.launch.config import batch_defaults_for, read_user_settings

    return batch_defaults_for(read_user_settings(os.environ), system)


def _config_binds(system: str, environment: Any) -> tuple[str, ...]:
    """The binds envrun in the job adds from the envrun config and the project's envrun.yaml."""
    from envbuild.launch.config import read_user_settings, settings_for
    from envbuild.launch.project import project_settings

    return (*settings_for(read_user_settings(os.environ), system)[0], *project_settings(environment, system)[0])


def _envrun_command() -> str:
    """`envrun` when the one on PATH is this one, else this one's absolute path: the installed script that
    runs now, or a checkout's bin/envrun (which runs envrun as a module)."""
    import shutil

    import envbuild

    here = [os.path.realpath(sys.argv[0])] if sys.argv and os.path.basename(sys.argv[0]) == "envrun" else []
    checkout = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(envbuild.__file__))), "bin", "envrun")
    here += [checkout] if os.path.isfile(checkout) else []
    found = shutil.which("envrun")
    if not here or (found and os.path.realpath(found) in here):
        return "envrun"
    return here[0]


def _write_script(path: str, text: str) -> None:
    from envbuild.atomicfile import atomic_write

    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, exist_ok=True)
    atomic_write(path, text.encode())
    os.chmod(path, 0o755)  # noqa: S103 - a job script, run by its owner's sbatch
