"""`envrun [options] COMMAND`: finds the environment (image, overlays), the system recipe, the binds and
the job, plans the launch (envbuild.launch.launchplan) and runs it: exec, or under srun a supervised step
(envbuild.launch.supervise); with --dry-run the plan is printed as a shell script instead.

Light on purpose, like envbuild.launch.launchrequest: envrun runs this before every job step, so nothing here
loads pydantic, yaml, click, dataclasses or typing on the way to exec."""

from __future__ import annotations

import os
import sys

from envbuild.shared.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from envbuild.launch.launchplan import LaunchPlan
    from envbuild.recipes.protocols import SystemRecipe


class RunRequest:
    """What `envrun [options] COMMAND` asks for, as given on its command line."""

    __slots__ = ("binds", "command", "dry_run", "explain", "force_overlay", "image", "no_report", "overlays",
                 "report", "report_interval", "step_timeout", "strict_net", "system", "verbose")

    def __init__(self, *, command: list[str], image: str | None = None, overlays: list[str] | None = None,
                 force_overlay: bool = False, binds: list[str] | None = None, system: str | None = None,
                 dry_run: bool = False, explain: bool = False, strict_net: bool = False,
                 step_timeout: str | None = None, report: str | None = None, no_report: bool = False,
                 report_interval: str | None = None, verbose: bool = False) -> None:
        self.command = command  # srun ..., torchrun ..., python ...: everything after envrun's own options
        self.image = image  # None: found by envbuild.launch.project ($ENVRUN_IMAGE, envrun.yaml, the one *.sif)
        self.overlays = overlays if overlays is not None else []
        self.force_overlay = force_overlay
        self.binds = binds if binds is not None else []  # --bind, on top of the config's and the project's
        self.system = system  # None: $ENVBUILD_SYSTEM or detected
        self.dry_run = dry_run
        self.explain = explain
        self.strict_net = strict_net
        self.step_timeout = step_timeout  # None: $ENVRUN_STEP_TIMEOUT, else no limit
        self.report = report  # --report DIR: the step's report files there; None: $ENVRUN_REPORT, else summary only
        self.no_report = no_report  # --no-report: no sampler, no summary
        self.report_interval = report_interval  # None: $ENVRUN_REPORT_INTERVAL, else REPORT_INTERVAL
        self.verbose = verbose  # -v: the container runtime's INFO lines too (left out otherwise: apptainer --quiet)


# Seconds between two samples of a node's GPUs and CPUs (--report-interval): the sampler's cost per sample,
# measured in bench/report_overhead.py and docs/concepts/report.md, stays under 1 % of a core at this interval.
REPORT_INTERVAL = "5s"
# Values of $ENVRUN_REPORT that turn the report off, as --no-report does.
REPORT_OFF = ("0", "off", "no", "none", "false")


def launch(request: RunRequest, cache_as: Sequence[str] | None = None) -> None:
    """Plan the launch from this process's environment and directory, then exec it (or, under srun, run it
    and exit with its status); with dry_run print it as a shell script. With `cache_as` (envrun's command
    line), a plan that envrun execs is kept for it with what it was made from, for its next launch
    (envbuild.launch.plancache.exec_cached); --dry-run and --explain always plan afresh, and so does a launch
    in a Slurm job."""
    from envbuild.launch.plancache import plans_kept

    cwd = os.getcwd()
    if cache_as is None or request.dry_run or request.explain or not plans_kept(os.environ):
        plan = plan_for(request, os.environ, cwd)
    else:
        from envbuild.launch.planrecord import PlanRecorder

        with PlanRecorder(os.environ) as recorder:
            plan = plan_for(request, recorder.environ, cwd)
        recorder.store(cache_as, cwd, plan)
    if request.dry_run:
        sys.stdout.write(plan.script())
        return
    sys.stderr.write("".join(f"envrun: warning: {warning}\n" for warning in plan.warnings))
    if request.explain:
        sys.stderr.write("".join(f"envrun: {reason}\n" for reason in plan.reasons))
    from envbuild.launch.plancache import environment_for

    env = environment_for(plan.unset, plan.env)
    sys.stdout.flush()
    sys.stderr.flush()
    if plan.step:  # under srun: envrun stays, to name the cause when the step fails (envbuild.launch.supervise)
        from envbuild.host.runtime import which
        from envbuild.launch.supervise import run_step

        if which(plan.argv[0], env.get("PATH", os.defpath)) is None:
            raise UsageError(f"{plan.argv[0]} is not on PATH", "load Slurm / apptainer or fix PATH")
        from envbuild.launch.shims import REPORT_KEY_VARIABLE

        report = None
        env.pop(REPORT_KEY_VARIABLE, None)  # only this step's: the host shim starts no sampler without it
        if plan.report:
            from envbuild.report.stepreport import StepReport

            report = StepReport(command=tuple(request.command), environ=os.environ,
                                directory=report_directory(request, os.environ))
            env[REPORT_KEY_VARIABLE] = report.key  # for the host shim, which hands it to the sampler only
        sys.exit(run_step(plan.argv, env, step=plan.step, time_limit=plan.time_limit, report=report))
    try:
        os.execvpe(plan.argv[0], list(plan.argv), env)  # noqa: S606 - argv passed as words, deliberately no shell
    except FileNotFoundError:
        raise UsageError(f"{plan.argv[0]} is not on PATH", "load Slurm / apptainer or fix PATH") from None


def plan_for(request: RunRequest, environ: Mapping[str, str], cwd: str) -> LaunchPlan:
    """Gather what the planner needs (the environment, the recipe, the binds, the job, this node) and plan."""
    from envbuild.host.arch import check_image_arch
    from envbuild.host.node import read_host_node
    from envbuild.host.runtime import require_runtime
    from envbuild.launch.allocation import gpus_from_scontrol, read_allocation
    from envbuild.launch.config import config_path, read_user_settings, settings_for
    from envbuild.launch.imageenv import image_with_conda
    from envbuild.launch.launchplan import LaunchRequest, plan_launch
    from envbuild.launch.project import find_environment, image_and_overlays, project_settings
    from envbuild.launch.runscript import image_runscript
    from envbuild.launch.visibility import HostPaths
    from envbuild.recipes.detect import resolve_recipe
    from envbuild.sif.format import read_sif_arch

    environment = find_environment(image=request.image, overlays=request.overlays, environ=environ, cwd=cwd)
    image_path, overlays, warnings, notes = image_and_overlays(environment, request.force_overlay)
    recipe, why = resolve_recipe(request.system, environ)
    check_image_arch(image_path, read_sif_arch(image_path), recipe, under_srun=request.command[:1] == ["srun"])  # before the runtime starts
    runscript = image_runscript(image_path)  # ("run", what it does): start with `run`, as the image's makers do
    if runscript and runscript[0] == "exec":
        notes.append(f"image {image_path}: {runscript[1]}")
    # the envrun config's binds and env for this system; validated (pydantic) only when the file changed
    user_binds, user_env = settings_for(read_user_settings(environ), recipe.name)
    project_binds, project_env = project_settings(environment, recipe.name)
    all_binds = (*user_binds, *project_binds, *request.binds)
    for bind in all_binds:
        source = bind.split(":", 1)[0]
        if not os.path.exists(source):
            if bind in request.binds:
                given = f"--bind {bind}"
            elif bind in project_binds:
                given = f"binds in {environment.project_file}"
            else:
                given = f"binds in the envrun config {config_path(environ)}"
            raise UsageError(f"bind source {source} does not exist ({given})",
                             "create the directory, or fix the path given to --bind (or in the envrun config)")
    missing = tuple(b for b in (*recipe.binds, *recipe.multinode_binds) if not os.path.exists(b.split(":", 1)[0]))
    allocation = read_allocation(environ)
    if allocation is not None:
        gpus_from_scontrol(allocation)  # an salloc shell: its variables do not say
    sampler = report_sampler(request, environ)
    slurm, torch = binding_facts(recipe, request.command, image_path, overlays, environ)
    step_timeout, step_timeout_from = request.step_timeout, "--step-timeout"
    if not step_timeout and environ.get("ENVRUN_STEP_TIMEOUT"):
        step_timeout, step_timeout_from = environ["ENVRUN_STEP_TIMEOUT"], "$ENVRUN_STEP_TIMEOUT"
    return plan_launch(LaunchRequest(
        command=tuple(request.command), image=image_path, recipe=recipe, runtime=require_runtime(probe=False, environ=environ),
        cwd=cwd, binds=all_binds, env=tuple({**user_env, **project_env}.items()), environ=environ,
        missing_recipe_binds=missing, system_reason=why, allocation=allocation,
        host=read_host_node(environ), overlays=overlays, warnings=tuple(warnings), notes=tuple(notes),
        strict_net=request.strict_net, step_timeout=step_timeout or "", step_timeout_from=step_timeout_from,
        runscript=runscript[1] if runscript and runscript[0] == "run" else "", host_paths=HostPaths(),
        report_sampler=sampler, runtime_info=request.explain or request.verbose, slurm=slurm, torch=torch,
        image_with_conda=image_with_conda(image_path),
    ))


def binding_facts(recipe: SystemRecipe, command: list[str], image: str, overlays: tuple[tuple[str, str], ...],
                  environ: Mapping[str, str]) -> tuple[tuple[str, str], tuple[str, str, bool]]:
    """This Slurm's version and the image's torch, read only where the recipe documents a binding that depends
    on them and the command could use it (srun; torchrun): other launches pay nothing for them."""
    from envbuild.launch.args import launcher_kind, split_srun

    slurm: tuple[str, str] = ("", "not needed")
    torch: tuple[str, str, bool] = ("", "not needed", False)
    program = split_srun(tuple(command))[1] if command[:1] == ["srun"] else tuple(command)
    if recipe.launch.gpu_bind is not None and command[:1] == ["srun"]:
        from envbuild.launch.bindingfacts import slurm_version

        slurm = slurm_version(environ)
    if recipe.launch.numa_binding is not None and program and launcher_kind(program) == "torchrun":
        from envbuild.launch.bindingfacts import image_torch

        torch = image_torch(image, overlays)
    return slurm, torch


def report_directory(request: RunRequest, environ: Mapping[str, str]) -> str:
    """Where the report's files go: --report, else $ENVRUN_REPORT (unless it turns the report off), else ""
    (the summary only)."""
    if request.report:
        return request.report
    value = environ.get("ENVRUN_REPORT", "")
    return "" if value.lower() in REPORT_OFF else value


def report_sampler(request: RunRequest, environ: Mapping[str, str]) -> tuple[str, ...]:
    """The words that start a node's sampler (envbuild.report.sampler) with this envrun's own Python and
    envbuild, so that it runs on every node where envrun runs; () when the report is off, and without srun
    (no step to sample) unless an interval was given, which is checked all the same."""
    if request.no_report or (not request.report and environ.get("ENVRUN_REPORT", "x").lower() in REPORT_OFF):
        return ()
    given, given_from = request.report_interval, "--report-interval"
    if not given and environ.get("ENVRUN_REPORT_INTERVAL"):
        given, given_from = environ["ENVRUN_REPORT_INTERVAL"], "$ENVRUN_REPORT_INTERVAL"
    if not given and request.command[:1] != ["srun"]:
        return ()  # a sampler runs beside an srun step only, and the default interval needs no check
    from envbuild.shared.durations import parse_duration

    seconds = parse_duration(given or REPORT_INTERVAL, given_from, bare="s")
    if seconds < 1:
        raise UsageError(f"{given_from} {given}: under a second between samples", "give 1s or more, e.g. 5s")
    from envbuild.host.pythonstart import isolated_module

    # -I with this envbuild put on sys.path explicitly: the step's working directory (a json.py or an envbuild/
    # there) is never on it.
    return isolated_module("envbuild.report.sampler", "--interval", str(seconds))
