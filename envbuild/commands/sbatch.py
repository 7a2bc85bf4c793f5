"""`envrun sbatch`: a batch job from what its options ask for (SbatchRequest), planned from the system recipe
(envbuild.slurm.batch.jobplan) with the envrun config's defaults, then printed, written, or submitted and
followed. `envrun sweep` plans each of its runs here too; `--check` reads a hand-written script instead."""

from __future__ import annotations

import os
import shlex
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from envbuild.shared.errors import UsageError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from envbuild.launch.project import Environment
    from envbuild.recipes.protocols import SystemRecipe
    from envbuild.slurm.batch.jobplan import BatchJob
    from envbuild.slurm.cluster import LiveCluster


@dataclass(frozen=True)
class SbatchRequest:
    """What `envrun sbatch`'s options ask for. None: envrun chooses (the envrun config, then its default)."""

    command: tuple[str, ...]  # the training command, e.g. ("python", "train.py")
    regenerate: str  # the command line that writes this script again (the script names it)
    system: str | None = None  # None: $ENVBUILD_SYSTEM or detected
    nodes: int = 1
    gpus_per_node: int | None = None
    processes_per_node: int | None = None  # CPU-only nodes (envrun sweep): training processes per node
    time: str | None = None
    account: str | None = None
    partition: str | None = None
    test: bool = False  # the system's test/development partition
    launcher: str | None = None  # None: the command's own, the config's, else torchrun
    job_name: str | None = None
    output: str | None = None  # the job's output file pattern; None: DEFAULT_OUTPUT
    image: str | None = None  # None: as envrun finds it
    overlays: tuple[str, ...] = ()
    force_overlay: bool = False
    binds: tuple[str, ...] = ()
    stages: tuple[str, ...] = ()  # directories or archives copied to node-local storage
    requeue: bool = False
    requeue_max: int | None = None
    signal_before: int = 90  # seconds before the time limit that the checkpoint signal comes
    time_step: bool = False  # print the step's wall time as an `envrun-step:` line (envrun sweep reads it)
    report: bool = True  # the step writes its job report next to the job's output (envbuild.report)


def check_script(path: str, system: str | None, *, as_json: bool, test_only: bool = False) -> int:
    """`envrun sbatch --check`: the pitfall rules on a batch script; 1 when it has errors or warnings. Where the
    check runs on the cluster the script is for, what that cluster says now (partitions, limits, nodes) is
    checked too, and with `test_only` what `sbatch --test-only` says."""
    from envbuild.recipes.detect import resolve_site_recipe
    from envbuild.slurm.check.pitfalls import check_script_file, read_script

    # the check runs a site's rules only on that site's evidence: with no recipe for the site, none
    site_recipe, site = resolve_site_recipe(system, os.environ)
    # sbatch --test-only is asked with the cluster's other queries, at once, so it needs the script's text now
    text = read_script(path) if test_only else None
    live, note = live_cluster(system, os.environ, site_recipe, script=text)
    notes = (note,) if note else ()
    if text is not None and live.facts is not None and live.test_only is None:
        notes = (*notes, f"sbatch --test-only: {live.test_only_why or 'sbatch gave no answer'}: Slurm's own check "
                 "did not run")
    return check_script_file(path, site_recipe, sys.stdout, site=site, as_json=as_json, cluster=live.facts,
                             test_only=live.test_only, notes=notes, text=text)


def live_cluster(system: str | None, environ: Mapping[str, str], recipe: SystemRecipe | None = None,
                 script: str | None = None) -> tuple[LiveCluster, str]:
    """What the cluster this runs on says now, when the script is checked for it (with `script`, what
    `sbatch --test-only` says of it too), and a note: no facts, and why not, where Slurm does not answer, or the
    check is for another cluster (`--system` names another site, or the environment's $SLURM_CLUSTER_NAME is not
    the ClusterName of the Slurm that answers). A recipe given by `--system` (a name or a file, as
    `envrun recipe draft` writes) is this cluster's where its detect.slurm_cluster_names holds this ClusterName."""
    from envbuild.recipes.detect import cluster_name, detect_site
    from envbuild.slurm.cluster import LiveCluster, read_live_cluster

    configured, _where = cluster_name({key: value for key, value in environ.items() if key != "SLURM_CLUSTER_NAME"})
    named = environ.get("SLURM_CLUSTER_NAME", "")
    if named and configured and named.lower() != configured:
        return LiveCluster(None), (f"this machine's Slurm is {configured}, the environment names {named}: the live "
                                   "cluster's partitions and limits were not checked")
    if system:
        detected, _why = detect_site(environ)
        names = recipe.detect.slurm_cluster_names if recipe is not None else ()
        if detected != system and not (configured and configured in names):
            return LiveCluster(None), (f"--system {system}: the Slurm here ({configured or 'none found'}) is not that "
                                       "site's: its partitions and limits were not checked")
    import getpass

    # the accounts of the user who will submit: sacctmgr answers for the user named, whoever runs the check
    try:
        user = environ.get("USER") or environ.get("LOGNAME") or getpass.getuser()
    except (OSError, KeyError):  # no name for this uid: accounting cannot be asked about it
        user = ""
    live = read_live_cluster(configured or named, user, script, os.getcwd())
    facts = live.facts
    if facts is None:
        return live, (f"{live.why}: the cluster's own partitions and limits were not checked (run the check on the "
                      "cluster's login node for them)")
    accounting = (f"{user}'s accounts from sacctmgr" if facts.associations is not None and facts.associations.answered
                  else "accounting (sacctmgr) did not answer")
    return live, (f"checked against {facts.name or 'this cluster'} as scontrol describes it now: "
                  f"{len(facts.partitions)} partition(s), {len(facts.nodes)} node(s), Slurm "
                  f"{facts.slurm_version or 'of unknown version'}; {accounting}")


def sbatch(request: SbatchRequest, *, script: str | None, submit: bool, wait: bool) -> int:
    """Plan the job, then print the script; or write it to `script`; or submit it (written to `script` or
    .envrun/jobs/) and print the job id, with `wait` following its output and returning the job's exit code."""
    from envbuild.recipes.detect import resolve_recipe
    from envbuild.slurm.batch.script import render_script

    recipe, _why = resolve_recipe(request.system, os.environ)
    job = plan_job(request, recipe)
    text = render_script(job)
    for warning in job.warnings:
        print(f"envrun sbatch: warning: {warning}", file=sys.stderr)
    _refuse_missing_files(request.command, os.getcwd(), submit=submit)
    if not (script or submit):
        sys.stdout.write(text)
        return 0
    if script == "-":
        write_output("-", text)
        return 0
    if script:
        path = script
        write_output(script, text)
    else:
        path = _write_job_record(f"{file_name(job.job_name)}-{time.strftime('%Y%m%d-%H%M%S')}.sbatch", text)
    if not submit:
        print(f"envrun sbatch: wrote {path}; submit it with: sbatch {shlex.quote(path)}", file=sys.stderr)
        return 0
    from envbuild.slurm.batch.submit import wait_for_job

    job_id = submit_text(text, path)
    print(job_id, flush=True)
    output = job.request.output.replace("%x", job.job_name).replace("%j", job_id)
    print(f"envrun sbatch: submitted job {job_id} ({path}; output {output}"
          + (f"; report {job.report_dir.replace('%x', job.job_name).replace('%j', job_id)}" if job.report_dir else "")
          + ")", file=sys.stderr, flush=True)
    if wait:
        return wait_for_job(job_id, os.getcwd())
    return 0


def _refuse_missing_files(command: tuple[str, ...], cwd: str, *, submit: bool) -> None:
    """The program file and a config file the command names must exist where the job starts (this directory,
    which sbatch makes the job's): a typo or the wrong directory would fail the job after its queue wait. An
    error before --submit; a warning when the script is only printed or written (it may be submitted elsewhere)."""
    from envbuild.launch.visibility import missing_files

    missing = missing_files(command, cwd, os.path.exists)
    if not missing:
        return
    what = "; ".join(f"{written} (looked at {looked})" for written, looked in missing)
    fix = ("fix the name, or run envrun sbatch in the directory the job should start in (the job starts where "
           "sbatch is run)")
    if submit:
        raise UsageError(f"the job would open a file that does not exist: {what}", fix)
    print(f"envrun sbatch: warning: the job would open a file that does not exist here: {what}; {fix}",
          file=sys.stderr)


def submit_text(text: str, record: str) -> str:
    """Submit the batch script `text` from the working directory (the job's); the job id. sbatch reads it
    on its standard input (no file argument): the job is what was planned here, even when someone who may
    write the directory of the copy kept as `record` swaps that file between its write and the submission."""
    import subprocess

    from envbuild.shared.errors import EnvbuildError
    from envbuild.slurm.batch.submit import submit

    def on_stdin(argv: list[str]) -> subprocess.CompletedProcess[str]:
        # submit() names the script last, for its messages; sbatch gets the words before it and the text
        command = argv[:-1]
        try:
            return subprocess.run(command, input=text, capture_output=True, text=True, timeout=60, check=False)
        except FileNotFoundError:
            raise UsageError(f"{command[0]} is not on PATH", "run this where Slurm's commands are (a login node), or "
                             "write the script with -o FILE and submit it there") from None
        except subprocess.TimeoutExpired:
            raise EnvbuildError(f"{command[0]} did not answer within 60 s",
                                "check that the Slurm controller is up") from None

    return submit(record, os.getcwd(), run=on_stdin)


def plan_job(request: SbatchRequest, recipe: SystemRecipe) -> BatchJob:
    """The batch job on `recipe` (request.system's, resolved by the caller): the environment as envrun finds
    it, binds checked, the envrun config's batch defaults (then $SBATCH_ACCOUNT) where the request leaves a
    value open, planned by envbuild.slurm.batch.jobplan."""
    from envbuild.host.node import read_host_node
    from envbuild.host.runtime import Runtime, find_runtime
    from envbuild.launch.project import find_environment, image_and_overlays
    from envbuild.launch.visibility import HostPaths
    from envbuild.slurm.batch.jobplan import DEFAULT_OUTPUT, BatchRequest, Requeue, plan_batch
    from envbuild.slurm.batch.resources import JobRequest
    from envbuild.slurm.batch.staging import describe_source
    from envbuild.slurm.batch.stepcommand import infer_launcher

    cwd = os.getcwd()
    defaults = _batch_defaults(recipe.name)
    environment = find_environment(image=request.image, overlays=request.overlays, environ=os.environ, cwd=cwd)
    image, overlays, warnings, _notes = image_and_overlays(environment, request.force_overlay)
    for bind in request.binds:  # as envrun refuses it in the job, but before the queue
        if not os.path.exists(bind.split(":", 1)[0]):
            raise UsageError(f"bind source {bind.split(':', 1)[0]} does not exist (--bind {bind})",
                             "create the directory, or fix the path given to --bind")
    launcher = request.launcher or infer_launcher(request.command) or defaults.get("launcher") or "torchrun"
    stages = tuple(describe_source(source, cwd) for source in request.stages)
    account, account_source = request.account, "--account"
    if not account and defaults.get("account"):
        account, account_source = defaults["account"], "the envrun config (batch.account)"
    for variable in ("SBATCH_ACCOUNT", "SLURM_ACCOUNT"):
        if not account and os.environ.get(variable):
            account, account_source = os.environ[variable], f"${variable}"
    partition, partition_source = request.partition, "--partition"
    if not partition and defaults.get("partition"):
        partition, partition_source = defaults["partition"], "the envrun config (batch.partition)"
    job = JobRequest(
        nodes=request.nodes, gpus_per_node=request.gpus_per_node, time=request.time or defaults.get("time"),
        account=account, account_source=account_source, partition=partition, partition_source=partition_source,
        launcher=launcher, test=request.test, stage_gb=sum(s.size_gb for s in stages),
        processes_per_node=request.processes_per_node,
    )
    requeue = None
    if request.requeue:
        limit = request.requeue_max if request.requeue_max is not None else defaults.get("requeue_max", 3)
        requeue = Requeue(max_restarts=limit, grace_s=request.signal_before)
    elif request.requeue_max is not None:
        raise UsageError("--requeue-max without --requeue", "add --requeue")
    batch = BatchRequest(
        command=request.command, job=job, image=image, overlays=overlays, job_name=request.job_name,
        output=request.output or DEFAULT_OUTPUT, stages=stages, requeue=requeue, envrun=_envrun_command(), cwd=cwd,
        regenerate=request.regenerate, time_step=request.time_step, binds=request.binds, report=request.report,
        config_binds=_config_binds(recipe.name, environment), host_paths=HostPaths(),
        slurm=preview_slurm_version(recipe, os.environ),
    )
    runtime = find_runtime(probe=False) or Runtime("apptainer", "apptainer")
    host = read_host_node(os.environ) if recipe.node is None else None
    job_plan = plan_batch(recipe, batch, runtime, host)
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


def _config_binds(system: str, environment: Environment) -> tuple[str, ...]:
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


JOB_SCRIPT_MODE = 0o755  # a job script, run by its owner's sbatch


def write_output(path: str, text: str) -> None:
    """The batch script at the user's `-o PATH` (`-` standard output; a device or FIFO written in place),
    through envbuild.shared.safefiles: a link planted at the name or at its partial file is never written through."""
    from envbuild.shared.safefiles import current_umask, open_dir, write_file

    if path == "-":
        sys.stdout.write(text)
        return
    directory, name = os.path.split(path)
    if not name:
        raise UsageError(f"-o {path} is a directory", "give a file name, e.g. -o train.sbatch")
    fd = open_dir(directory or ".", create=True)
    try:
        write_file(name, text, mode=JOB_SCRIPT_MODE & ~current_umask(), dir_fd=fd)
    finally:
        os.close(fd)


def _write_job_record(name: str, text: str) -> str:
    """The submitted script's copy in .envrun/jobs/ (a record: sbatch gets the text itself, see submit_text);
    its path. .envrun and jobs are opened without following a link, and refused when another user made
    them in a directory others may write (a group project)."""
    from envbuild.shared.safefiles import current_umask, open_below, write_file

    fd = open_below(os.getcwd(), JOBS_DIR, create=True)
    try:
        write_file(name, text, mode=JOB_SCRIPT_MODE & ~current_umask(), dir_fd=fd)
    finally:
        os.close(fd)
    return os.path.join(*JOBS_DIR, name)


JOBS_DIR = (".envrun", "jobs")


def forward_signal(signal_name: str, directory: str) -> int:
    """`envrun signal-ranks SIGNAL DIR`, what a --requeue script runs once per node when the checkpoint signal
    comes: SIGNAL sent to the training processes envrun recorded in DIR on this node (envbuild.slurm.batch.forward);
    the number reached."""
    from envbuild.slurm.batch.forward import signal_ranks

    return signal_ranks(signal_name, directory)


def preview_slurm_version(recipe: SystemRecipe, environ: Mapping[str, str]) -> tuple[str, str]:
    """srun's version here, where the script is written, for the script's preview of the step's GPU binding:
    read (through the user's cache, as envrun reads it) only for a recipe whose binding depends on it
    (launch.gpu_bind). Without an srun here (a script written away from the cluster) the preview says the step
    decides; the step's envrun reads the version again where it starts either way."""
    from envbuild.launch.bindstyle import SLURM_NOT_READ

    if recipe.launch.gpu_bind is None:
        return SLURM_NOT_READ
    from envbuild.launch.bindingfacts import slurm_version

    version, source = slurm_version(environ)
    if not version:
        return SLURM_NOT_READ
    return version, f"{source}, where this script was written; the step's envrun reads it again when it starts"
