"""What the `envrun sbatch --check` rules share: a finding, the script under check with its recipe and
environment, and the helpers that word a fix in the system's own terms. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from math import ceil

from envbuild.launch.allocation import gres_gpus
from envbuild.shared.durations import format_duration, parse_slurm_time
from envbuild.shared.errors import UsageError
from envbuild.shared.versionnumbers import release_in
from envbuild.slurm.batch.resources import JobRequest, plan_resources
from envbuild.slurm.check.shape import JobShape, StepShape

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from envbuild.recipes.protocols import RecipeNode, SystemRecipe
    from envbuild.slurm.check.parse import BatchScript, Directive, SrunLine
    from envbuild.slurm.cluster import ClusterFacts

SBATCH_DOC = "sbatch(1), https://slurm.schedmd.com/sbatch.html"
SRUN_DOC = "srun(1), https://slurm.schedmd.com/srun.html"
TORCHRUN_DOC = "torchrun, https://docs.pytorch.org/docs/stable/elastic/run.html"


LEVELS = ("error", "warning", "info")


@dataclass(frozen=True)
class SlurmOption:
    """An option of sbatch and srun, or one value of it, that Slurm has only from a given release: an older
    sbatch or srun refuses it ('unrecognized option', 'Invalid --gres-flags specification')."""

    option: str  # "--gres-flags"
    value: str | None  # "allow-task-sharing": this value of the option; None: the option itself
    since: tuple[int, int, int]
    source: str
    srun_only: bool = False  # sbatch and salloc refuse it on every release (a job step's option)
    without: str = ""  # what does its work where Slurm lacks it, for the fix

    @property
    def written(self) -> str:
        return self.option + (f"={self.value}" if self.value else "")

    @property
    def since_text(self) -> str:
        major, minor, micro = self.since
        return f"{major}.{minor:02d}.{micro}"

    def given_in(self, options: tuple[str, ...] | list[str]) -> bool:
        """Whether `options` (as --name=value or --flag) hold it; a value also inside a list (--gres-flags=a,b),
        in any case, as Slurm compares them."""
        for word in options:
            name, _eq, value = word.partition("=")
            if name == self.option and (self.value is None or
                                        self.value.lower() in (item.strip().lower() for item in value.split(","))):
                return True
        return False


def _changelog(series: str, release: str) -> str:
    return (f"SchedMD Slurm CHANGELOG/slurm-{series}.md, 'Changes in Slurm {release}', "
            f"https://github.com/SchedMD/slurm/blob/master/CHANGELOG/slurm-{series}.md")


# Options users copy from newer sites' guides, with the release that brought them (SchedMD's changelog; the
# option tables of src/common/slurm_opt.c at each release tag agree). allow-task-sharing is read by srun only:
# srun(1) --gres-flags says so, and sbatch and salloc stop with "only used with srun".
NEWER_SLURM_OPTIONS = (
    SlurmOption("--gres-flags", "allow-task-sharing", (23, 11, 4), f"{_changelog('23.11', '23.11.4')}; {SRUN_DOC} "
                "(--gres-flags: allow-task-sharing is specific to srun)", srun_only=True,
                without="ask for the GPUs per node (--gpus-per-node), not per task, so that every task reaches "
                "the node's GPUs"),
    SlurmOption("--gres-flags", "one-task-per-sharing", (23, 11, 2), _changelog("23.11", "23.11.2")),
    SlurmOption("--gres-flags", "multiple-tasks-per-sharing", (23, 11, 2), _changelog("23.11", "23.11.2")),
    SlurmOption("--tres-per-task", None, (23, 2, 0), _changelog("23.02", "23.02.0rc1")),
    SlurmOption("--segment", None, (24, 5, 0), _changelog("24.05", "24.05.0rc1")),
)


def newer_slurm_option(written: str) -> SlurmOption | None:
    """The entry of NEWER_SLURM_OPTIONS that an option as written (--gres-flags=allow-task-sharing) holds."""
    return next((entry for entry in NEWER_SLURM_OPTIONS if entry.given_in([written])), None)




@dataclass(frozen=True)
class Finding:
    line: int
    what: str  # what is wrong
    why: str  # the reason
    source: str  # where the reason comes from: a recipe citation or a public document
    fix: str  # the corrected option or line
    edit: tuple[int, str] | None = None  # a fix that is one line's new text: (line number, the whole new line)
    rule: str = ""  # the rule's id (its function's name); set by envbuild.slurm.check.pitfalls
    level: str = "warning"  # error: sbatch refuses the job or bash the script; warning; info: nothing to fix


@dataclass(frozen=True)
class FileProbe:
    """What a rule may ask of the file system where the check runs: the directory the job starts in (sbatch's:
    where it is run, i.e. here) and whether a path exists. Given by the caller that reads files
    (pitfalls.check_script_file), so that the rules stay pure."""

    start_dir: str
    exists: Callable[[str], bool]


@dataclass
class Context:
    """The script under check. `recipe` is None where the site has no recipe: only the rules that need no
    site facts run (envbuild.slurm.check.pitfalls), and the helpers here that read the recipe are not called."""

    script: BatchScript
    recipe: SystemRecipe | None
    environ: Mapping[str, str]
    notes: list[str] = field(default_factory=list)
    syntax_error: tuple[int, str] | None = None  # bash -n's first complaint, when it has one
    files: FileProbe | None = None  # where the job starts and what exists there; None: files are not looked at
    cluster: ClusterFacts | None = None  # what the cluster the check runs on says, now; None: not asked
    test_only: tuple[int, str] | None = None  # `sbatch --test-only`'s exit status and message; None: not asked

    def __post_init__(self) -> None:
        if self.script.commands_above_directives:
            # sbatch reads none of the block below the first command; the rules read it as the user meant it,
            # and the commands_above_directives finding says why sbatch does not
            self.script = replace(self.script, directives=[*self.script.directives, *self.script.late_options])
        self.job = JobShape(self.script)

    def steps(self) -> list[tuple[SrunLine, StepShape]]:
        return [(srun, StepShape(srun, self.job)) for srun in self.script.sruns]

    @property
    def site(self) -> SystemRecipe:
        """The recipe, for the rules and helpers that read site facts: check_script runs those only where there is one."""
        if self.recipe is None:
            raise RuntimeError("a site rule ran without a site recipe (check_script skips them)")
        return self.recipe

    @property
    def name(self) -> str:
        return self.recipe.name if self.recipe is not None else "this site"

    @property
    def node(self) -> RecipeNode | None:
        return self.recipe.node if self.recipe is not None else None

    def cpu_partition(self) -> str | None:
        """The job's partition when it is one of the site's CPU partitions (Mahti's medium): the GPU node facts
        of the recipe do not describe its nodes."""
        if self.recipe is None:
            return None
        partitions = self.recipe.partitions
        return next((name for name in self.partitions() if name in partitions and partitions[name].cpu_only), None)

    def slurm_version(self) -> tuple[tuple[int, int, int], str, str] | None:
        """The Slurm version of the cluster the check runs on as (major, minor, micro), as scontrol wrote it, and
        where that was read; None where it is not known (the check runs away from the cluster, or no answer)."""
        cluster = self.cluster
        numbers = release_in(cluster.slurm_version) if cluster is not None else None
        if cluster is None or numbers is None or len(numbers) < 2:
            return None
        major, minor, micro = [*numbers, 0][:3]
        return (major, minor, micro), cluster.slurm_version, cluster.version_source

    def too_old_for(self, entry: SlurmOption) -> bool:
        """The cluster's Slurm is known, and older than the release that brought `entry`."""
        version = self.slurm_version()
        return version is not None and version[0] < entry.since

    def replace_in_line(self, line: int, old: str, new: str) -> tuple[int, str] | None:
        """An edit that writes `new` for `old` in line `line`, where `old` occurs there exactly once."""
        lines = self.script.lines
        if not 1 <= line <= len(lines) or lines[line - 1].count(old) != 1:
            return None
        return line, lines[line - 1].replace(old, new)

    def add_to_directive_line(self, line: int, option: str) -> tuple[int, str] | None:
        """An edit that adds `option` to the #SBATCH line `line`, before its comment (sbatch reads several
        options on one line)."""
        lines = self.script.lines
        if not 1 <= line <= len(lines) or not lines[line - 1].startswith("#SBATCH"):
            return None
        text = lines[line - 1]
        head, hash_, comment = text[len("#SBATCH"):].partition(" #")
        if "'" in head or '"' in head:
            return None
        return line, f"#SBATCH{head.rstrip()} {option}" + (f"  #{comment}" if hash_ else "")

    def partitions(self) -> list[str]:
        """The partitions the job names (sbatch takes a comma-separated list)."""
        found = self.job.get("partition")
        return [p.strip() for p in (found.value or "").split(",") if p.strip()] if found else []

    def gpu_request(self, gpus: int) -> str:
        """The GPU request in the system's form: --gpus-per-node=8, --gres=gpu:v100:4."""
        return (self.site.launch.gpu_request or "--gpus-per-node={gpus}").replace("{gpus}", str(gpus))

    def cpu_limit(self) -> tuple[int, str, str] | None:
        """Slurm CPUs a job may use on one node, why, and the recipe's citations; None without node facts."""
        node = self.site.node
        if node is None:
            return None
        per_core = node.slurm_cpus_per_core
        hint = (self.job.value("hint") or "").lower()
        threads = self.job.value("threads-per-core") or ""
        if (hint == "multithread" or (threads.isdigit() and int(threads) > 1)) and node.threads_per_core > per_core:
            per_core = node.threads_per_core
        limit = node.usable * per_core
        why = f"a {self.name} node has {node.cores} cores"
        sources = [self.site.cite("node.cores")]
        if node.usable < node.cores:
            why += f", {node.cores - node.usable} of them reserved for the operating system: {node.usable} usable"
            sources = [self.site.cite("node.usable_cores")]
        if per_core > 1:
            why += f"; Slurm counts {per_core} hardware threads per core, so {node.usable} cores are {limit} CPUs"
            if node.slurm_cpus_per_core > 1:
                sources.append(self.site.cite("node.slurm_cpus_per_core"))
            else:
                sources.append(self.site.cite("node.threads_per_core"))
        return limit, why, "; ".join(sources)

    def cpus_per_gpu(self) -> int | None:
        """Slurm CPUs that go with one GPU (LUMI-G: 7); None without node facts or GPUs."""
        node = self.site.node
        if node is None or not node.gpus:
            return None
        return (node.cores_per_gpu or node.usable // node.gpus) * node.slurm_cpus_per_core

    def node_memory_mb(self) -> tuple[int, str] | None:
        """Memory a job may ask for on one node, in MB (Slurm's M), and its citation."""
        node = self.site.node
        if node is None:
            return None
        if node.memory_gb:
            return node.memory_gb * 1024, self.site.cite("node.memory_gb")
        if node.memory_per_gpu_gb and node.gpus:
            return node.memory_per_gpu_gb * node.gpus * 1024, self.site.cite("node.memory_per_gpu_gb")
        return None

    def time_seconds(self) -> int | None:
        found = self.job.get("time")
        if found is None or not found.value:
            return None
        try:
            return parse_slurm_time(found.value, "--time")
        except UsageError:
            return None

    def suggest_partition(self, test: bool = False, with_time: bool = True) -> str | None:
        """The partition `envrun sbatch` would choose for this job's nodes, GPUs and (with_time) time: the
        smallest that fits (envbuild.slurm.batch.resources); None when none fits or the system has no partition facts."""
        node = self.site.node
        if node is None or not self.site.partitions:
            return None
        seconds = self.time_seconds() if with_time else None
        gpus = min(self.job.gpus_per_node(), node.gpus)
        for as_test in dict.fromkeys((test, False)):
            request = JobRequest(nodes=self.job.nodes, gpus_per_node=gpus, time=format_duration(seconds) if seconds
                                 else None, account="check", launcher="torchrun", test=as_test)
            try:
                return plan_resources(self.site, request).partition
            except UsageError:
                continue
        return None

    def partition_fix(self, name: str, test: bool = False, with_time: bool = True) -> str | None:
        """`--partition=X` for a job that does not fit partition `name`, saying when X bills whole nodes."""
        other = self.suggest_partition(test, with_time)
        if not other or other == name:
            return None
        node, spec = self.site.node, self.site.partitions[other]
        gpus = self.job.gpus_per_node()
        if spec.full_node and node is not None and node.gpus and gpus < node.gpus:
            return f"--partition={other} (whole nodes: each is billed for all {node.gpus} GPUs)"
        return f"--partition={other}"

    def gpu_request_like(self, gpus: int, directive: Directive) -> str:
        """The GPU request for `gpus`, keeping the other resources of a --gres list (nvme:200)."""
        request = self.gpu_request(gpus)
        if directive.name == "gres" and request.startswith("--gres=") and directive.value:
            others = [entry for entry in directive.value.split(",") if gres_gpus(entry) is None]
            request = ",".join([request, *others])
        return request

    def nodes_for(self, total_gpus: int) -> int:
        node = self.site.node
        return ceil(total_gpus / node.gpus) if node is not None and node.gpus else 1
