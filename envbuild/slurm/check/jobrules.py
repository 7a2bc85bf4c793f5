"""`envrun sbatch --check` rules on the script as a whole and what the job asks for (#SBATCH lines): shell
syntax, CPUs, memory and GPUs per node against the node, partition limits, partitions that do not exist or
bill whole nodes, a GPU partition without GPUs, the account, time syntax, options sbatch or srun refuses (an
srun-only option in #SBATCH, one newer than the cluster's Slurm release), and #SBATCH lines that sbatch never
reads. One function per rule, each `(Context) -> list[Finding]`, each applying only where its reason holds.
Pure (shell_syntax reads what check_script asked bash)."""

from __future__ import annotations

import re

from envbuild.shared.durations import SLURM_FORMS, UNITS, format_duration, parse_slurm_time
from envbuild.shared.errors import UsageError
from envbuild.slurm.check.parse import srun_options
from envbuild.slurm.check.rulebase import NEWER_SLURM_OPTIONS, SBATCH_DOC, Context, Finding, SlurmOption
from envbuild.slurm.check.shape import count, format_mb, size_mb

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from envbuild.slurm.check.parse import Directive


BASH_DOC = "bash(1), https://www.gnu.org/software/bash/manual/bash.html"
_CONFLICT_MARKER = re.compile(r"^(<{7}|={7}|>{7})(?: |$)", re.MULTILINE)


def shell_syntax(ctx: Context) -> list[Finding]:
    """bash cannot parse the script (`bash -n` fails: the job starts and stops at once), or it holds a merge's
    conflict markers (`<<<<<<<`, `=======`, `>>>>>>>` at a line's start)."""
    found: list[Finding] = []
    lines = ctx.script.lines
    text = "\n".join(lines)
    match = _CONFLICT_MARKER.search(text)
    if match:
        found.append(Finding(text.count("\n", 0, match.start()) + 1,
                             f"a merge conflict marker ({match.group(1)}) is part of the script",
                                 "a merge left both versions in the file between <<<<<<< and >>>>>>>; bash reads "
                             "the markers as commands and the job fails (or runs both versions)", BASH_DOC,
                             "keep one version and delete the marker lines (git diff shows both sides)"))
    if ctx.syntax_error is not None and not found:
        line, message = ctx.syntax_error
        opened = ctx.script.open_quote_line
        if opened is not None and ("EOF" in message or not line):
            line = opened
            message = f"a quote or $( opened on line {opened} never closes ({message})"
        found.append(Finding(max(1, min(line, len(lines))), f"bash cannot parse the script: {message}",
                             "bash reads the whole script before it runs it; with a syntax error the job ends at "
                             "once, after waiting in the queue", BASH_DOC,
                             "correct the line; `bash -n SCRIPT` checks it without running anything"))
    return found


def unread_lines(ctx: Context) -> list[Finding]:
    """Applies where bash accepts the script (bash -n says nothing) but the check's grammar (tree-sitter-bash,
    envbuild.slurm.check.shellwords) could not read it from some line on: the rules did not run on those
    lines, and this says so instead of calling them clean."""
    opened = ctx.script.open_quote_line
    if opened is None or ctx.syntax_error is not None:
        return []
    return [Finding(opened, f"the check could not read the script from line {opened} on (bash accepts it)",
                    "a construct the check's bash grammar does not know: no rule ran on these lines", BASH_DOC,
                    "nothing to change for bash; please report the lines to envbuild so that the check reads them")]


def interpreter_line(ctx: Context) -> list[Finding]:
    """No `#!` first line: sbatch refuses the script ("This does not look like a batch script")."""
    if ctx.script.interpreter is not None:
        return []
    first = ctx.script.lines[0] if ctx.script.lines else ""
    return [Finding(1, "the first line is not #! and an interpreter",
                    "sbatch runs a script only when its first line starts with #! followed by the path to an "
                    "interpreter; it refuses any other file", SBATCH_DOC, "#!/bin/bash as the first line",
                    edit=(1, "#!/bin/bash") if not first.strip() else None)]


def cpus_per_node(ctx: Context) -> list[Finding]:
    """More Slurm CPUs per node than the node gives jobs (LUMI-G: 56 of 64 cores; JUWELS: 96 threads)."""
    if ctx.cpu_partition():
        return []  # the recipe's node facts are its GPU nodes'
    limit = ctx.cpu_limit()
    sized = ctx.job.cpus()
    if limit is None or sized is None or sized.value <= limit[0]:
        return []
    cpus, why, source = limit
    tasks = sized.tasks
    gpus = ctx.job.gpus_per_node()
    if sized.directive.name == "cpus-per-gpu":
        fix = f"--cpus-per-gpu={cpus // max(1, gpus)}"
    elif tasks > cpus:
        fix = f"--ntasks-per-node={cpus} with --cpus-per-task=1, or fewer tasks"
    else:
        per_task = cpus // tasks
        per_gpu = ctx.cpus_per_gpu()
        if per_gpu and gpus and tasks == gpus:
            per_task = min(per_task, per_gpu)
        fix = f"--cpus-per-task={per_task}" + (f" ({tasks} tasks x {per_task} = {tasks * per_task} CPUs)" if tasks > 1
                                               else "")
    edit = None
    if sized.directive.name in ("cpus-per-task", "cpus-per-gpu"):
        edit = ctx.replace_in_line(sized.directive.line, sized.directive.written, fix.split(" ", 1)[0])
    return [Finding(sized.directive.line, f"{sized.how} is {sized.value} CPUs per node, more than the {cpus} a "
                    f"{ctx.name} node gives jobs", why, source, fix, edit)]


def memory_per_node(ctx: Context) -> list[Finding]:
    """--mem, --mem-per-gpu x GPUs or --mem-per-cpu x CPUs above the node's memory (--mem=0 means all of it)."""
    if ctx.cpu_partition():
        return []  # the recipe's node facts are its GPU nodes'
    limit = ctx.node_memory_mb()
    node = ctx.site.node
    if limit is None or node is None:
        return []
    node_mb, source = limit
    why = f"a {ctx.name} node gives jobs {format_mb(node_mb)} of memory"
    found: list[Finding] = []
    mem = ctx.job.get("mem")
    mb = size_mb(mem.value) if mem else None
    if mem is not None and mb and mb > node_mb:
        gpus = ctx.job.gpus_per_node()
        if gpus and gpus < node.gpus and node.memory_per_gpu_gb:
            fix = f"--mem={node.memory_per_gpu_gb * gpus}G ({node.memory_per_gpu_gb}G per GPU x {gpus})"
        else:
            fix = f"--mem={format_mb(node_mb)} (the whole node's)"
        found.append(Finding(mem.line, f"{mem.written} is more memory than a {ctx.name} node has", why, source, fix,
                             ctx.replace_in_line(mem.line, mem.written, fix.split(" ", 1)[0])))
    per_gpu = ctx.job.get("mem-per-gpu")
    mb = size_mb(per_gpu.value) if per_gpu else None
    gpus = ctx.job.gpus_per_node()
    if per_gpu is not None and mb and gpus and mb * gpus > node_mb:
        most = node.memory_per_gpu_gb * 1024 if node.memory_per_gpu_gb else node_mb // max(1, node.gpus or gpus)
        found.append(Finding(per_gpu.line, f"{per_gpu.written} x {gpus} GPUs is {format_mb(mb * gpus)} per node, more "
                             f"than a {ctx.name} node has", why, source, f"--mem-per-gpu={format_mb(most)}"))
    per_cpu = ctx.job.get("mem-per-cpu")
    mb = size_mb(per_cpu.value) if per_cpu else None
    cpus = ctx.job.cpus()
    if per_cpu is not None and mb and cpus and mb * cpus.value > node_mb:
        found.append(Finding(per_cpu.line, f"{per_cpu.written} x {cpus.value} CPUs is {format_mb(mb * cpus.value)} per "
                             f"node, more than a {ctx.name} node has", why, source,
                             f"--mem-per-cpu={format_mb(node_mb // cpus.value)}"))
    return found


def gpus_per_node(ctx: Context) -> list[Finding]:
    if ctx.cpu_partition():
        return []  # the recipe's node facts are its GPU nodes'
    node = ctx.site.node
    sized = ctx.job.gpus()
    if node is None or sized is None or sized.value <= node.gpus or ctx.job.gpus_spread():
        return []
    source = ctx.site.cite("node.gpus")
    if not node.gpus:
        return [Finding(sized.directive.line, f"{sized.how} asks for GPUs, but a {ctx.name} node has none",
                        f"{ctx.name} nodes have no GPUs", source, f"leave out {sized.directive.written}, or use a GPU "
                        "system's partition (envrun sbatch --system ...)")]
    total = sized.value * ctx.job.nodes
    return [Finding(sized.directive.line, f"{sized.how} is {sized.value} GPUs per node, but a {ctx.name} node has "
                    f"{node.gpus}", f"{node.gpus} GPUs per {ctx.name} node", source,
                    f"--nodes={ctx.nodes_for(total)} {ctx.gpu_request_like(node.gpus, sized.directive)} "
                    f"({total} GPUs in all)")]


def partition_limits(ctx: Context) -> list[Finding]:
    """More nodes, GPUs per node or time than the named partition allows (Mahti gpusmall: at most 2 GPUs)."""
    found: list[Finding] = []
    for name in ctx.partitions():
        spec = ctx.site.partitions.get(name)
        if spec is None:
            continue
        source = ctx.site.cite(f"partitions.{name}")
        instead = ctx.partition_fix(name, test=spec.test, with_time=False)
        # where scontrol states the partition's own limit, cluster_limits judges by it (the recipe may be stale)
        live = ctx.cluster.partitions.get(name) if ctx.cluster is not None else None
        nodes = ctx.job.get("nodes")
        if spec.max_nodes is not None and ctx.job.nodes > spec.max_nodes and nodes is not None and \
                (live is None or live.max_nodes is None):
            fewer = f"--nodes={spec.max_nodes}"
            found.append(Finding(nodes.line, f"{nodes.written}: partition {name} takes at most {spec.max_nodes} "
                                 "node(s)", f"partition {name} allows {spec.max_nodes} node(s) per job", source,
                                 f"{instead}, or {fewer}" if instead else fewer))
        gpus = ctx.job.gpus()
        if spec.max_gpus_per_node is not None and gpus is not None and gpus.value > spec.max_gpus_per_node \
                and not ctx.job.gpus_spread():
            fewer = ctx.gpu_request_like(spec.max_gpus_per_node, gpus.directive)
            found.append(Finding(gpus.directive.line, f"{gpus.how}: partition {name} takes at most "
                                 f"{spec.max_gpus_per_node} GPUs per node", f"partition {name} is for jobs of 1 to "
                                 f"{spec.max_gpus_per_node} GPUs", source, f"{instead}, or {fewer}" if instead else fewer))
        seconds, time = ctx.time_seconds(), ctx.job.get("time")
        if spec.max_time and seconds is not None and time is not None and (live is None or live.max_time_s is None):
            most = parse_slurm_time(spec.max_time, source)
            if seconds > most:
                longer = ctx.partition_fix(name, test=spec.test)
                shorter = f"--time={format_duration(most)}"
                fix = shorter + (f", or {longer}" if longer else "")
                found.append(Finding(time.line, f"{time.written}: partition {name} allows at most {spec.max_time}",
                                     f"partition {name}'s time limit is {spec.max_time}", source, fix,
                                     ctx.replace_in_line(time.line, time.written, shorter)))
    return found


def partition_exists(ctx: Context) -> list[Finding]:
    """A partition the site retired (its recipe says why and what instead), or one the system does not have
    (its GPU partitions and its CPU partitions both known). The partition offered instead fits the job: a GPU
    partition for a job with GPUs, never for a CPU job."""
    found: list[Finding] = []
    directive = ctx.job.get("partition")
    recipe = ctx.site
    if directive is None or placeholder_in(directive.value or "") is not None:  # the placeholders rule's
        return found
    gpu_job = ctx.job.gpus() is not None
    kinds = {name: "CPU" if spec.cpu_only else "GPU" for name, spec in recipe.partitions.items()}
    known = "; ".join(f"{', '.join(n for n in kinds if kinds[n] == kind)}" + (f" ({kind})" if len(set(kinds.values()))
                      > 1 else "") for kind in dict.fromkeys(kinds.values()))
    fitting = [name for name, kind in kinds.items() if (kind == "GPU") == gpu_job] or list(kinds)
    gpu_system = recipe.node is not None and recipe.node.gpus > 0
    # a partition is offered only where it fits the job: a GPU one for a GPU job, never for a CPU job
    other = ctx.suggest_partition() if gpu_job or not gpu_system else None
    instead = f"--partition={other}" if other else "one of: " + ", ".join(f"--partition={p}" for p in fitting)
    live = ctx.cluster.partitions if ctx.cluster is not None else {}
    for name in ctx.partitions():
        if name in live:
            continue  # the cluster lists it now: the recipe is stale there, and recipe_vs_cluster says so
        if name in recipe.batch.retired_partitions:
            found.append(Finding(directive.line, f"partition {name} no longer exists on {ctx.name}",
                                 recipe.batch.retired_partitions[name], recipe.cite(f"batch.retired_partitions.{name}"),
                                 instead, _partition_edit(ctx, directive, name, other)))
        elif recipe.node is not None and recipe.partitions and name not in recipe.partitions:
            found.append(Finding(directive.line, f"{ctx.name} has no partition {name}",
                                 f"{ctx.name}'s partitions are {known}", recipe.cite("partitions"), instead,
                                 _partition_edit(ctx, directive, name, other)))
    return found


def _partition_edit(ctx: Context, directive: Directive, name: str, other: str | None) -> tuple[int, str] | None:
    """The #SBATCH --partition line with `other` for `name`, where the job names one partition."""
    if not other or ctx.partitions() != [name] or directive.value != name:
        return None
    return ctx.replace_in_line(directive.line, directive.written, directive.written.replace(name, other))


def gpu_partition_without_gpus(ctx: Context) -> list[Finding]:
    """A job on one of the system's GPU partitions (JUWELS booster, LUMI standard-g/small-g) that asks for no
    GPU: Slurm gives it none, and the program runs on the CPU (a fine-tune on one core)."""
    node, directive = ctx.site.node, ctx.job.get("partition")
    if node is None or not node.gpus or directive is None or ctx.job.gpus() is not None:
        return []
    if any(option.name in _GPU_OPTIONS and (option.name != "gres" or "gpu" in (option.value or ""))
           for option in ctx.script.late_options):
        return []  # the GPUs are asked for below the first command: the late_directives finding says so
    partitions = ctx.site.partitions
    names = [name for name in ctx.partitions() if name in partitions and not partitions[name].cpu_only]
    if not names or len(names) != len(ctx.partitions()):
        return []  # a CPU partition (or one the recipe does not know) among them: the job may be meant for it
    name = names[0]
    spec = ctx.site.partitions[name]
    gpus = node.gpus if spec.full_node else 1
    request = ctx.gpu_request(gpus)
    what = "every GPU of the node" if spec.full_node else "one GPU"
    cpu = [other for other, spec in partitions.items() if spec.cpu_only and not spec.test]
    return [Finding(directive.line, f"partition {name} is a GPU partition, and the job asks for no GPU",
                    "Slurm gives a job only the GPUs it asks for: without a GPU request the program sees no GPU "
                    "and runs on the CPU", ctx.site.cite(f"partitions.{name}"),
                    f"{request} ({what}{', as the partition gives whole nodes' if spec.full_node else ''})"
                    + (f"; or a CPU partition ({', '.join(cpu)}) for a CPU job" if cpu else ""),
                    ctx.add_to_directive_line(directive.line, request))]


_GPU_OPTIONS = ("gpus", "gpus-per-node", "gpus-per-task", "gres")


def partial_gpus_on_billed_node(ctx: Context) -> list[Finding]:
    """Fewer GPUs per node than the node has, on a partition billed by whole nodes (LUMI standard-g): the job
    pays for every GPU of its nodes. The fix is the system's shared partition where the job fits there."""
    node = ctx.site.node
    sized, directive = ctx.job.gpus(), ctx.job.get("partition")
    if node is None or not node.gpus or sized is None or directive is None or ctx.job.gpus_spread():
        return []
    gpus = sized.value
    if not 0 < gpus < node.gpus:
        return []
    found: list[Finding] = []
    for name in ctx.partitions():
        spec = ctx.site.partitions.get(name)
        if spec is None or spec.billing != "whole-node":
            continue
        shared = ctx.suggest_partition(test=spec.test)
        shared = shared if shared and ctx.site.partitions[shared].billing != "whole-node" else None
        fix = (f"--partition={shared} (shared nodes: billed for the {gpus} GPU(s) asked for)" if shared else
               f"{ctx.gpu_request(node.gpus)} and one process per GPU (the job pays for them anyway)")
        found.append(Finding(directive.line, f"{sized.how} on partition {name}, which bills every GPU of a node: "
                             f"the job pays for {node.gpus} GPUs per node and uses {gpus}",
                             f"partition {name} gives and bills whole nodes", ctx.site.cite(f"partitions.{name}"),
                             fix, _partition_edit(ctx, directive, name, shared)))
    return found


def account(ctx: Context) -> list[Finding]:
    """No --account where every job must name one; $SBATCH_ACCOUNT in the environment makes it a note."""
    batch = ctx.site.batch
    given = ctx.job.get("account")
    if not batch.account_required or (given is not None and given.value):
        return []
    if ctx.environ.get("SBATCH_ACCOUNT"):
        ctx.notes.append(f"no #SBATCH --account; sbatch takes it from $SBATCH_ACCOUNT={ctx.environ['SBATCH_ACCOUNT']} "
                         "here, but not where that variable is unset")
        return []
    lines = ctx.script.directive_lines
    example = batch.account_example or "PROJECT"
    return [Finding(lines[0] if lines else 1, f"no --account: {ctx.name} needs one for every job",
                    f"{ctx.name} bills every job to a project, and sbatch refuses a job without one",
                    ctx.site.cite("batch.account_required"), f"#SBATCH --account={example} (your project)")]


def time_syntax(ctx: Context) -> list[Finding]:
    found = ctx.job.get("time")
    if found is None or not found.value or found.value.strip().upper() in ("UNLIMITED", "INFINITE"):
        return []
    try:
        parse_slurm_time(found.value, "--time")
    except UsageError:
        meant = _HUMAN_TIME.match(found.value.strip())
        if meant is None:
            return [Finding(found.line, f"{found.written} is not a Slurm time", f"Slurm reads times as {SLURM_FORMS}",
                            SBATCH_DOC, "e.g. --time=02:00:00")]
        seconds = int(meant.group(1)) * UNITS[meant.group(2)[0].lower()]
        fix = f"--time={format_duration(seconds)}"
        return [Finding(found.line, f"{found.written} is not a Slurm time", f"Slurm reads times as {SLURM_FORMS}",
                        SBATCH_DOC, fix, ctx.replace_in_line(found.line, found.written, fix))]
    return []


def _newer_options(ctx: Context) -> list[tuple[str, int, str, SlurmOption, tuple[int, str] | None]]:
    """Where the script gives an option of NEWER_SLURM_OPTIONS: (sbatch or srun, line, as written, the entry,
    an edit that takes it out of its line or None), once per entry and line."""
    uses: list[tuple[str, int, str, SlurmOption, tuple[int, str] | None]] = []
    for directive in ctx.script.directives:
        word = f"--{directive.name}" + (f"={directive.value}" if directive.value is not None else "")
        for entry in NEWER_SLURM_OPTIONS:
            if entry.given_in([word]):
                alone = entry.value is None or (directive.value or "").strip().lower() == entry.value
                edit = ctx.replace_in_line(directive.line, f" {directive.written}", "") if alone else None
                uses.append(("sbatch", directive.line, directive.written, entry, edit))
    for srun in ctx.script.sruns:
        for entry in NEWER_SLURM_OPTIONS:
            if not entry.given_in(srun.options):
                continue
            raw = next((word for word in srun.written if word.startswith("--") and entry.given_in(srun_options((word,)))),
                       None)
            if raw is not None:
                alone = entry.value is None or raw.partition("=")[2].strip().lower() == entry.value
                uses.append(("srun", srun.line, raw, entry,
                             ctx.replace_in_line(srun.line, f" {raw}", "") if alone else None))
                continue
            # from an input variable srun reads (export SLURM_GRES_FLAGS=...), or in two words (--gres-flags X)
            variable = next((f"{assignment} (line {at})" if at != srun.line else assignment
                             for assignment, at, option in srun.from_environment if entry.given_in([option])), None)
            uses.append(("srun", srun.line, variable or next(o for o in srun.options if entry.given_in([o])), entry,
                         None))
    return uses


def srun_option_in_sbatch(ctx: Context) -> list[Finding]:
    """An #SBATCH option that only srun takes (--gres-flags=allow-task-sharing): sbatch stops on it, on every
    release (those that have it: 'only used with srun'; older ones do not know it)."""
    found: list[Finding] = []
    for tool, line, written, entry, edit in _newer_options(ctx):
        if tool != "sbatch" or not entry.srun_only:
            continue
        lacking = [srun.line for srun in ctx.script.sruns if not entry.given_in(srun.options)]
        where = f" (line{'s' if len(lacking) > 1 else ''} {', '.join(map(str, lacking))})" if lacking else ""
        fix = f"take it out of #SBATCH and give it to srun: srun {entry.written} ...{where}"
        found.append(Finding(line, f"#SBATCH {written}: sbatch refuses it, it is an srun option",
                             f"Slurm reads {entry.written} for a job step only: sbatch stops on it and the job is not "
                             "submitted", entry.source, fix,
                             edit if ctx.script.sruns and not lacking else None))  # every srun has it already
    return found


def option_newer_than_slurm(ctx: Context) -> list[Finding]:
    """An option (or value) of NEWER_SLURM_OPTIONS in #SBATCH or on an srun line, where the check runs on the
    cluster and its Slurm (scontrol --version) is older than the release that brought it: sbatch or srun stops on
    it. Away from the cluster the release is not known: option_release_unknown says so."""
    version = ctx.slurm_version()
    if version is None:
        return []
    number, written_version, version_source = version
    found: list[Finding] = []
    for tool, line, written, entry, edit in _newer_options(ctx):
        if number >= entry.since or (tool == "sbatch" and entry.srun_only):
            continue  # in #SBATCH an srun-only option is refused on every release: srun_option_in_sbatch's
        effect = "the job is not submitted" if tool == "sbatch" else "the step does not start"
        fix = f"leave {entry.written} out on this cluster" + (f" and {entry.without}" if entry.without else "") + \
            f", or run where Slurm is {entry.since_text} or newer"
        found.append(Finding(line, f"{'#SBATCH' if tool == 'sbatch' else 'srun'} {written}: this cluster's Slurm is "
                             f"{written_version}, older than the {entry.since_text} that brought it",
                             f"{tool} of Slurm {written_version} does not know {entry.written} and stops: {effect}",
                             f"{version_source}; {entry.source}", fix, edit))
    return found


def option_release_unknown(ctx: Context) -> list[Finding]:
    """The same options where the cluster's Slurm is not known (the check runs away from the cluster), as a
    condition on the release; not where the site's recipe gives the option as the site's own way (LUMI-G's
    launch.forbidden_srun_options unless), since its guide then uses it."""
    if ctx.slurm_version() is not None:
        return []
    vouched = {rule.unless for rule in ctx.recipe.launch.forbidden_srun_options if rule.unless} \
        if ctx.recipe is not None else set()
    found: list[Finding] = []
    for tool, line, written, entry, _edit in _newer_options(ctx):
        if any(entry.given_in([option]) for option in vouched) or (tool == "sbatch" and entry.srun_only):
            continue
        found.append(Finding(line, f"{'#SBATCH' if tool == 'sbatch' else 'srun'} {written}: if the cluster's Slurm "
                             f"is older than {entry.since_text}, {tool} stops on it",
                             f"{tool} has {entry.written} from Slurm {entry.since_text}; the cluster's release was not "
                             "asked (the check runs away from it)", entry.source,
                             "run the check on the cluster (it reads scontrol --version there), or see `srun --version` "
                             "there"))
    return found


# what people write for a time (6h, 30min, 2days): the first letter is the unit of envbuild.shared.durations
_HUMAN_TIME = re.compile(r"(\d+)\s*(h|hrs?|hours?|m|mins?|minutes?|d|days?)$", re.IGNORECASE)


# What guides and templates write where the user must put their own value: `<ACCOUNT>`, `project_xxxxxxx`,
# `XXXX`, `your_project`, `/path/to/...`, `...`, `changeme`, `xyz-cluster`. Each alternative stands for a whole
# segment of the word (between `_ - . / : = ,` or its ends), so `boxxxer` or `yourself` are not placeholders.
PLACEHOLDER = re.compile(
    r"<[^<>\s]*[A-Za-z][^<>]*>"
    r"|(?:^|(?<=[_\-./:=,]))(?:[xX]{3,}|xyz|XYZ|your[_-][A-Za-z]\w*|YOUR[_-][A-Z]\w*|change[_-]?me|CHANGE[_-]?ME"
    r"|\.\.\.)(?=$|[_\-./:=,])"
    r"|^/path/to/")
# The options whose placeholder sbatch or the job trips on (an account, a partition, a file it writes).
_PLACEHOLDER_OPTIONS = ("account", "partition", "qos", "reservation", "constraint", "nodelist", "exclude", "output",
                        "error", "chdir", "mail-user", "nodes", "ntasks", "ntasks-per-node", "cpus-per-task", "time",
                        "mem", "gpus", "gpus-per-node", "gres", "job-name", "licenses", "clusters")


def placeholder_in(text: str) -> str | None:
    """The placeholder in `text` (a value or a word), or None."""
    match = PLACEHOLDER.search(text)
    return match.group(0) if match else None


def placeholders(ctx: Context) -> list[Finding]:
    """Applies to every #SBATCH option of _PLACEHOLDER_OPTIONS and every word of an srun line or of a program the
    body starts (quoted or not: a quoted `"<options>"` passes bash -n and reaches the program): a value left as a
    guide's placeholder. sbatch refuses an account or partition that does not exist; a program word fails after
    the queue wait."""
    found: list[Finding] = []
    for directive in ctx.script.directives:
        if directive.name not in _PLACEHOLDER_OPTIONS or not directive.value:
            continue
        held = placeholder_in(directive.value)
        if held is None:
            continue
        example = ""
        if directive.name == "account" and ctx.recipe is not None and ctx.site.batch.account_example:
            example = f" (on {ctx.name}: a project such as {ctx.site.batch.account_example})"
        found.append(Finding(
            directive.line, f"{directive.written}: {held!r} is a placeholder, not a value",
            "a guide's or template's stand-in for your own value: sbatch refuses an account, partition or QOS that "
            "does not exist, and a path or name with it in is taken literally", SBATCH_DOC,
            f"put your own value for --{directive.name}{example}"))
    seen: set[int] = set()
    lines = [(srun.line, srun.words, "step") for srun in ctx.script.sruns] + \
        [(command.line, command.program.words, "job") for command in ctx.script.commands]
    for line, words, what in lines:
        held_in = next(((word, held) for word in words if (held := placeholder_in(word)) is not None), None)
        if held_in is None or line in seen:
            continue
        seen.add(line)
        found.append(Finding(
            line, f"{held_in[0]!r}: {held_in[1]!r} is a placeholder, not a value",
            f"the {what} runs the words as written: the program gets the placeholder and fails after the job "
            "waited in the queue", SBATCH_DOC, "replace it with the real argument"))
    return found


def numbers(ctx: Context) -> list[Finding]:
    """Counts sbatch cannot read (#SBATCH lines are not shell: `--nodes=$N` stays the text $N); a placeholder
    (`--nodes=<NODES>`) is the placeholders rule's."""
    found: list[Finding] = []
    for directive in ctx.script.directives:
        if directive.name in ("nodes", "ntasks", "ntasks-per-node", "cpus-per-task") and directive.value is not None \
                and count(directive.value) is None and placeholder_in(directive.value) is None:
            variable = "$" in directive.value
            found.append(Finding(
                directive.line, f"{directive.written}: not a number" + (" (a shell variable)" if variable else ""),
                "sbatch reads #SBATCH lines as they are written; the shell expands nothing there" if variable
                else f"--{directive.name} takes a count", SBATCH_DOC,
                f"write the number, or pass it on the command line: sbatch --{directive.name}=N SCRIPT"))
    return found


def commands_above_directives(ctx: Context) -> list[Finding]:
    """A command above the #SBATCH block (`set -euo pipefail` first): sbatch reads none of the block."""
    script = ctx.script
    if not script.commands_above_directives or script.first_command_line is None:
        return []
    first, count = script.first_command_line, len(script.late_directives)
    return [Finding(first, f"`{script.first_command}` comes before the #SBATCH lines: sbatch ignores all "
                    f"{count} of them", "sbatch reads #SBATCH lines only until the first line that is neither "
                    "blank nor a comment; the job runs with the defaults instead", SBATCH_DOC,
                    f"move `{script.first_command}` below the last #SBATCH line (line {script.late_directives[-1][0]})")]


def late_directives(ctx: Context) -> list[Finding]:
    """#SBATCH lines after the first command: sbatch has stopped reading them (a command above the whole
    block is the commands_above_directives finding instead)."""
    if ctx.script.commands_above_directives:
        return []
    first = ctx.script.first_command_line
    return [Finding(line, f"{text} comes after the first command (line {first}): sbatch ignores it",
                    "sbatch reads #SBATCH lines only until the first line that is neither blank nor a comment",
                    SBATCH_DOC, f"move it above line {first}") for line, text in ctx.script.late_directives]


# --- the live cluster: what `scontrol show partition/node` says now (envbuild.slurm.cluster) ---------------------


def _asked_partitions(ctx: Context) -> tuple[Directive | None, list[str]]:
    found = ctx.job.get("partition")
    if found is None or not found.value or "$" in found.value or placeholder_in(found.value):
        return found, []
    return found, [name.strip() for name in found.value.split(",") if name.strip()]


def cluster_partition(ctx: Context) -> list[Finding]:
    """Applies where the check runs on the script's cluster and scontrol answered: every partition --partition
    names (a comma list: sbatch takes the first that can run the job) exists there."""
    cluster = ctx.cluster
    if cluster is None or not cluster.partitions:
        return []
    directive, names = _asked_partitions(ctx)
    missing = [name for name in names if name not in cluster.partitions]
    if directive is None or not missing:
        return []
    default = cluster.default_partition()
    known = ", ".join(sorted(cluster.partitions))
    return [Finding(directive.line, f"{directive.written}: this cluster ({cluster.name}) has no partition "
                    f"{', '.join(missing)}", f"its partitions are {known}; sbatch refuses the job (invalid partition)",
                    cluster.source, f"--partition={default.name if default else sorted(cluster.partitions)[0]}, or "
                    f"one of: {known}")]


def cluster_limits(ctx: Context) -> list[Finding]:
    """Applies where the check runs on the script's cluster and scontrol answered: the time, nodes, GPUs per node,
    memory per node and node features (--constraint) the script asks for against the partition it runs in (the
    named ones that exist, else the cluster's default): what no partition named can give is an error."""
    cluster = ctx.cluster
    if cluster is None or not cluster.partitions:
        return []
    _directive, names = _asked_partitions(ctx)
    partitions = [cluster.partitions[name] for name in names if name in cluster.partitions]
    if not names:
        default = cluster.default_partition()
        partitions = [default] if default else []
    if not partitions:
        return []
    where = ", ".join(p.name for p in partitions)
    found: list[Finding] = []
    time_directive = ctx.job.get("time")
    if time_directive is not None and time_directive.value:
        try:
            asked = parse_slurm_time(time_directive.value, "--time")
        except UsageError:
            asked = None
        limits = [p.max_time_s for p in partitions]
        if asked is not None and all(limit is not None and asked > limit for limit in limits):
            most = max(limit for limit in limits if limit is not None)
            found.append(Finding(time_directive.line, f"{time_directive.written} is over the time limit of {where} "
                                 f"({format_duration(most)})", "sbatch refuses a job over its partition's MaxTime "
                                 "(or it pends for ever: PartitionTimeLimit)", cluster.source,
                                 f"--time={format_duration(most)} or less, and save checkpoints to go on in a next job"))
    nodes_directive = ctx.job.get("nodes")
    if nodes_directive is not None and count(nodes_directive.value) is not None:
        asked_nodes = count(nodes_directive.value) or 1
        room = [min(len(p.nodes) or asked_nodes, p.max_nodes or asked_nodes) for p in partitions]
        if all(asked_nodes > most for most in room):
            found.append(Finding(nodes_directive.line, f"{nodes_directive.written}: {where} has {max(room)} node(s) "
                                 "for a job", "sbatch refuses a job that asks for more nodes than its partition has",
                                 cluster.source, f"--nodes={max(room)} or fewer"))
    sized = ctx.job.gpus()
    if sized is not None and sized.value > 0 and not ctx.job.gpus_spread():
        most_gpus = max((node.gpus for p in partitions for node in cluster.nodes_of(p)), default=0)
        if sized.value > most_gpus:
            what = "has no GPUs" if most_gpus == 0 else f"has at most {most_gpus} GPUs per node"
            found.append(Finding(sized.directive.line, f"{sized.how}: {where} {what}",
                                 "the partition's nodes do not have them (their Gres): sbatch refuses the job "
                                 "(requested node configuration is not available)", cluster.source,
                                 "leave the GPUs out, or name a partition whose nodes have them" if most_gpus == 0
                                 else f"--gpus-per-node={most_gpus} or fewer, on more nodes"))
    memory = ctx.job.get("mem")
    asked_mb = size_mb(memory.value) if memory is not None else None
    if memory is not None and asked_mb:
        most_mb = max((node.memory_mb or 0 for p in partitions for node in cluster.nodes_of(p)), default=0)
        if most_mb and asked_mb > most_mb:
            found.append(Finding(memory.line, f"{memory.written}: {where}'s nodes have at most {format_mb(most_mb)}",
                                 "sbatch refuses memory per node its nodes do not have", cluster.source,
                                 f"--mem={format_mb(most_mb)} or less (or --mem=0: all of a node's memory)"))
    constraint = ctx.job.get("constraint")
    if constraint is not None and constraint.value and "$" not in constraint.value:
        wanted = [name for name in re.split(r"[|&,\[\]()*\s]+", constraint.value) if name and not name.isdigit()]
        have = {feature for p in partitions for node in cluster.nodes_of(p) for feature in node.features}
        if wanted and not any(name in have for name in wanted):
            found.append(Finding(constraint.line, f"{constraint.written}: no node of {where} has "
                                 f"{' or '.join(wanted)}", "sbatch refuses a job whose features no node has "
                                 f"(the nodes have: {', '.join(sorted(have)) or 'no features'})", cluster.source,
                                 "leave --constraint out, or name features the nodes have"))
    return found


def sbatch_test_only(ctx: Context) -> list[Finding]:
    """Applies with `--check --test-only` where sbatch answered and refused the script: what Slurm itself says."""
    if ctx.test_only is None or ctx.test_only[0] == 0:
        return []
    status, message = ctx.test_only
    line = ctx.script.directive_lines[0] if ctx.script.directive_lines else 1
    return [Finding(line, f"sbatch --test-only refuses the job: {message or f'exit status {status}'}",
                    "Slurm's own answer for this script on this cluster, now", "sbatch --test-only, " + SBATCH_DOC,
                    "change what it names; the other findings often say which option")]


def sbatch_test_only_accepted(ctx: Context) -> list[Finding]:
    """Applies with `--check --test-only` where sbatch accepted the script: where and when it would start."""
    if ctx.test_only is None or ctx.test_only[0] != 0:
        return []
    line = ctx.script.directive_lines[0] if ctx.script.directive_lines else 1
    return [Finding(line, f"sbatch --test-only: {ctx.test_only[1]}", "Slurm's own answer for this script on this "
                    "cluster, now", "sbatch --test-only, " + SBATCH_DOC, "nothing to change")]


# --- the recipe against the live cluster: a stale recipe ----------------------------------------------------------

# Sites quote a node's memory in rounded GB or GiB and keep some of it for the system: a recipe's memory per node
# and scontrol's RealMemory disagree only beyond this share of the larger.
MEMORY_TOLERANCE = 0.1


def recipe_vs_cluster(ctx: Context) -> list[Finding]:
    """Applies where the check runs on the cluster of the site's recipe (the recipe names no Slurm cluster, or
    this one) and scontrol answered: each fact both state and disagree on, once: a recipe partition scontrol does
    not list, a retired one it lists, partitions it lists that the recipe does not name (one info), a partition's
    MaxTime or MaxNodes (where scontrol states one: an UNLIMITED partition may be limited by a QOS the recipe
    describes), and the GPUs, cores and memory of the nodes of the recipe's partitions. Infos: the script needs
    no change; the recipe may be stale, and the rules judge the script by the live facts where both state one."""
    cluster, recipe = ctx.cluster, ctx.site
    if cluster is None or not cluster.partitions:
        return []
    names = recipe.detect.slurm_cluster_names
    if names and cluster.name and cluster.name not in names:
        ctx.notes.append(f"recipe {recipe.name} names Slurm cluster(s) {', '.join(names)}, and this is "
                         f"{cluster.name}: the recipe was not compared with it")
        return []
    directive = ctx.job.get("partition")
    first = ctx.script.directive_lines[0] if ctx.script.directive_lines else 1
    asked = ctx.partitions()

    def line_of(partition: str) -> int:
        return directive.line if directive is not None and partition in asked else first

    def stale(line: int, recipe_says: str, field: str, scontrol_says: str, fix: str) -> Finding:
        return Finding(line, f"the recipe says {recipe_says} ({recipe.cite(field)}), {scontrol_says}, now: the "
                       "recipe may be stale", "the recipe's facts were gathered from the site's documentation at one "
                       "time; the cluster describes itself as it is configured now, and sbatch goes by that",
                       f"{recipe.cite(field)}; {cluster.source}", fix)

    cited = recipe.cite("name")
    where = f"recipes/{recipe.name}.yaml" if cited.startswith("recipe ") else cited.split(" ", 1)[0].rsplit(":", 1)[0]
    update = f"nothing to change in the script; update {where} (its value and citation), or tell its maintainers"
    found: list[Finding] = []
    live_parts = cluster.partitions
    for name, spec in recipe.partitions.items():
        live = live_parts.get(name)
        field = f"partitions.{name}"
        if live is None:
            found.append(stale(line_of(name), f"partition {name} exists", field, "scontrol show partition does not "
                               "list it (gone, renamed, or hidden from this user)", update))
            continue
        if spec.max_time and live.max_time_s is not None:
            try:
                recipe_s = parse_slurm_time(spec.max_time, field)
            except UsageError:
                recipe_s = None
            if recipe_s is not None and recipe_s != live.max_time_s:
                found.append(stale(line_of(name), f"partition {name} allows {spec.max_time}", field,
                                   f"scontrol show partition says MaxTime={format_duration(live.max_time_s)}", update))
        if spec.max_nodes is not None and live.max_nodes is not None and spec.max_nodes != live.max_nodes:
            found.append(stale(line_of(name), f"partition {name} takes at most {spec.max_nodes} node(s)", field,
                               f"scontrol show partition says MaxNodes={live.max_nodes}", update))
    for name, why in recipe.batch.retired_partitions.items():
        if name in live_parts:
            found.append(stale(line_of(name), f"partition {name} was retired ({why})",
                               f"batch.retired_partitions.{name}", "scontrol show partition lists it", update))
    unnamed = sorted(set(live_parts) - set(recipe.partitions) - set(recipe.batch.retired_partitions))
    if unnamed and recipe.partitions:
        found.append(stale(first, f"the partitions are {', '.join(sorted(recipe.partitions))}", "partitions",
                           f"scontrol show partition lists {', '.join(unnamed)} too (the recipe may leave them out on "
                           "purpose)", update))
    found += _recipe_node_vs_cluster(ctx, stale, first, update)
    return found


def _recipe_node_vs_cluster(ctx: Context, stale: Callable[[int, str, str, str, str], Finding], line: int,
                            update: str) -> list[Finding]:
    """The recipe's node facts (its GPU nodes', or a CPU system's) against the nodes of its partitions that
    scontrol lists: GPUs, physical cores and memory per node, where no such node agrees with the recipe."""
    cluster, node = ctx.cluster, ctx.site.node
    if cluster is None or node is None:
        return []
    partitions = [cluster.partitions[name] for name, spec in ctx.site.partitions.items()
                  if name in cluster.partitions and (not spec.cpu_only or not node.gpus)]
    nodes = list({facts.name: facts for partition in partitions for facts in cluster.nodes_of(partition)}.values())
    if not nodes:
        return []
    where = ", ".join(partition.name for partition in partitions)
    found: list[Finding] = []
    gpus = sorted({facts.gpus for facts in nodes})
    if node.gpus not in gpus:
        found.append(stale(line, f"a node has {node.gpus} GPU(s)", "node.gpus", f"scontrol show node says the nodes "
                           f"of {where} have {' or '.join(map(str, gpus))} (their Gres)", update))
    cores = sorted({facts.cores for facts in nodes if facts.cores})
    if cores and node.cores not in cores:
        found.append(stale(line, f"a node has {node.cores} cores", "node.cores", "scontrol show node says the nodes "
                           f"of {where} have {' or '.join(map(str, cores))} (Sockets x CoresPerSocket)", update))
    memory = sorted({facts.memory_mb for facts in nodes if facts.memory_mb})
    if node.memory_gb and memory:
        recipe_mb = node.memory_gb * 1024
        if all(abs(recipe_mb - mb) > MEMORY_TOLERANCE * max(recipe_mb, mb) for mb in memory):
            found.append(stale(line, f"a job may ask for {node.memory_gb}G per node", "node.memory_gb",
                               f"scontrol show node says the nodes of {where} have RealMemory="
                               f"{' or '.join(format_mb(mb) for mb in memory)}", update))
    return found


# --- the user's accounts: what accounting says now ------------------------------------------------------------------


def _named_account(ctx: Context) -> tuple[int, str, str] | None:
    """The account sbatch will charge, where the script or the environment names one: (line, as written, name).
    $SBATCH_ACCOUNT wins over the script's #SBATCH line, as in sbatch; a variable or a placeholder is left to the
    rules that judge those."""
    directive = ctx.job.get("account")
    named = (directive.line, directive.written, directive.value) if directive is not None and directive.value else None
    if ctx.environ.get("SBATCH_ACCOUNT"):
        first = ctx.script.directive_lines[0] if ctx.script.directive_lines else 1
        named = (directive.line if directive is not None else first, f"$SBATCH_ACCOUNT={ctx.environ['SBATCH_ACCOUNT']}",
                 ctx.environ["SBATCH_ACCOUNT"])
    if named is None or "$" in named[2] or placeholder_in(named[2]) is not None:
        return None
    return named


def accounting_unanswered(ctx: Context) -> list[Finding]:
    """Applies where the check runs on the script's cluster, the script names an account, and accounting did not
    answer (no slurmdbd, sacctmgr missing or hung): the account was not checked, and this says so."""
    associations = ctx.cluster.associations if ctx.cluster is not None else None
    named = _named_account(ctx)
    if associations is None or associations.answered or named is None:
        return []
    line, written, _account = named
    return [Finding(line, f"{written}: accounting does not answer: account not checked",
                    f"{associations.why.rstrip('.')}; the user's accounts come from accounting (slurmdbd), which this cluster "
                    "does not run or which did not answer", associations.source,
                    "nothing to change if the account is yours; `sacctmgr show assoc user=$USER` lists them where "
                    "accounting runs")]


def account_not_enforced(ctx: Context) -> list[Finding]:
    """Applies where the check runs on the script's cluster, accounting answered, the cluster does not enforce
    associations (AccountingStorageEnforce without associations, limits, qos, wckeys or safe) and the script names
    an account the user has no association with: sbatch accepts the job, so this is said, not refused."""
    associations = ctx.cluster.associations if ctx.cluster is not None else None
    named = _named_account(ctx)
    if associations is None or not associations.answered or associations.enforced() is not False or named is None:
        return []
    line, written, account = named
    if account.lower() in associations.accounts():
        return []
    return [Finding(line, f"{written}: {associations.user} has no association with account {account}; this cluster "
                    "does not enforce associations, so sbatch accepts the job",
                    f"AccountingStorageEnforce={associations.enforce}: a job runs without an association, and its "
                    "usage is recorded against an account accounting does not know the user in",
                    f"{associations.source}; scontrol show config",
                    "nothing, if the account is meant; else one of yours: " + ", ".join(associations.accounts())
                    if associations.accounts() else "nothing, if the account is meant")]


def cluster_account(ctx: Context) -> list[Finding]:
    """Applies where the check runs on the script's cluster, accounting answered (`sacctmgr show assoc`) and the
    script (or $SBATCH_ACCOUNT, which sbatch prefers to the script's line) names an account: an account the user
    has no association with, or whose association is limited to other partitions, is refused by sbatch."""
    associations = ctx.cluster.associations if ctx.cluster is not None else None
    named = _named_account(ctx)
    if associations is None or not associations.answered or named is None:
        return []
    line, written, account = named
    mine = associations.accounts()
    if associations.enforced() is False:
        return []  # sbatch takes any account here: account_not_enforced says so
    if account.lower() not in mine:
        return [Finding(line, f"{written}: {associations.user} has no association with account {account}",
                        "sbatch refuses a job charged to an account the user is not associated with (Invalid account "
                        "or account/partition combination specified)", associations.source,
                        f"--account={mine[0]}" + (f" (yours: {', '.join(mine)})" if len(mine) > 1 else " (your only one)")
                        if mine else "ask the site's support to add you to a project's account")]
    allowed = associations.partitions_of(account)
    outside = [name for name in ctx.partitions() if allowed is not None and name.lower() not in allowed]
    partition = ctx.job.get("partition")
    if allowed is not None and outside and len(outside) == len(ctx.partitions()) and partition is not None:
        return [Finding(partition.line, f"{partition.written}: account {account} may be used on {', '.join(allowed)} "
                        "only", "sbatch refuses an account/partition pair the user has no association for",
                        associations.source, f"--partition={allowed[0]}, or an account of yours for "
                        f"{', '.join(outside)}")]
    return []
