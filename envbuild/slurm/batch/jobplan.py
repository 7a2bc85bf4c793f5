"""A batch job as plain data: the resources, the training step and what runs around it (staging, requeue),
with the reason for each line. Pure: `render_script` (envbuild.slurm.batch.script) turns it into the script.

What envrun will do inside the job is planned here with the real launch planner, over the allocation the
job will hold (its SLURM_* variables, written as Slurm sets them), so the script's comments say exactly
what `envrun --explain` will say at run time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from envbuild.launch.allocation import read_allocation
from envbuild.launch.args import launcher_of
from envbuild.launch.bindstyle import SLURM_NOT_READ
from envbuild.launch.launchplan import LaunchRequest, plan_launch
from envbuild.launch.shims import CHECKPOINT_SIGNAL
from envbuild.recipes.ops import system_argument
from envbuild.shared.shelltext import refuse_control
from envbuild.slurm.batch.resources import JobRequest, JobResources, plan_resources
from envbuild.slurm.batch.staging import StageSource
from envbuild.slurm.batch.stepcommand import step_command

TYPE_CHECKING = False
if TYPE_CHECKING:
    from envbuild.host.node import HostNode
    from envbuild.host.runtime import Runtime
    from envbuild.launch.visibility import HostPaths
    from envbuild.recipes.protocols import RecipeStaging, SystemRecipe

DEFAULT_OUTPUT = "%x-%j.out"


@dataclass(frozen=True)
class Requeue:
    """--requeue: Slurm signals the batch shell `grace_s` before the limit; the job comes back at most
    `max_restarts` times (submitit's default is 3 timeouts)."""

    max_restarts: int = 3
    signal: str = CHECKPOINT_SIGNAL  # envrun makes the ranks ignore it unless they handle it (launch.shims)
    grace_s: int = 90


@dataclass(frozen=True)
class BatchRequest:
    """Everything `envrun sbatch` was asked for, resolved to plain values by the command line layer."""

    command: tuple[str, ...]
    job: JobRequest
    image: str
    overlays: tuple[tuple[str, str], ...] = ()  # (absolute path, mount point)
    job_name: str | None = None
    output: str = DEFAULT_OUTPUT
    stages: tuple[StageSource, ...] = ()
    requeue: Requeue | None = None
    envrun: str = "envrun"
    cwd: str = "."
    regenerate: str = ""  # the command line that writes this script again
    time_step: bool = False  # print the step's wall time as an `envrun-step:` line (envrun sweep reads it)
    binds: tuple[str, ...] = ()  # --bind: written into the script's envrun line
    # The envrun config's and the project's binds: envrun in the job adds them itself; here they only tell which
    # of the command's paths the container will see (host_paths: this host's file system; None: not checked)
    config_binds: tuple[str, ...] = ()
    host_paths: HostPaths | None = field(default=None, compare=False)
    report: bool = True  # the step's job report (envbuild.report), written next to the job's output
    # srun's version where the script is written and where it was read, for the preview of the step's GPU binding
    # on a site whose binding depends on it (launch.gpu_bind); SLURM_NOT_READ: the preview says the step decides
    slurm: tuple[str, str] = SLURM_NOT_READ


@dataclass
class BatchJob:
    recipe: SystemRecipe
    request: BatchRequest
    resources: JobResources
    job_name: str
    step: tuple[str, ...]  # what follows `srun` in the envrun line
    envrun_options: tuple[str, ...]  # envrun's own options, literal words (the staging bind is the script's)
    srun_env: list[tuple[str, str, str]] = field(default_factory=list)  # (variable, source variable, why)
    explain: list[str] = field(default_factory=list)  # what envrun does in the step, and why
    warnings: list[str] = field(default_factory=list)
    report_dir: str = ""  # --report of the job's envrun (Slurm's %x and %j in it), "" for none

    @property
    def staging(self) -> RecipeStaging | None:
        return self.recipe.batch.staging if self.request.stages else None


def plan_batch(recipe: SystemRecipe, request: BatchRequest, runtime: Runtime, host: HostNode | None = None) -> BatchJob:
    refuse_control_in_request(request)
    resources = plan_resources(recipe, request.job, host)
    step = step_command(request.command, request.job.launcher)
    options = ["--system", system_argument(recipe), "--image", request.image]
    for path, _mount in request.overlays:
        options += ["--overlay", path]
    for bind in request.binds:
        options += ["--bind", bind]
    report = report_directory(request.output) if request.report else ""
    options += ["--report", report] if report else ["--no-report"]
    job = BatchJob(recipe=recipe, request=request, resources=resources, job_name=request.job_name or job_name(step),
                   step=step, envrun_options=tuple(options), warnings=list(resources.warnings), report_dir=report)
    for target, source in recipe.launch.srun_env_from.items():
        job.srun_env.append((target, source, recipe.cite("launch.srun_env_from." + target)))
    launch = plan_launch(LaunchRequest(
        command=("srun", *step), image=request.image, recipe=recipe, runtime=runtime, cwd=request.cwd,
        environ=job_environment(recipe, resources), allocation=read_allocation(job_environment(recipe, resources)),
        overlays=request.overlays, binds=(*request.config_binds, *request.binds), host_paths=request.host_paths,
        report_sampler=REPORT_SAMPLER_SHOWN if report else (), slurm=request.slurm,
    ))
    job.explain = [reason for reason in launch.reasons if not reason.startswith("system ")]
    if report:
        job.explain.append(f"the job report goes to {report}/ (report.json, report.html, timeline.png, summary.txt), "
                           "next to the job's output; its summary ends the output")
    job.warnings += [w for w in launch.warnings if w not in job.warnings]
    return job


# The sampler's words only matter to the plan's explanation here: the job's envrun writes its own
# (envbuild.commands.launch.report_sampler) on the node where it runs.
REPORT_SAMPLER_SHOWN = ("envrun-sampler",)


def report_directory(output: str) -> str:
    """The job report's directory beside the job's output file: `%x-%j.out` -> `%x-%j.report` (envrun
    expands Slurm's %x, %j, %A, %a, %u itself)."""
    head, slash, name = output.rpartition("/")
    stem = name.rsplit(".", 1)[0] if "." in name.lstrip(".") else name
    return f"{head}{slash}{stem or 'envrun'}.report"


def refuse_control_in_request(request: BatchRequest) -> None:
    """Every value the user gave that lands in the script, on one line (a newline in any of them would
    start a line of its own in the script, or in the #SBATCH lines sbatch reads): a located error if not."""
    job = request.job
    given = [(request.job_name or "", "--job-name"), (request.output, "--job-output"), (job.account or "", job.account_source),
             (job.partition or "", job.partition_source), (job.time or "", "--time"), (request.image, "--image"),
             *((path, "--overlay") for path, _mount in request.overlays),
             *((source.path, "--stage") for source in request.stages), *((bind, "--bind") for bind in request.binds),
             *((word, f"word {index} of the training command") for index, word in enumerate(request.command, 1))]
    for value, where in given:
        refuse_control(value, where)


def job_name(step: tuple[str, ...]) -> str:
    """train.py -> train; -m pkg.train -> train: what `squeue` shows. The launcher's own words (`python -m
    torch.distributed.run`) are not the program."""
    program = step[launcher_of(step)[1] :]
    for index, word in enumerate(program):
        if word in ("-m", "--module") and index + 1 < len(program):
            return program[index + 1].rsplit(".", 1)[-1]
        if word.endswith(".py"):
            return word.rsplit("/", 1)[-1][:-3]
    return step[0].rsplit("/", 1)[-1]


def job_environment(recipe: SystemRecipe, resources: JobResources) -> dict[str, str]:
    """The SLURM_* variables the batch script will see, as Slurm 22.05 sets them for this request (observed
    on the test cluster, see envbuild.launch.allocation)."""
    tasks = resources.tasks_per_node * resources.nodes
    environ = {
        "SLURM_JOB_ID": "0", "SLURM_JOB_NUM_NODES": str(resources.nodes), "SLURM_NNODES": str(resources.nodes),
        "SLURM_NTASKS": str(tasks), "SLURM_NTASKS_PER_NODE": str(resources.tasks_per_node),
        "SLURM_CPUS_PER_TASK": str(resources.cpus_per_task),
        "SLURM_CPUS_ON_NODE": str(resources.tasks_per_node * resources.cpus_per_task),
        "SLURM_JOB_PARTITION": resources.partition or "", "ENVIRONMENT": "BATCH",
    }
    if resources.gpus_per_node:
        environ["SLURM_GPUS_ON_NODE"] = str(resources.gpus_per_node)
    for target, source in recipe.launch.srun_env_from.items():
        if source in environ:
            environ[target] = environ[source]
    return environ
