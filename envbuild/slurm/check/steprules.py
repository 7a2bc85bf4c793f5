"""`envrun sbatch --check` rules on how the job starts its processes (srun lines, with the job's #SBATCH
options where srun does not override them): per-task GPU options a site forbids, a per-task launch whose tasks
do not match the GPUs, torchrun started several times per node or on one node of many, srun options the site's
srun does not inherit, fixed core masks on shared nodes, a task's own variables ($SLURM_NODEID) that the batch
shell expands on an srun line or exports as RANK-like variables for every task to inherit. One function per rule,
`(Context) -> list[Finding]`."""

from __future__ import annotations

import functools
import os
import re

from envbuild.launch.allocation import count_gpus
from envbuild.launch.args import has_option, option_value
from envbuild.slurm.check.parse import srun_options
from envbuild.slurm.check.rulebase import SBATCH_DOC, SRUN_DOC, TORCHRUN_DOC, Context, Finding, newer_slurm_option
from envbuild.slurm.check.shape import StepShape, count

TYPE_CHECKING = False
if TYPE_CHECKING:
    from envbuild.slurm.check.parse import BatchScript, SrunLine


def _unless_given(unless: str | None, options: tuple[str, ...]) -> bool:
    if not unless:
        return False
    name, _, value = unless.partition("=")
    given = option_value(options, name)
    return unless in options or (given is not None and (not value or value in given.split(",")))


def forbidden_options(ctx: Context) -> list[Finding]:
    """Options the site forbids (LUMI-G: --gpus-per-task, --ntasks-per-gpu, --cpus-per-gpu break RCCL), in
    #SBATCH or srun lines, unless their `unless` option is given too. Only where more than one task runs on a
    node: per-task GPU cgroups hide a node's other GPUs from each task, and a single task has no others."""
    found: list[Finding] = []
    if ctx.cpu_partition():
        return found
    job_words = tuple(f"--{d.name}" if d.value is None else f"--{d.name}={d.value}" for d in ctx.script.directives)
    for index, rule in enumerate(ctx.site.launch.forbidden_srun_options):
        source = ctx.site.cite(f"launch.forbidden_srun_options.{index}")
        # `unless` is an srun option; one that sbatch refuses (allow-task-sharing) does not cover the job in
        # #SBATCH (the srun_option_in_sbatch rule says so), and one this cluster's Slurm lacks is no way out
        entry = newer_slurm_option(rule.unless) if rule.unless else None
        job_safe = _unless_given(rule.unless, job_words) and not (entry is not None and entry.srun_only)
        unless = None if entry is not None and ctx.too_old_for(entry) else rule.unless
        job_tasks = _job_tasks_per_node(ctx)
        # a job-wide option harms only the steps that run several tasks per node without `unless` (LUMI's 2026
        # form passes --gres-flags=allow-task-sharing to srun, where Slurm reads it)
        shared_steps = [srun for srun, step in ctx.steps() if (step.tasks_per_node() or 2) > 1]
        steps_safe = bool(shared_steps) and all(_unless_given(rule.unless, srun.options) for srun in shared_steps)
        unsafe_steps = [srun for srun in shared_steps if not _unless_given(rule.unless, srun.options)]
        for directive in ctx.script.directives:
            option = f"--{directive.name}"
            if option in rule.options and not job_safe and not steps_safe and (job_tasks is None or job_tasks > 1):
                fix = _forbidden_fix(ctx, option, directive.value, ctx.job.tasks_per_node() or 1, unless,
                                     [srun.line for srun in unsafe_steps])
                # the job-wide option is safe once every step of several tasks per node passes `unless`: one
                # edit makes it so where one step lacks it
                edit = _srun_edit(ctx, unsafe_steps[0], unless) if unless and len(unsafe_steps) == 1 else None
                found.append(Finding(directive.line, _forbidden_what(ctx, directive.written, rule.unless), rule.why,
                                     source, fix, edit))
        for srun, step in ctx.steps():
            for option in rule.options:
                tasks = step.tasks_per_node()
                if has_option(srun.options, option) and not (job_safe or _unless_given(rule.unless, srun.options)) \
                        and (tasks is None or tasks > 1):
                    value = option_value(srun.options, option)
                    written = f"srun {option}" + (f"={value}" if value is not None else "")
                    fix = _forbidden_fix(ctx, option, value, step.tasks_per_node() or 1, unless, [srun.line])
                    edit = _srun_edit(ctx, srun, unless) if unless else None
                    found.append(Finding(srun.line, _forbidden_what(ctx, written, rule.unless), rule.why, source, fix,
                                         edit))
    return found


def _job_tasks_per_node(ctx: Context) -> int | None:
    """The job's tasks per node (--ntasks-per-gpu x GPUs counted); 1 when nothing says more; None: unknown."""
    per_gpu = ctx.job.get("ntasks-per-gpu")
    if per_gpu is not None:
        number = count(per_gpu.value)
        return number * max(1, ctx.job.gpus_per_node()) if number is not None else None
    tasks = ctx.job.tasks_per_node()
    if tasks is None and ctx.job.tasks_directive() is not None:
        return None
    return tasks or 1


def _forbidden_what(ctx: Context, written: str, unless: str | None) -> str:
    return f"{written}: {ctx.name} forbids this option" + (f" without {unless}" if unless else "")


def _forbidden_fix(ctx: Context, option: str, value: str | None, tasks: int, unless: str | None,
                   srun_lines: list[int]) -> str:
    gpus = ctx.job.gpus_per_node()
    select = " ".join(f"{name}=${source}" for name, source in ctx.site.launch.per_task_gpu_env.items())
    in_task = f", and select each task's GPU with {select} in the task" if select else ""
    if option == "--gpus-per-task":
        per_task = count_gpus(value or "1") or 1
        fix = f"{ctx.gpu_request(tasks * per_task)} (the GPUs per node) instead{in_task}"
    elif option == "--ntasks-per-gpu" and gpus:
        fix = f"--ntasks-per-node={(count(value) or 1) * gpus} with {ctx.gpu_request(gpus)} instead{in_task}"
    elif option == "--cpus-per-gpu":
        fix = f"--cpus-per-task={value} instead (one task per GPU)" if value else "--cpus-per-task instead"
    else:
        fix = f"leave out {option}"
    if not unless:
        return fix
    where = ""
    if srun_lines:
        where = f" to the srun line{'s' if len(srun_lines) > 1 else ''} {', '.join(map(str, srun_lines))}"
    return fix + f"; or add {unless}{where} (an srun option: Slurm reads it for the step)"


def per_task_launch(ctx: Context) -> list[Finding]:
    """`srun python ...` (one training process per task) whose tasks per node differ from its GPUs per node.
    Only where the job runs several processes (more than one task, or more than one node): each is then one
    rank with one GPU. A single process on a single node may drive every GPU itself (DataParallel, a model
    spread over the GPUs); what it does is not known from the script."""
    found: list[Finding] = []
    node = ctx.node
    if (node is not None and not node.gpus) or ctx.cpu_partition():
        return found  # GPUs on a system without any: the GPU rule says so
    for srun, step in ctx.steps():
        if srun.program.kind != "python":
            continue
        gpus = step.gpus_per_node()
        if srun.under_envrun and not _sets_tasks(srun) and ctx.job.tasks_directive() is None:
            continue  # envrun starts one task per GPU itself
        tasks = step.tasks_per_node()
        if not gpus or tasks is None or tasks == gpus or (tasks == 1 and (step.nodes or 1) == 1):
            continue
        effect = f"{gpus - tasks} GPU(s) idle" if tasks < gpus else "several processes on one GPU"
        where = "on the srun line" if _sets_tasks(srun) else "in #SBATCH"
        per_gpu = ctx.cpus_per_gpu() if ctx.recipe is not None else None
        fix = f"--ntasks-per-node={gpus}" + (f" --cpus-per-task={per_gpu}" if per_gpu else "") + \
            f" {where} (one task per GPU), or start torchrun: srun --ntasks-per-node=1 torchrun --nproc-per-node={gpus} ..."
        per_task_env = ctx.recipe.launch.per_task_gpu_env if ctx.recipe is not None else {}
        if per_task_env:
            name = next(iter(per_task_env))
            why = (f"each srun task is one training process and drives one GPU ({name}=${per_task_env[name]} on "
                   f"{ctx.name})")
            source = ctx.site.cite(f"launch.per_task_gpu_env.{name}")
        else:
            why = "srun starts the program once per task, and each training process drives one GPU"
            source = SRUN_DOC
        # What the script does inside is not seen: a Python file may start one process per GPU itself
        # (torch.multiprocessing.spawn, a launcher of its own such as deepy_torchrun.py): said as a condition.
        from envbuild.launch.visibility import program_file_index

        at = program_file_index(srun.program.words)
        unless = f", unless {srun.program.words[at].rsplit('/', 1)[-1]} starts one process per GPU itself" \
            if at is not None and tasks < gpus else ""
        found.append(Finding(srun.line, f"srun starts {tasks} {srun.program.name} process(es) per node for {gpus} "
                             f"GPU{'s' if gpus != 1 else ''} per node ({effect}{unless})", why, source, fix))
    return found


def _sets_tasks(srun: SrunLine) -> bool:
    return has_option(srun.options, "-n", "--ntasks", "--ntasks-per-node")


def launcher_tasks(ctx: Context) -> list[Finding]:
    """torchrun (or accelerate, deepspeed) under srun with more than one task per node: each copy starts its
    own --nproc-per-node processes, on the same GPUs."""
    found: list[Finding] = []
    for srun, step in ctx.steps():
        if not srun.program.per_node:
            continue
        if srun.under_envrun and not _sets_tasks(srun):
            continue  # envrun runs one launcher per node itself
        tasks = step.tasks_per_node()
        if tasks is None or tasks <= 1:
            continue
        kind = srun.program.kind
        cpus = ctx.job.cpus()
        total = cpus.value if cpus else 0
        node = ctx.node
        if node is not None and total:  # never suggest more than a node gives jobs
            total = min(total, node.usable * node.slurm_cpus_per_core)
        per_node = f" --cpus-per-task={total}" if total > 1 else ""
        where = "on the srun line" if _sets_tasks(srun) else "in #SBATCH (or on the srun line)"
        edit = _srun_edit(ctx, srun, "--ntasks-per-node=1" + per_node, drop=("--ntasks",))
        found.append(Finding(
            srun.line, f"srun starts {kind} {tasks} times per node",
            f"{kind} starts its own training processes on each node (--nproc-per-node); {tasks} copies per node "
            f"start {tasks}x as many, with the same local ranks on the same GPUs", TORCHRUN_DOC,
            f"--ntasks-per-node=1{per_node} {where}: one {kind} per node", edit))
    return found


def _srun_edit(ctx: Context, srun: SrunLine, options: str, drop: tuple[str, ...] = ()) -> tuple[int, str] | None:
    """The srun line with `options` right after `srun`, and its own options of those names (and `drop`)
    taken out; None where the line goes on (a backslash) or an option to take out is written as two words."""
    lines = ctx.script.lines
    line = lines[srun.line - 1] if srun.line <= len(lines) else ""
    if line.rstrip().endswith("\\"):
        return None
    names = {word.split("=", 1)[0] for word in options.split()} | set(drop)
    new = line
    for word in srun.written:
        if not word.startswith("-"):
            continue
        (canonical, *_rest) = srun_options((word,))
        name, _eq, value = canonical.partition("=")
        if name not in names:
            continue
        if not value or new.count(f" {word}") != 1:
            return None  # `-n 8`: its value is the next word; or written twice: leave such lines to the user
        new = new.replace(f" {word}", "", 1)
    found = _SRUN_WORD.search(new)
    if found is None:
        return None
    return srun.line, f"{new[:found.end()]}{options} {new[found.end():]}"


_SRUN_WORD = re.compile(r"(?:^|[\s;&|(])srun\s")


def launcher_without_srun(ctx: Context) -> list[Finding]:
    """torchrun run by the batch script itself in a multi-node job: it starts on the first node only."""
    nodes = ctx.job.nodes
    if nodes <= 1:
        return []
    found: list[Finding] = []
    for command in ctx.script.commands:
        if not command.program.per_node:
            continue
        options = "--ntasks-per-node=1"
        if ctx.recipe is not None and "SRUN_CPUS_PER_TASK" in ctx.recipe.launch.srun_env_from and \
                ctx.job.get("cpus-per-task") is not None:
            options += " --cpus-per-task=${SLURM_CPUS_PER_TASK}"  # this site's srun does not take it from the job
        line = ctx.script.lines[command.line - 1] if command.line <= len(ctx.script.lines) else ""
        indent = line[:len(line) - len(line.lstrip())]
        edit = (command.line, f"{indent}srun {options} {line.lstrip()}") if not line.rstrip().endswith("\\") and \
            line.strip() and not line.lstrip().startswith(("if ", "then ", "do ", "(", "{")) else None
        found.append(Finding(command.line, f"{command.program.kind} without srun runs on the first of the job's {nodes} "
                             "nodes only", "the batch script runs on the first node of the allocation; only srun starts "
                             "tasks on the others", SBATCH_DOC, f"srun {options} {command.program.kind} ... (one per "
                             "node)", edit))
    return found


# srun and the job's --cpus-per-task, by Slurm release (SchedMD's release notes, RELEASE_NOTES of each tag in
# https://github.com/SchedMD/slurm, and CHANGELOG/slurm-22.05.md, slurm-23.11.md there):
# - 22.05.0: "srun will no longer read in SLURM_CPUS_PER_TASK ... set the new SRUN_CPUS_PER_TASK env var";
# - 23.11.0: "Replace SRUN_CPUS_PER_TASK with SLURM_CPUS_PER_TASK and get back to the behavior before Slurm 22.05"
#   (srun reads SLURM_CPUS_PER_TASK again, and no longer SRUN_CPUS_PER_TASK).
# So srun steps lose the job's --cpus-per-task in releases 22.05 to 23.02 only.
SRUN_IGNORES_JOB_CPUS = ((22, 5), (23, 11))  # [from, to): the releases where srun does not inherit it
SRUN_RELEASE_NOTES = ("SchedMD Slurm RELEASE_NOTES 22.05 and 23.11, "
                      "https://github.com/SchedMD/slurm/blob/slurm-23-11-0-1/RELEASE_NOTES")


def _slurm_release(ctx: Context) -> tuple[tuple[int, int] | None, str, str]:
    """The Slurm release the job runs under, as written, and where that comes from: the cluster the check runs
    on (scontrol --version, now); (None, "", "") where it is not known."""
    cluster = ctx.cluster
    if cluster is not None and cluster.release() is not None:
        return cluster.release(), cluster.slurm_version, cluster.version_source
    return None, "", ""


def srun_inherits(ctx: Context) -> list[Finding]:
    """srun lines of more than one task per node that neither pass the job's --cpus-per-task (> 1) nor follow
    `export SRUN_CPUS_PER_TASK`, where srun does not inherit it: Slurm 22.05 to 23.02 (SRUN_IGNORES_JOB_CPUS). With the cluster's release
    known (the check runs on it) the finding is a fact, and nothing is said for other releases; unknown, it is
    said as a condition on the release, and only for a site whose recipe says its srun does not inherit it
    (JUWELS: launch.srun_env_from). Other `srun_env_from` entries of a recipe apply as the recipe states them.
    Reported once per option, at the first such line."""
    release, written, release_source = _slurm_release(ctx)
    targets = dict(ctx.recipe.launch.srun_env_from) if ctx.recipe is not None else {}
    if release is not None:
        if SRUN_IGNORES_JOB_CPUS[0] <= release < SRUN_IGNORES_JOB_CPUS[1]:
            targets.setdefault("SRUN_CPUS_PER_TASK", "SLURM_CPUS_PER_TASK")
        else:
            targets.pop("SRUN_CPUS_PER_TASK", None)  # this release's srun takes --cpus-per-task from the job
    found: list[Finding] = []
    for target, source_variable in targets.items():
        option = "--" + target.removeprefix("SRUN_").lower().replace("_", "-")
        given = ctx.job.get(option[2:])
        if given is None or count(given.value) in (None, 1):
            continue  # 1 is srun's default anyway; a value that is not a number is the numbers rule's
        names = (option, "-c") if option == "--cpus-per-task" else (option,)
        # a step of one task per node is not bound to one CPU: a step that is not --exact gets all the job's CPUs
        # on its nodes, and its one task may use them (as measured on the test cluster's 22.05)
        missing = [srun for srun, step in ctx.steps()
                   if not srun.under_envrun and not has_option(srun.options, *names)
                   and not ctx.script.exported_before(target, srun.line) and not srun.sets_inline(target)
                   and (target != "SRUN_CPUS_PER_TASK" or (step.tasks_per_node() or 2) > 1)]
        if not missing:
            continue
        more = f" (and {len(missing) - 1} more srun line(s))" if len(missing) > 1 else ""
        edit = _srun_edit(ctx, missing[0], f"{option}=${{{source_variable}}}") if len(missing) == 1 else None
        recipe = ctx.recipe
        site = recipe.cite(f"launch.srun_env_from.{target}") if recipe is not None and \
            target in recipe.launch.srun_env_from else ""
        fix = f'export {target}="${source_variable}" before the first srun (or srun {option}=${source_variable})'
        if target != "SRUN_CPUS_PER_TASK":
            what, why, source = (f"srun does not get the job's {given.written}{more}",
                                 f"{ctx.name}'s srun does not inherit {option} from the job", site)
        elif release is not None:
            what = f"srun does not get the job's {given.written}{more}"
            why = (f"this cluster's Slurm is {written}: srun in Slurm 22.05 to 23.02 does not inherit "
                   "--cpus-per-task from the job, and each task gets one CPU")
            source = f"{release_source}; {SRUN_RELEASE_NOTES}"
        else:
            what = f"if this cluster's Slurm is 22.05 to 23.02, srun does not get the job's {given.written}{more}"
            why = (f"{ctx.name}'s recipe says its srun does not inherit --cpus-per-task; srun in Slurm 22.05 to "
                   "23.02 does not (each task gets one CPU), earlier and later releases do; the release here was "
                   "not asked (the check runs away from the cluster)")
            source = f"{site}; {SRUN_RELEASE_NOTES}"
            fix = (f"srun {option}=${source_variable} (right on every release), or export {target}="
                   f'"${source_variable}" before the first srun (read by 22.05 to 23.02 only)')
        found.append(Finding(missing[0].line, what, why, source, fix, edit))
    return found


def core_masks_on_shared_nodes(ctx: Context) -> list[Finding]:
    """srun --cpu-bind=mask_cpu/map_cpu (a site's GPU-to-core map) on a partition that shares nodes, without
    --exclusive: the masks name cores of the whole node."""
    node = ctx.site.node
    if node is None or not node.gpu_cores or ctx.job.get("exclusive") is not None:
        return []
    shared = [name for name in ctx.partitions() if name in ctx.site.partitions and
              not ctx.site.partitions[name].full_node]
    if not shared:
        return []
    whole = [name for name, spec in ctx.site.partitions.items()
             if spec.full_node and not spec.test and not spec.cpu_only]
    partition = ctx.job.get("partition")
    found: list[Finding] = []
    for srun in ctx.script.sruns:
        bind = option_value(srun.options, "--cpu-bind") or option_value(srun.options, "--cpu_bind") or ""
        if "mask_cpu" not in bind and "map_cpu" not in bind:
            continue
        found.append(Finding(
            srun.line, f"srun --cpu-bind={bind.split(':', 1)[0]}:... on partition {shared[0]}, which shares nodes",
            "the GPU-to-core masks name cores of the whole node, and a job on a shared node holds only some of them",
            f"{ctx.site.cite('node.gpu_cores')}; {ctx.site.cite('partitions.' + shared[0])}",
            "#SBATCH --exclusive" + (f", or --partition={whole[0]} (whole nodes)" if whole else "")
            + ", or srun --cpu-bind=cores",
            ctx.add_to_directive_line(partition.line, "--exclusive") if partition is not None else None))
    return found


# The rules that need to know what a line runs: a line whose program is unknown skips them, and says so.
PROGRAM_RULES = ("launcher_tasks", "per_task_launch", "launcher_without_srun", "program_not_visible",
                 "program_missing")


def program_unknown(ctx: Context) -> list[Finding]:
    """An srun line (or a command) whose program the text does not name (`srun $CMD`, `mpirun ...`, `eval`):
    nothing is guessed about it, and this says so."""
    found: list[Finding] = []
    programs = [(srun.line, srun.program, "srun") for srun in ctx.script.sruns] + \
        [(command.line, command.program, "") for command in ctx.script.commands]
    for line, program, under in programs:
        if program.kind != "unknown":
            continue
        found.append(Finding(line, f"{under + ' ' if under else ''}{program.name}: what runs here is not known from "
                             "the script", f"{program.why}; the rules that read the program did not run for this line "
                             f"({', '.join(PROGRAM_RULES)})", SRUN_DOC if under else SBATCH_DOC,
                             "nothing to change; write the program out (srun python train.py ...) to have it checked"))
    return found


def program_not_visible(ctx: Context) -> list[Finding]:
    """The program file of a line run in a container (`srun singularity exec -B ... IMG torchrun /path/train.py`)
    outside everything the container shows: its -B binds, $SINGULARITY_BIND/$APPTAINER_BIND, $HOME, /tmp and the
    working directory. Every rank fails with "can't open file", after the queue. Only where all of those are
    known: a `cd` to a variable, a module that may set binds (LUMI's singularity-bindings) or a bind variable
    the script sets make the rule stand back. envrun lines bind the program themselves."""
    from envbuild.launch.visibility import BIND_VARIABLES, is_under, program_file_index, system_dir, visible_roots

    script, environ = ctx.script, ctx.environ
    if not environ.get("HOME") or any(name in script.exports for name in BIND_VARIABLES) or \
            any("bind" in module.lower() for _line, module in script.modules):
        return []
    found: list[Finding] = []
    lines = [(srun.line, srun.program, srun.under_envrun) for srun in script.sruns] + \
        [(command.line, command.program, False) for command in script.commands]
    for line, program, under_envrun in lines:
        if program.container is None or under_envrun or program.kind == "unknown":
            continue
        at = program_file_index(program.words)
        path = program.words[at] if at is not None else ""
        directory = script.directory_at(line)
        if not path.startswith("/") or "$" in path or system_dir(path) or directory is None:
            continue
        binds = _container_binds(program.container)
        roots = visible_roots([*binds, directory], program.container, environ)
        if any(is_under(path, root) for root in roots):
            continue
        folder = path.rsplit("/", 1)[0] or "/"
        written = next((f"{flag} {value}" for flag, value in _bind_options(program.container)), None)
        edit = ctx.replace_in_line(line, written, f"{written},{folder}") if written else None
        found.append(Finding(
            line, f"{path}: the container does not see the program file ({program.name} runs it inside "
            f"{program.via.split(',')[-1].strip()})",
            "a container sees host paths only where they are bound (-B), in $HOME, /tmp and the working directory "
            f"({directory}); every rank fails with \"can't open file\" once the job has waited in the queue",
            "apptainer(1) bind paths, https://apptainer.org/docs/user/latest/bind_paths_and_mounts.html",
            f"bind its directory: -B {folder}" + (f" (add it to {written})" if written else ""), edit))
    return found


def program_missing(ctx: Context) -> list[Finding]:
    """The program file (or a config file it names, `--config run.yaml`) of an srun line or a command that does
    not exist where the job starts: every rank fails with "can't open file" after the queue wait. Applies only
    where the check may look (the caller gives `ctx.files`: `envrun sbatch --check` run where the job would be
    submitted) and the directory is known: the script's `cd /absolute/path`, else --chdir, else where sbatch is
    run (here). A path in a container line that is absolute may be the image's own: left alone."""
    from envbuild.launch.visibility import missing_files

    probe = ctx.files
    if probe is None:
        return []
    script = ctx.script
    chdir = ctx.job.get("chdir")
    start = probe.start_dir
    if chdir is not None and chdir.value:
        if "$" in chdir.value or "%" in chdir.value:
            return []
        start = os.path.join(probe.start_dir, chdir.value)
    found: list[Finding] = []
    lines = [(srun.line, srun.program, srun.under_envrun) for srun in script.sruns] + \
        [(command.line, command.program, False) for command in script.commands]
    for line, program, under_envrun in lines:
        if program.kind in ("unknown", "other"):
            continue
        cds = [directory for at, directory in script.directories if at < line]
        if cds and cds[-1] is None:
            continue  # a `cd` to a variable or a relative path: where it lands is not known here
        base = cds[-1] if cds and cds[-1] is not None else start
        in_container = program.container is not None or under_envrun
        for written, looked in missing_files(program.words, base, probe.exists):
            if in_container and written.startswith("/"):
                continue
            where = "the script's cd" if cds else ("--chdir" if start != probe.start_dir else
                                                   "the directory sbatch is run from, taken to be here")
            found.append(Finding(
                line, f"{written}: no such file where the job starts (looked at {looked}, from {where})",
                f"{program.name} opens it at once: every rank fails with \"can't open file\" or \"No such file\", "
                "after the job has waited in the queue", SBATCH_DOC,
                "fix the name or the path, or submit from the directory that holds it (the job starts where sbatch "
                "is run, or at --chdir)"))
    return found


APPTAINER_GPU_DOC = "Apptainer GPU support, https://apptainer.org/docs/user/latest/gpu.html"


def container_without_gpu_flag(ctx: Context) -> list[Finding]:
    """Applies on a site whose GPUs are NVIDIA's (its recipe says so) to a job that asks for GPUs: a line that
    runs `singularity|apptainer exec|run` without --nv (or --nvccli) sees no GPU driver inside the container,
    and the program runs on the CPU or fails to find CUDA. (AMD GPUs are seen through /dev, which the runtime
    binds by default, with the ROCm of the image: no flag is needed there, so the rule does not apply.)"""
    node = ctx.node
    if node is None or node.gpu_vendor != "nvidia" or not ctx.job.gpus_per_node():
        return []
    found: list[Finding] = []
    lines = [(srun.line, srun.program) for srun in ctx.script.sruns] + \
        [(command.line, command.program) for command in ctx.script.commands]
    for line, program in lines:
        if program.container is None or any(word in ("--nv", "--nvccli") for word in program.container):
            continue
        runtime = next((part.strip() for part in reversed(program.via.split(",")) if "exec" in part or "run" in part),
                       "the container")
        found.append(Finding(line, f"{runtime} without --nv in a GPU job: the container sees no NVIDIA driver",
                             f"{ctx.name}'s GPUs are NVIDIA's; Apptainer and Singularity bind the host's driver "
                             "libraries into the container only with --nv", APPTAINER_GPU_DOC,
                             f"add --nv: {runtime} --nv ..."))
    return found


def signal_without_trap(ctx: Context) -> list[Finding]:
    """Applies to a job whose --signal sends the signal to the batch shell (`B:`): a script that sets no `trap`
    for it is ended by it (SIGUSR1's and SIGTERM's default action), or ignores it, and the step never gets the
    signal it was meant to forward; the checkpoint the signal was asked for is never written."""
    directive = ctx.job.get("signal")
    if directive is None or not directive.value or not directive.value.upper().startswith(("B:", "RB:", "BR:")):
        return []
    signal = directive.value.split(":", 1)[1].split("@", 1)[0].upper().removeprefix("SIG")
    traps = [line for line in ctx.script.lines if line.lstrip().startswith("trap ")]
    if any(signal in line.upper() or (signal.isdigit() and signal in line) for line in traps):
        return []
    return [Finding(directive.line, f"{directive.written}: the batch shell gets SIG{signal}, and the script sets no "
                    f"trap for it", f"B: sends the signal to the batch shell only; without `trap ... {signal}` its "
                    "default action ends the script and the running step, so the program never checkpoints",
                    SBATCH_DOC, f"trap 'kill -{signal} $STEP_PID' {signal} before the step, and run the step in the "
                    "background with `srun ... & STEP_PID=$!; wait`; or leave out B: to signal the step itself")]


def _bind_options(options: tuple[str, ...]) -> list[tuple[str, str]]:
    """The container's bind options as written: (flag, value), for `-B X`, `--bind X` and `--bind=X`."""
    found: list[tuple[str, str]] = []
    for index, word in enumerate(options):
        if word in ("-B", "--bind") and index + 1 < len(options):
            found.append((word, options[index + 1]))
        elif word.startswith("--bind="):
            found.append(("--bind=", word.split("=", 1)[1]))
    return found


def _container_binds(options: tuple[str, ...]) -> list[str]:
    return [spec.strip() for _flag, value in _bind_options(options) for spec in value.split(",") if spec.strip()]


# srun sets these in each task (srun(1) OUTPUT ENVIRONMENT VARIABLES); the batch shell has its own, task 0 on the
# first node (sbatch(1) OUTPUT ENVIRONMENT VARIABLES): the step's value of each, and what differs when it is
# expanded too early
_TASK_VARIABLES = {
    "SLURM_NODEID": ("the node's index in the step", "node"),
    "SLURM_PROCID": ("the task's rank", "task"),
    "SLURM_LOCALID": ("the task's index on its node", "task"),
}
_TASK_VARIABLE = re.compile(r"\$\{?(SLURM_(?:NODEID|PROCID|LOCALID))\b")
_SRUN_COMMAND_WORD = re.compile(r"(?:[^\s;&|()'\"]*/)?srun(?=\s|$)")
_SIMPLE_LINE = re.compile(r"[^'\"\\#;&|<>()`]*")


# a variable of the batch shell that holds task 0's value: (the task variables it comes from, the line that set it,
# its value as a task would compute it, exported)
TaskValue = tuple[tuple[str, ...], int, str, bool]
_TASK_VARIABLE_NAME = re.compile(r"\b(SLURM_(?:NODEID|PROCID|LOCALID))\b")
_REFERENCES = re.compile(r"\$\{?([A-Za-z_]\w*)")


def _task_sources(value: str, fixed: dict[str, TaskValue]) -> tuple[tuple[str, ...], str] | None:
    """The task variables a value the batch shell expands comes from ($SLURM_PROCID, ${SLURM_LOCALID:-0},
    $((SLURM_NODEID * 4 + SLURM_LOCALID)), or a variable in `fixed`), and the value as each task would compute
    it; None: none."""
    if "$" not in value:
        return None
    direct = _TASK_VARIABLE_NAME.findall(value)
    if direct:
        return tuple(dict.fromkeys(direct)), value
    for reference in _REFERENCES.findall(value):
        if reference in fixed:
            sources, _line, expression, _exported = fixed[reference]
            whole = value in (f"${reference}", f"${{{reference}}}")
            return sources, expression if whole else f"${sources[0]}"
    return None


def _fixed_task_variables(script: BatchScript) -> dict[int, dict[str, TaskValue]]:
    """For each srun line, the batch shell's own variables set from a task variable before it
    (`NODE_RANK=$SLURM_NODEID`, `export RANK=${SLURM_PROCID} LOCAL_RANK=$SLURM_LOCALID`, and variables set from
    those), and whether each is exported there (export, declare -x, or set after `export NAME`; not after
    `export -n` or `unset`). The batch shell gives each the value of task 0 once; every task then sees that value.
    Read from the parsed commands (a here-document's text is no command of the batch shell), in one pass over
    them, whatever the number of srun lines."""
    fixed: dict[str, TaskValue] = {}
    exported: set[str] = set()
    at_srun: dict[int, dict[str, TaskValue]] = {}
    sruns = sorted(srun.line for srun in script.sruns)
    next_srun = 0
    for assignment in [*script.assignments, None]:
        until = assignment.line if assignment is not None else None
        while next_srun < len(sruns) and (until is None or sruns[next_srun] < until):
            at_srun[sruns[next_srun]] = {name: (*value[:3], name in exported) for name, value in fixed.items()}
            next_srun += 1
        if assignment is None:
            break
        line, name, value, expands, how = assignment
        if how == "unset":
            fixed.pop(name, None)
            exported.discard(name)
            continue
        if how == "unexport":
            exported.discard(name)
            continue
        if how == "export":
            exported.add(name)
        if value is None:
            continue
        found = _task_sources(value, fixed) if expands else None
        if found is not None:
            fixed[name] = (found[0], line, found[1], False)  # exported or not: read from `exported` at each srun
        else:
            fixed.pop(name, None)  # set again from something else, or single-quoted text
    return at_srun


@functools.lru_cache(maxsize=64)
def _task_variable_pattern(names: tuple[str, ...]) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(name) for name in names)
    return re.compile(r"\$\{?(SLURM_(?:NODEID|PROCID|LOCALID)|" + alternatives + r")\b")


def _expanded_task_variables(lines: list[str], first: int, fixed: dict[str, tuple[str, int, bool]] | None = None) \
        -> list[tuple[int, int, str, bool]]:
    """Where the batch shell expands $SLURM_NODEID, $SLURM_PROCID or $SLURM_LOCALID in the srun command that starts
    on line `first`: (line, column of the `$`, variable, inside double quotes), read as bash quotes (not in single
    quotes, not after a backslash), through continuations and open quotes, in the part of the line (between ; & |)
    that holds the srun word. $(...) is read as plain text. With `fixed` (_fixed_task_variables), also its
    variables: where the batch shell expands them, and where an exported one is read by the tasks (in single
    quotes too), since every task has task 0's value."""
    fixed = fixed or {}
    pattern = _task_variable_pattern(tuple(fixed)) if fixed else _TASK_VARIABLE
    found: list[tuple[int, int, str, bool]] = []
    single = double = seen_srun = False
    index = first - 1
    while index < len(lines):
        text, column, continued = lines[index], 0, False
        while column < len(text):
            char = text[column]
            if single:
                single = char != "'"
                if char == "$" and (match := pattern.match(text, column)) and match.group(1) in fixed and \
                        fixed[match.group(1)][2]:
                    found.append((index + 1, column, match.group(1), False))
            elif char == "\\":
                continued = column == len(text) - 1
                column += 2
                continue
            elif char == "'" and not double:
                single = True
            elif char == '"':
                double = not double
            elif double:
                if char == "$" and (match := pattern.match(text, column)):
                    found.append((index + 1, column, match.group(1), True))
            elif char == "#" and (column == 0 or text[column - 1] in " \t"):
                break
            elif char in ";&|":
                if seen_srun:
                    return found
                found = []
            elif char == "$" and (match := pattern.match(text, column)):
                found.append((index + 1, column, match.group(1), False))
            elif (column == 0 or text[column - 1] in " \t;&|(") and _SRUN_COMMAND_WORD.match(text, column):
                seen_srun = True
            column += 1
        if not (single or double or continued):
            break
        index += 1
    return found if seen_srun else []


def task_variables_in_batch_shell(ctx: Context) -> list[Finding]:
    """$SLURM_NODEID, $SLURM_PROCID or $SLURM_LOCALID written where the batch shell expands it on an srun line
    (`srun accelerate launch --machine_rank $SLURM_NODEID`, `srun bash -c "torchrun --node_rank=$SLURM_NODEID"`):
    the batch shell runs as task 0 on the first node and expands it once, before srun starts the tasks, so every
    node or task gets 0. Only where the step has more than one node (NODEID), task (PROCID) or task per node
    (LOCALID); a count that is not known counts as more. Reported once per srun line."""
    found: list[Finding] = []
    values_at = _fixed_task_variables(ctx.script)
    for srun, step in ctx.steps():
        values = values_at.get(srun.line, {})
        fixed = {name: (sources[0], line, exported) for name, (sources, line, _value, exported) in values.items()}
        places = _expanded_task_variables(ctx.script.lines, srun.line, fixed)
        tasks, nodes = step.tasks_per_node(), step.nodes
        several = {"SLURM_NODEID": nodes is None or nodes > 1,
                   "SLURM_LOCALID": tasks is None or tasks > 1,
                   "SLURM_PROCID": tasks is None or nodes is None or tasks * nodes > 1}
        places = [place for place in places if any(several[source] for source in
                                                   (values[place[2]][0] if place[2] in values else (place[2],)))]
        if not places:
            continue
        direct = [place for place in places if place[2] not in fixed]
        if not direct:
            names = list(dict.fromkeys(place[2] for place in places))
            task_variable, set_at, _exported = fixed[names[0]]
            meaning, unit = _TASK_VARIABLES[task_variable]
            listed = ", ".join(f"${name}" for name in names)
            found.append(Finding(
                srun.line, f"{listed} on the srun line {'holds' if len(names) == 1 else 'hold'} ${task_variable} as the "
                f"batch shell read it at line {set_at}, once: every {unit} gets 0"
                + (", so every node claims rank 0" if task_variable == "SLURM_NODEID" else ""),
                f"the batch script runs as task 0 on the first node, where ${task_variable} is 0, and set "
                f"${names[0]} from it before srun started the tasks; srun sets ${task_variable} in each task "
                f"({meaning})", f"{SRUN_DOC} and {SBATCH_DOC}, OUTPUT ENVIRONMENT VARIABLES",
                f"set it in each task: srun ... bash -c '{names[0]}=${task_variable}; ...' (single quotes), or use "
                f"${task_variable} there directly"))
            continue
        places = direct
        names = list(dict.fromkeys(place[2] for place in places))
        first = names[0]
        meaning, unit = _TASK_VARIABLES[first]
        listed = ", ".join(f"${name}" for name in names)
        what = (f"{listed} on the srun line {'is' if len(names) == 1 else 'are'} expanded by the batch shell, once: "
                f"every {unit} gets 0" + (", so every node claims rank 0" if first == "SLURM_NODEID" else ""))
        why = (f"the batch script runs as task 0 on the first node, where ${first} is 0; srun sets it in each task "
               f"({meaning}), but the words of its command line were expanded before it started them")
        fix = (f"let each task expand it: srun ... bash -c '... ${first} ...' (single quotes), or \\${first} inside "
               "a double-quoted bash -c string or in a wrapper script the batch script writes with an unquoted "
               "here-document")
        found.append(Finding(srun.line, what, why, f"{SRUN_DOC} and {SBATCH_DOC}, OUTPUT ENVIRONMENT VARIABLES", fix,
                             _task_variable_edit(ctx, srun, places)))
    return found


def _task_variable_edit(ctx: Context, srun: SrunLine, places: list[tuple[int, int, str, bool]]) \
        -> tuple[int, str] | None:
    """One line's new text that leaves the variables to each task: `\\$` before each inside a bash -c string in
    double quotes; or, for a line of plain words, the program wrapped in bash -c "..." with `\\$` before each."""
    lines = ctx.script.lines
    line = places[0][0]
    if any(place[0] != line for place in places):
        return None
    text = lines[line - 1]
    if all(in_double for *_rest, in_double in places):
        if "-c" not in srun.program.via.split(", ")[-1].split():
            return None  # a double-quoted argument of another program: escaping would hand it the text $NAME
        for _line, column, _name, _double in sorted(places, key=lambda place: -place[1]):
            text = text[:column] + "\\" + text[column:]
        return line, text
    if line != srun.line or any(in_double for *_rest, in_double in places) or not _SIMPLE_LINE.fullmatch(text):
        return None
    tokens = list(re.finditer(r"\S+", text))
    start = len(srun.prefix) + 1 + len(srun.written)
    if [token.group(0) for token in tokens] != list(srun.words) or start >= len(tokens) or \
            tuple(srun.words[len(srun.prefix) + 1:start]) != srun.written or places[0][1] < tokens[start].start():
        return None  # a variable in srun's own options or before srun: bash -c around the program does not help
    program = _TASK_VARIABLE.sub(lambda match: "\\" + match.group(0), text[tokens[start].start():].rstrip())
    return line, f'{text[:tokens[start].start()]}bash -c "{program}"'


# Variables that launch frameworks read from the environment for a process's place in the job (and that torchrun
# sets in each worker it starts): who reads each, and where that is documented
TORCH_ENV_DOC = ("torch.distributed, Environment variable initialization, "
                 "https://docs.pytorch.org/docs/stable/distributed.html#environment-variable-initialization")
TORCHRUN_ENV_DOC = "torchrun, Environment Variables, https://docs.pytorch.org/docs/stable/elastic/run.html#environment-variables"
LIGHTNING_ENV_DOC = ("Lightning's LightningEnvironment, https://lightning.ai/docs/pytorch/stable/api/"
                     "lightning.pytorch.plugins.environments.LightningEnvironment.html")
_RANK_VARIABLES = {
    "RANK": ("torch.distributed's env:// init", (TORCH_ENV_DOC, TORCHRUN_ENV_DOC)),
    "LOCAL_RANK": ("scripts written for torchrun, Lightning", (TORCHRUN_ENV_DOC, LIGHTNING_ENV_DOC)),
    "NODE_RANK": ("Lightning", (LIGHTNING_ENV_DOC,)),
    "GROUP_RANK": ("Lightning, scripts written for torchrun", (TORCHRUN_ENV_DOC, LIGHTNING_ENV_DOC)),
}
# Apptainer and Singularity set NAME in the container from APPTAINERENV_NAME / SINGULARITYENV_NAME, also with
# --cleanenv; --cleanenv (-e) and --containall (-C) keep the rest of the host's environment out
_CONTAINER_ENV_PREFIXES = ("APPTAINERENV_", "SINGULARITYENV_")
_CLEAN_ENVIRONMENT = ("-e", "--cleanenv", "-C", "--containall")
_PROGRAM_SCRIPT = re.compile(r"(?:^|/)[^/]*(?:\.(?:sh|bash)|/[^/]*)$")


def _rank_name(name: str) -> str | None:
    """The variable of _RANK_VARIABLES that `name` gives the program: itself, or its APPTAINERENV_ form."""
    for prefix in _CONTAINER_ENV_PREFIXES:
        name = name.removeprefix(prefix)
    return name if name in _RANK_VARIABLES else None


def _passes_environment(ctx: Context, srun: SrunLine) -> tuple[bool, frozenset[str]]:
    """Which of the batch shell's variables srun passes to the tasks: (all, the names listed). srun's --export
    (also from SLURM_EXPORT_ENV the script exports), else the job's, which steps inherit (sbatch(1) --export:
    "To avoid steps inheriting environment export settings (e.g. NONE) from sbatch command" ...); ALL without."""
    value = option_value(srun.options, "--export")
    if value is None:
        value = ctx.job.value("export")
    if value is None:
        return True, frozenset()
    items = [item.strip() for item in value.split(",") if item.strip()]
    if any(item.upper() == "ALL" for item in items) or "$" in value:
        return True, frozenset()  # a list the job builds when it runs: taken to pass them, as by default
    return False, frozenset(item for item in items if "=" not in item and item.upper() not in ("NONE", "NIL"))


def _step_wrapper(srun: SrunLine) -> str | None:
    """A script between srun and the program that the check cannot read (`./select_gpu python ...`, `srun
    ./run_rank.sh`, `srun bash job_step.sh`, `srun $CMD`): its name; it may set the variables for each task."""
    program = srun.program
    for part in program.via.split(", "):
        first = part.split(" ", 1)[0]
        if "/" in first or first.endswith((".sh", ".bash")):
            return first.rsplit("/", 1)[-1]
    words = program.words
    if program.kind == "unknown":
        return program.name
    if program.kind != "other" or not words:
        return None
    first = words[0].rsplit("/", 1)[-1]
    if first in ("bash", "sh", "zsh", "dash", "ksh") and len(words) > 1 and not words[1].startswith("-"):
        return words[1].rsplit("/", 1)[-1]
    return first if _PROGRAM_SCRIPT.search(words[0]) else None


def _step_tasks(step: StepShape) -> int | None:
    """The step's tasks in all: srun's -n, else the job's --ntasks where srun sets no other count, else its tasks
    per node times its nodes; None: not known."""
    given = step.option("-n", "--ntasks")
    if given is not None:
        return count(given)
    job_total = step.job.value("ntasks")
    if job_total is not None and not step.sets("--ntasks-per-node", "-N", "--nodes"):
        return count(job_total)
    tasks, nodes = step.tasks_per_node(), step.nodes
    return tasks * nodes if tasks is not None and nodes is not None else None


def task_variables_inherited(ctx: Context) -> list[Finding]:
    """RANK, LOCAL_RANK, NODE_RANK or GROUP_RANK that the batch shell exported from $SLURM_PROCID, $SLURM_LOCALID
    or $SLURM_NODEID (directly or through its other variables: `export RANK=$SLURM_PROCID`, `NODE_RANK=$SLURM_NODEID;
    export NODE_RANK`) and an srun step inherits: the batch shell read task 0's value once, and srun passes its
    environment to every task, setting only the SLURM_* variables per task, so every process that reads the
    variable (torch.distributed's env:// init, scripts written for torchrun, Lightning) sees rank 0. Applies to a
    step with more than one of what the variable counts (tasks, tasks per node, nodes; a count that is not known
    counts as more) that runs Python, or a script the check cannot read (then said as a condition: unless that
    script sets it per task). Not where the step sets the variable itself (`bash -c 'RANK=$SLURM_PROCID python
    ...'`, `--env RANK=...`), runs torchrun, accelerate or deepspeed (they set these in every worker they start),
    does not pass the variable (srun --export=NONE or a list without it, also from #SBATCH --export or
    SLURM_EXPORT_ENV; a container with --cleanenv or --containall, unless exported as APPTAINERENV_NAME), or
    names it on its own line (the task_variables_in_batch_shell rule's finding)."""
    values_at = _fixed_task_variables(ctx.script)
    found: list[Finding] = []
    for srun, step in ctx.steps():
        values = values_at.get(srun.line, {})
        variables = {name: (sources, line, value) for name, (sources, line, value, exported) in values.items()
                     if exported and _rank_name(name) is not None}
        for word in srun.prefix:  # RANK=$SLURM_PROCID srun ...: the batch shell expands it for srun's environment
            name, eq, value = word.partition("=")
            computed = _task_sources(value, values) if eq and _rank_name(name) else None
            if computed is not None:
                variables[name] = (computed[0], srun.line, computed[1])
        program = srun.program
        if not variables or program.per_node:
            continue
        wrapper = _step_wrapper(srun)
        if program.kind != "python" and wrapper is None:
            continue  # a program that is not Python (hostname, an MPI code): it does not read these
        passes_all, listed = _passes_environment(ctx, srun)
        clean = program.container is not None and any(flag in program.container for flag in _CLEAN_ENVIRONMENT)
        step_text = " ".join(srun.words[len(srun.prefix) + 1:])  # srun's options and the program
        tasks, nodes, total = step.tasks_per_node(), step.nodes, _step_tasks(step)
        several = {"SLURM_NODEID": nodes is None or nodes > 1,
                   "SLURM_LOCALID": tasks is None or tasks > 1,
                   "SLURM_PROCID": total is None or total > 1}
        names: list[str] = []
        for name, (from_tasks, _line, _expression) in variables.items():
            rank = _rank_name(name)
            if rank is None or not any(several[source] for source in from_tasks):
                continue
            prefixed = name != rank
            if prefixed and program.container is None:
                continue  # APPTAINERENV_RANK is read by the container runtime only
            if not prefixed and (clean or not (passes_all or name in listed)):
                continue
            if re.search(rf"\${{?{rank}\b", step_text) or re.search(rf"(?:^|[\s;&|(=,]){rank}=", step_text):
                continue  # named on the srun line (the other rule's), or set in the step itself
            names.append(name)
        if not names:
            continue
        ranks = [_rank_name(name) or name for name in names]
        listed_names = ", ".join(f"${name}" for name in names)
        sources = list(dict.fromkeys(source for name in names for source in variables[name][0]))
        lines = sorted({variables[name][1] for name in names})
        where = f"line{'s' if len(lines) > 1 else ''} {', '.join(map(str, lines))}"
        unless = f", unless {wrapper} sets {'it' if len(names) == 1 else 'them'} for each task itself" \
            if wrapper is not None else ""
        what = (f"every task of this step inherits {listed_names} from the batch shell, which set "
                f"{'it' if len(names) == 1 else 'them'} from {', '.join('$' + s for s in sources)} once, at "
                f"{where}: every task gets task 0's value{unless}")
        readers = ", ".join(f"{rank} ({_RANK_VARIABLES[rank][0]})" for rank in dict.fromkeys(ranks))
        why = (f"the batch script runs as task 0 on the first node, where {', '.join('$' + s for s in sources)} "
               f"{'is' if len(sources) == 1 else 'are'} 0; srun passes its environment to every task (--export=ALL "
               f"by default) and sets only the SLURM_* variables per task. Read from the environment, {readers} "
               f"{'makes' if len(names) == 1 else 'make'} every process claim the same rank: the job hangs at init, "
               "or trains copies of one rank")
        docs = list(dict.fromkeys(doc for rank in ranks for doc in _RANK_VARIABLES[rank][1]))
        settings = " ".join(f"{rank}={variables[name][2]}" for name, rank in zip(names, ranks, strict=True))
        words = program.words
        command = " ".join(words[:2]) + (" ..." if len(words) > 2 else "") if words else "the program"
        fix = (f"set {'it' if len(names) == 1 else 'them'} in each task: srun ... bash -c '{settings} exec {command}' "
               "(single quotes: each task expands them), or let torchrun or your framework take the rank from "
               "$SLURM_PROCID (Lightning's SLURMEnvironment does)")
        if wrapper is not None:
            fix += f"; or export {'it' if len(names) == 1 else 'them'} in {wrapper}, which each task runs"
        found.append(Finding(srun.line, what, why, f"{'; '.join(docs)}; {SRUN_DOC} (--export)", fix))
    return found
