"""The batch script text of a planned job (envbuild.slurm.batch.jobplan). Pure: golden-tested per system and shape.

Every #SBATCH line has a comment above it saying why (sbatch reads #SBATCH lines until the first command,
and comment lines between them are allowed). The body is the envrun line and what the job needs around it:
SRUN_CPUS_PER_TASK where srun does not inherit --cpus-per-task, staging once per node, the requeue handler.
"""

from __future__ import annotations

from shlex import quote

from envbuild import __version__
from envbuild.shared.shelltext import comment, env_name, refuse_control, script_word
from envbuild.slurm.batch.requeue import requeue_decision, requeue_setup, requeue_wait
from envbuild.slurm.batch.staging import STAGE_SCRIPT, stage_dir_value, staged_variables

TYPE_CHECKING = False
if TYPE_CHECKING:
    from envbuild.slurm.batch.jobplan import BatchJob

# #SBATCH lines in the order course material writes them
ORDER = ("--job-name", "--account", "--partition", "--nodes", "--gpus-per-node", "--gres", "--ntasks-per-node",
         "--cpus-per-task", "--mem", "--time", "--output", "--open-mode", "--signal", "--requeue")


def shell_word(word: str, where: str = "the training command") -> str:
    """One word of the command for the script: quoted, with `{staged}` / `{staged:N}` markers turned into
    "$ENVRUN_STAGED" / "$ENVRUN_STAGED_N", expanded by the shell at run time. Nothing else is expanded:
    the program gets the word byte for byte."""
    refuse_control(word, where)
    if "{staged" not in word:
        return quote(word)
    out, rest = [], word
    while "{staged" in rest:
        before, _, after = rest.partition("{staged")
        index, close, tail = after.partition("}")
        if not close or (index and not (index.startswith(":") and index[1:].isdigit())):
            break
        variable = "ENVRUN_STAGED" if index in ("", ":1") else f"ENVRUN_STAGED_{index[1:]}"
        if before:
            out.append(quote(before))
        out.append(f'"${{{variable}}}"')
        rest = tail
    if rest:
        out.append(quote(rest))
    return "".join(out)


# sbatch's #SBATCH reader splits at blanks, takes quotes ' and " and a backslash escape anywhere, and stops
# at an unquoted # (src/sbatch/opt.c, _get_argument; envbuild.slurm.check.parse reads them the same way).
_DIRECTIVE_SPECIAL = frozenset(" \t\"'\\#")


def directive_value(value: str) -> str:
    """A value as sbatch reads it back from an #SBATCH line: bare when plain, else in double quotes with
    backslash and double quote escaped (sbatch honours a backslash inside quotes too)."""
    if value and not _DIRECTIVE_SPECIAL.intersection(value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def directive_line(option: str) -> str:
    """`#SBATCH --name=value` with the value quoted for sbatch; the option name is envrun's own."""
    name, equals, value = option.partition("=")
    refuse_control(value, name)
    return f"#SBATCH {name}{equals}{directive_value(value) if equals else ''}"


def render_script(job: BatchJob) -> str:
    lines = header(job)
    lines += directives(job)
    lines.append("")
    lines += [comment(f"warning: {line}") for line in job.warnings]
    for target, source, why in job.srun_env:
        target, source = env_name(target, "launch.srun_env_from"), env_name(source, f"launch.srun_env_from.{target}")
        lines += [comment(f"srun does not inherit the job's --cpus-per-task by itself ({why})"),
                  f'export {target}="${{{target}:-${source}}}"']
    if job.request.stages:
        lines += stage_lines(job)
    if job.request.requeue:
        lines += requeue_setup(job.request.requeue, job.request.envrun)
    lines += [*([""] if lines[-1] else []), "# The training step. envrun reads this job's allocation at run time and (envrun --explain):"]
    lines += [comment(f"  {reason}") for reason in job.explain]
    step = " ".join(step_words(job))
    cleanup = job.staging is not None and job.staging.cleanup
    if job.request.requeue:
        lines += requeue_wait(step)
        if cleanup:
            lines += cleanup_lines()
        lines += [*requeue_decision(), 'exit "$status"']
    elif job.request.time_step:
        lines += [*timed_step(step), *(cleanup_lines() if cleanup else []), 'exit "$status"']
    elif cleanup:
        lines += [step, "status=$?", *cleanup_lines(), 'exit "$status"']
    else:
        lines.append(step)
    return "\n".join(lines) + "\n"


def step_words(job: BatchJob) -> list[str]:
    """envrun, its options, srun and the training step, as script words (each option's value is literal;
    the staging directory is the one word the shell expands)."""
    words = [script_word(job.request.envrun, "envrun's path")]
    words += [script_word(word, "envrun's options (--image, --overlay)") for word in job.envrun_options]
    if job.request.stages:
        words += ["--bind", '"$ENVRUN_STAGE_DIR"']
    return [*words, "srun", *(shell_word(word) for word in job.step)]


STEP_LINE = "envrun-step:"


def timed_step(step: str) -> list[str]:
    """The step between two clock readings, then one `envrun-step: wall_ms=N exit=S` line in the job's output:
    the step's wall time without the queue wait and the batch shell's start (no accounting is needed, which
    sacct would be; the test cluster runs without it). date +%s%N: nanoseconds, GNU coreutils."""
    return ["envrun_step_start=$(date +%s%N)", step, "status=$?",
            f'echo "{STEP_LINE} wall_ms=$(( ($(date +%s%N) - envrun_step_start) / 1000000 )) exit=$status"']


def header(job: BatchJob) -> list[str]:
    res = job.resources
    gpus = f" x {res.gpus_per_node} GPUs" if res.gpus_per_node else ""
    return [
        "#!/bin/bash",
        comment(f"{job.job_name}: {res.nodes} {job.recipe.name} node(s){gpus}, launcher {job.request.job.launcher}. "
                f"Written by envrun sbatch (envbuild {__version__})."),
        *([comment(f"again: {job.request.regenerate}")] if job.request.regenerate else []),
        "# check a hand edit: envrun sbatch --check THIS_FILE",
    ]


def directives(job: BatchJob) -> list[str]:
    res, request = job.resources, job.request
    found = [(d.option, d.why) for d in res.directives]
    found.append((f"--job-name={job.job_name}", "what squeue shows: the script's name"))
    found.append((f"--nodes={res.nodes}", f"--nodes {res.nodes}" if res.nodes > 1 else "one node (--nodes)"))
    found.append((f"--output={request.output}", "%x: the job name, %j: the job id; relative to the submit directory"))
    if request.requeue:
        rq = request.requeue
        found.append((f"--signal=B:{rq.signal}@{rq.grace_s}",
                      f"Slurm sends {rq.signal} to this script {rq.grace_s} s before the time limit (B: the batch "
                      "shell only; envrun passes it on to the ranks)"))
        found.append(("--requeue", "the job may be put back in the queue (scontrol requeue) after a checkpoint"))
        found.append(("--open-mode=append", "a requeued run appends to the same output file"))
    found.sort(key=lambda item: _rank(item[0]))
    lines = []
    for option, why in found:
        lines += [comment(why), directive_line(option)]
    return lines


def _rank(option: str) -> int:
    name = option.split("=", 1)[0]
    return ORDER.index(name) if name in ORDER else len(ORDER)


def stage_lines(job: BatchJob) -> list[str]:
    staging = job.staging
    assert staging is not None
    sources = job.request.stages
    lines = ["", comment(f"--stage: once per node, to node-local storage ({job.recipe.cite('batch.staging.dir')})")]
    if staging.in_memory:
        lines.append(comment(f"{staging.dir.split('/')[1] if '/' in staging.dir else staging.dir} is RAM there: "
                             "staged data counts against the job's memory"))
    lines.append(f"export ENVRUN_STAGE_DIR={stage_dir_value(staging.dir, job.recipe.cite('batch.staging.dir'))}")
    for variable, value in staged_variables(sources):
        lines.append(f"export {variable}={value}")
    words = []
    for source in sources:
        size = f"{source.size_gb:.2f} GB" + (" (estimated)" if source.estimated else "")
        lines.append(comment(f"  {source.path} ({source.kind}, {size}) -> $ENVRUN_STAGE_DIR/{source.name}"))
        words += [quote(source.kind), script_word(source.path, "--stage"), script_word(source.name, f"--stage {source.path}")]
    lines += [
        "stage_script=" + quote(STAGE_SCRIPT.strip()),
        'srun --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --kill-on-bad-exit=1 /bin/sh -c "$stage_script" '
        'envrun-stage "$ENVRUN_STAGE_DIR" ' + " ".join(words) + " || { echo 'envrun: staging failed' >&2; exit 1; }",
    ]
    return lines


def cleanup_lines() -> list[str]:
    return ["# remove the staged data: nothing else frees this node-local storage",
            'srun --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 rm -rf "$ENVRUN_STAGE_DIR" || true']
