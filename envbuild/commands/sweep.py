"""`envrun sweep`: the same training at several scales, one batch job per point (planned as `envrun sbatch`
plans one, envbuild.commands.sbatch), run by envbuild.slurm.sweep.runner, then the scaling table and its
reports. Running the same sweep again with its report directory resumes it."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from envbuild.shared.errors import EXIT_CLEAN, EXIT_PROBLEMS, UsageError

if TYPE_CHECKING:
    from envbuild.recipes.protocols import SystemRecipe
    from envbuild.slurm.sweep.points import ScalePoint
    from envbuild.slurm.sweep.runner import Slurm


@dataclass(frozen=True)
class SweepRequest:
    """What `envrun sweep`'s options ask for. None: as envrun sbatch chooses."""

    command: tuple[str, ...]  # the training command, e.g. ("python", "train.py")
    axis: str  # "nodes" (whole nodes each) or "gpus" (on nodes without GPUs, training processes)
    counts: str  # the scale points as given, e.g. "1,2,4"
    regenerate: str  # the command line of this sweep (each job script names it)
    system: str | None = None  # None: $ENVBUILD_SYSTEM or detected
    image: str | None = None
    overlays: tuple[str, ...] = ()
    force_overlay: bool = False
    repeat: int = 1  # runs per point; the median counts
    report: str | None = None  # the report directory; None: sweep-SCRIPT
    launcher: str | None = None
    time: str | None = None
    account: str | None = None
    partition: str | None = None
    test: bool = False
    serial: bool = False  # one job at a time
    poll_s: float = 2.0


def sweep(request: SweepRequest) -> int:
    """Run the sweep (what earlier runs finished is kept), print the table and write the reports; 1 when a
    point has a failed run or none."""
    from envbuild.host.node import read_host_node
    from envbuild.recipes.detect import resolve_recipe
    from envbuild.slurm.batch.jobplan import job_name
    from envbuild.slurm.batch.resources import node_shape
    from envbuild.slurm.batch.stepcommand import infer_launcher
    from envbuild.slurm.sweep import state as sweepstate
    from envbuild.slurm.sweep.points import parse_counts, plan_points
    from envbuild.slurm.sweep.runner import SweepRunner
    from envbuild.slurm.sweep.state import write_reports
    from envbuild.slurm.sweep.table import build_table, render_text

    command = request.command
    if not command:
        raise UsageError("no training command given", "e.g. envrun sweep --nodes 1,2 -- python train.py")
    if request.repeat < 1:
        raise UsageError(f"--repeat {request.repeat}: each point needs at least one run", "e.g. --repeat 3")
    recipe, _why = resolve_recipe(request.system, os.environ)
    shape = node_shape(recipe, read_host_node(os.environ) if recipe.node is None else None)
    unit = "GPU" if shape.gpus else "process"
    capacity = shape.gpus or max(1, shape.cpus // shape.cores_per_process)
    points = plan_points(request.axis, parse_counts(request.counts, f"--{request.axis}"), capacity, unit)
    launcher = request.launcher or infer_launcher(command)
    directory = request.report or f"sweep-{job_name(command)}"
    image = os.path.abspath(request.image) if request.image else None
    identity = {"command": list(command), "system": recipe.name, "image": image,
                "overlays": [os.path.abspath(o) for o in request.overlays], "launcher": launcher, "unit": unit}
    state = sweepstate.load(directory, identity)
    state.points = sweepstate.merge_points(state.points, points)
    work = sweepstate.todo(state, points, request.repeat)
    say = sys.stderr
    done = len(points) * request.repeat - len(work)
    say.write(f"envrun sweep: {len(points)} point(s) x {request.repeat} run(s) on {recipe.name} "
              f"({shape.why}); report in {directory}" + (f"; {done} run(s) finished earlier" if done else "") + "\n")
    texts: dict[str, str] = {}
    scripts = {(p.key, r): write_script(request, recipe, directory, p, r, texts) for p, r, what in work
               if what == "run"}  # every script first: a request Slurm would refuse stops the sweep before any job
    sweepstate.save(directory, state)
    runner = SweepRunner(directory, state, lambda p, r: scripts[(p.key, r)], slurm_calls(texts), say, os.getcwd(),
                         request.repeat, poll_s=request.poll_s)
    runner.run(work, request.serial)
    rows = build_table(state.points, state.table_runs())
    sys.stdout.write(render_text(rows))
    written = write_reports(directory, rows, identity, warn=lambda text: say.write(f"envrun sweep: warning: {text}\n"))
    say.write("envrun sweep: wrote " + ", ".join(written) + "\n")
    return EXIT_PROBLEMS if any(r.failed or r.runs == 0 for r in rows if r.point in points) else EXIT_CLEAN


def slurm_calls(texts: dict[str, str]) -> Slurm:
    """Slurm's calls for the sweep's runner: each run's script goes to sbatch on its standard input, as
    planned (`texts`, by the path of the copy kept in the report directory), never read back from that copy."""
    from envbuild.commands.sbatch import submit_text
    from envbuild.slurm.batch.submit import job_fields
    from envbuild.slurm.sweep.runner import Slurm

    return Slurm(submit=lambda script, _cwd: submit_text(texts[script], script), fields=job_fields)


_WARNED: set[str] = set()


def write_script(request: SweepRequest, recipe: SystemRecipe, directory: str, point: ScalePoint,
                 repeat: int, texts: dict[str, str] | None = None) -> tuple[str, str]:
    """The run's batch script from envrun sbatch's planner (its checks and warnings included), written into
    the report directory's jobs/ (a record; `texts` gets what is submitted, by that path); (script path,
    output pattern)."""
    from envbuild.commands.sbatch import JOB_SCRIPT_MODE, SbatchRequest, plan_job
    from envbuild.shared.safefiles import current_umask, open_below, write_file
    from envbuild.slurm.batch.script import render_script
    from envbuild.slurm.sweep.runner import log_pattern

    pattern = log_pattern(directory, point, repeat)
    job_request = SbatchRequest(
        command=request.command, regenerate=request.regenerate, system=request.system, image=request.image,
        overlays=request.overlays, force_overlay=request.force_overlay, launcher=request.launcher,
        account=request.account, partition=request.partition, time=request.time, test=request.test,
        nodes=point.nodes, gpus_per_node=point.per_node if point.unit == "GPU" else None,
        processes_per_node=point.per_node if point.unit == "process" else None, output=pattern, time_step=True,
    )
    job = plan_job(job_request, recipe)
    job.job_name = f"{job.job_name}-{point.key}"
    if point.key not in _WARNED:  # once per point, not once per repeat
        _WARNED.add(point.key)
        for warning in job.warnings:
            print(f"envrun sweep: {point.describe()}: warning: {warning}", file=sys.stderr)
    name = f"{point.key}-r{repeat + 1}.sbatch"
    text = render_script(job)
    fd = open_below(directory, ("jobs",), create=True)
    try:
        write_file(name, text, mode=JOB_SCRIPT_MODE & ~current_umask(), dir_fd=fd)
    finally:
        os.close(fd)
    path = os.path.join(directory, "jobs", name)
    if texts is not None:
        texts[path] = text
    return path, pattern
