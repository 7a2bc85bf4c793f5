"""Pure launch planner: the user's command line + recipe + environment -> the exact host command.

Layers, outermost first:
  srun (optional, on the host)
  -> host task shim   /bin/sh -c '<Slurm-derived variables: ranks, MASTER_ADDR, rendezvous>' (one per task)
  -> apptainer exec IMAGE   (`run --no-eval` for an image whose runscript sets up its environment and then
                            runs its arguments, as the LUMI AI Factory images do: envbuild.launch.runscript)
  -> container shim   /bin/sh -c BOOT envrun-task BODY (envbuild.launch.shims: $WITH_CONDA under bash, venv
                      overlays on PATH, the recipe's per-task variables)
  -> the program (torchrun, python, ...) with the user's arguments; under srun, `accelerate launch` and
     `deepspeed` get a program shim that adds the step's values (envbuild.launch.nodelaunchers).
Every shim ends in `exec "$@"`: the user's arguments travel as separate argv words from end to end and
are never joined into a string that a shell parses again. Values that only exist inside a Slurm task
($SLURM_PROCID, the step's node list) are read by the host shim with the host's Slurm tools.

Whose variables go where: the host processes (srun, the host shim, apptainer) get only envrun's own plan
(the recipe's variables, thread counts, Slurm's). The `env:` of the envrun config and of a project's
envrun.yaml goes into the container only, as APPTAINERENV_NAME (SINGULARITYENV_): apptainer sets NAME
inside and nothing on the host reads it, so a project's LD_PRELOAD or PATH cannot reach srun or
apptainer. apptainer evaluates those values as shell text unless it runs with --no-eval, so they are
escaped for that: the program sees each value exactly as written.
"""

from __future__ import annotations

from envbuild.host.node import GPU_RUNTIME_FLAGS
from envbuild.launch.args import (
    NODE_LAUNCHERS,
    PER_NODE_LAUNCHERS,
    TORCHRUN_MODULE,
    has_option,
    launcher_kind,
    option_value,
    split_srun,
    torchrun_has,
    torchrun_own_options,
    torchrun_passes_local_rank,
    torchrun_split,
)
from envbuild.launch.launchrequest import LaunchPlan, LaunchRequest
from envbuild.launch.runscript import GPU_SWITCHES
from envbuild.launch.shims import (
    BOOT,
    TASK_SHIM_NAME,
    activation_lines,
    overlay_lines,
    rank_affinity_script,
    sampler_start_lines,
    sh_quote,
    signal_record_line,
)
from envbuild.launch.sizing import LAUNCHER_NAMES, LaunchSize, size_launch
from envbuild.launch.visibility import check_visibility
from envbuild.shared.envnames import ENV_NAME_FIX, env_name_problem, shell_evaluated_literally
from envbuild.shared.errors import UsageError

TYPE_CHECKING = False  # typing itself is not imported: envrun's start-up
if TYPE_CHECKING:
    from envbuild.launch.nodelaunchers import NodeLauncher

# typing, dataclasses and shlex stay off envrun's start-up path (their imports weigh on every launch); LaunchRequest and
# LaunchPlan live in envbuild.launch.launchrequest and are imported from here by the callers.
__all__ = ["TASK_SHIM_NAME", "LaunchPlan", "LaunchRequest", "plan_launch"]

# Host variables through which $WITH_CONDA reaches the container: itself (apptainer and singularity pass the host's
# environment on), the runtimes' prefixed forms, and the variables of their --env and --env-file options.
WITH_CONDA_SOURCES = ("WITH_CONDA", "APPTAINERENV_WITH_CONDA", "SINGULARITYENV_WITH_CONDA", "APPTAINER_ENV",
                      "SINGULARITY_ENV", "APPTAINER_ENV_FILE", "SINGULARITY_ENV_FILE", "SINGULARITY_ENVFILE")


def plan_launch(request: LaunchRequest) -> LaunchPlan:
    if not request.command:
        raise UsageError("no command given", "e.g. `envrun --image IMG.sif srun torchrun train.py`")
    words = request.command
    srun_opts: tuple[str, ...] | None = None
    program = words
    if words[0] == "srun":
        srun_opts, program = split_srun(words)
        if not program:
            raise UsageError("srun needs a program to run", "e.g. `envrun --image IMG.sif srun torchrun train.py`")
    return _Planner(request, srun_opts, program).plan()


class _Planner:
    def __init__(self, request: LaunchRequest, srun_opts: tuple[str, ...] | None, program: tuple[str, ...]) -> None:
        self.request = request
        self.recipe = request.recipe
        self.srun_opts = srun_opts  # None: no srun
        self.program = program  # the program and its arguments
        self.environ = request.environ
        self.reasons: list[str] = []
        if request.system_reason:
            self.reasons.append(f"system {self.recipe.name}: {request.system_reason}")
        self.reasons += request.notes
        self.env: list[tuple[str, str]] = []
        self.unset: list[str] = []
        self.time_limit = ""  # the step's time limit in words, for envrun's message when it is reached
        self.warnings: list[str] = []
        self.program_binds: list[str] = []  # binds added for the program file (envbuild.launch.visibility)
        self.report = False  # whether the host shim starts the report's sampler (envbuild.report)

    def note(self, text: str) -> None:
        self.reasons.append(text)

    def plan(self) -> LaunchPlan:
        kind = launcher_kind(self.program)
        is_torchrun = kind == "torchrun"
        if self.request.step_timeout and self.srun_opts is None:
            raise UsageError(f"{self.request.step_timeout_from} {self.request.step_timeout}: a step time limit needs "
                             "srun (it becomes srun's --time)",
                             f"run under srun (`envrun srun {' '.join(self.program[:2])} ...`), or use coreutils' "
                             f"`timeout {self.request.step_timeout} envrun ...` without srun")
        per_node = self.srun_opts is not None and kind in NODE_LAUNCHERS  # accelerate launch, deepspeed
        if self.srun_opts is not None:
            self.refuse_forbidden(self.srun_opts)
        if per_node:  # accelerate launch, deepspeed: their module only for them
            from envbuild.launch.nodelaunchers import check_launcher_options

            check_launcher_options(kind, self.program)
        size = size_launch(self.recipe, self.srun_opts, self.program, self.request.allocation, self.request.host,
                           slurm=self.request.slurm, torch=self.request.torch)
        self.size = size
        self.standalone = is_torchrun and self.wants_standalone()
        outer: list[str] = []
        host_shim: list[str] = []
        launcher = None
        if self.srun_opts is not None:
            outer = self.srun_argv(size)
            if per_node:
                from envbuild.launch.nodelaunchers import NodeLauncher

                launcher = NodeLauncher(kind, self.program, size, suffix=self.recipe.launch.master_addr_suffix,
                                        overlays=bool(self.request.overlays), bind_cpus=self.recipe.launch.bind_cpus,
                                        environ=self.environ, notes=self.reasons, env=self.env)
            host_shim = self.host_shim(kind, launcher)
        container_shim = self.container_shim()
        if self.request.runscript:
            self.leave_gpus_to_envrun()
        if is_torchrun:
            program = self.torchrun_argv(size)
        elif launcher is not None:
            self.reasons += size.notes
            size.notes = []
            program = launcher.argv(lambda module: self.rank_affinity(size, module))
        else:
            program = list(self.program)
        self.common_env(size)
        argv = [*outer, *host_shim, *self.container_argv(), *container_shim, *program]
        step = ("" if self.srun_opts is None or has_option(self.srun_opts, "--pty")
                else kind if kind in PER_NODE_LAUNCHERS else "rank")
        if step:
            self.note("envrun waits for srun and names the cause in one line when the step fails (a rank's exit code "
                      "or signal, a time limit, a failed node), read from srun's exit status and messages")
        return LaunchPlan(argv=tuple(argv), env=tuple(self.env), unset=tuple(self.unset), reasons=tuple(self.reasons),
                          warnings=(*self.request.warnings, *size.warnings, *self.warnings), step=step,
                          time_limit=self.time_limit, program_binds=tuple(self.program_binds),
                          report=self.report and bool(step))

    # -- srun ----------------------------------------------------------------------------------------

    def srun_argv(self, size: LaunchSize) -> list[str]:
        opts = self.srun_opts or ()
        recipe = self.recipe
        argv = ["srun", *opts, *size.srun_options]
        self.reasons += size.notes
        size.notes = []
        if self.request.step_timeout:
            from envbuild.launch.steptime import srun_time_limit  # with durations: only for a step time limit

            option, self.time_limit, why = srun_time_limit(opts, self.request.step_timeout,
                                                          self.request.step_timeout_from)
            argv.append(option)
            self.note(why)
        elif has_option(opts, "-t", "--time"):
            self.time_limit = f"srun --time={option_value(opts, '-t', '--time')}"
        if not has_option(opts, "-K", "--kill-on-bad-exit"):
            argv.append("--kill-on-bad-exit=1")
            self.note("--kill-on-bad-exit=1: a crashed rank ends the whole step instead of leaving the others hanging")
        for target, source in recipe.launch.srun_env_from.items():
            if source in self.environ and target not in self.environ:
                self.env.append((target, self.environ[source]))
                self.note(f"{target}=${source}: {recipe.cite('launch.srun_env_from.' + target)}")
        return argv

    def refuse_forbidden(self, opts: tuple[str, ...]) -> None:
        for rule in self.recipe.launch.forbidden_srun_options:
            used = [name for name in rule.options if has_option(opts, name)]
            if used and not (rule.unless and any(word == rule.unless for word in opts)):
                gpus = self.recipe.node.gpus if self.recipe.node is not None else 1
                request = (self.recipe.launch.gpu_request or "--gpus-per-node={gpus}").replace("{gpus}", str(gpus))
                fix = f"request GPUs per node ({request}) instead"
                if rule.unless:
                    fix += f", or add {rule.unless}"
                raise UsageError(f"{used[0]} on {self.recipe.name}: {rule.why}", fix)

    # -- shims ---------------------------------------------------------------------------------------

    def host_shim(self, kind: str, launcher: NodeLauncher | None) -> list[str]:
        """Per-task setup on the host, inside the srun task: Slurm values exist only there."""
        recipe = self.recipe
        where = ['first=$(scontrol show hostnames "${SLURM_STEP_NODELIST:-$SLURM_JOB_NODELIST}" | head -n 1)',
                 # 20000-31999: below Linux's ephemeral range (32768-60999 by default, net.ipv4.
                 # ip_local_port_range in https://docs.kernel.org/networking/ip-sysctl.html), where srun,
                 # slurmstepd and every outgoing connection take ports. The old 20000-59999 put job 1058's
                 # port (36928) there, and CI failed with EADDRINUSE in the TCPStore.
                 "port=$(( 20000 + (${SLURM_JOB_ID:-0} * 16 + ${SLURM_STEP_ID:-0}) % 12000 ))"]
        lines: list[str] = []
        suffix = recipe.launch.master_addr_suffix
        if kind == "torchrun" or launcher is not None:
            own = torchrun_own_options(self.program)
            if launcher is not None:
                lines += [*where, *launcher.host_lines()]
            elif not self.standalone and not torchrun_has(own, "--standalone", "--rdzv-endpoint", "--master-addr"):
                lines += [
                    *where,
                    # c10d rendezvous on the step's first node. is_host is set explicitly: torch compares
                    # hostnames to pick the store's host, which fails with InfiniBand names (suffix) or
                    # containers whose hostname differs from the Slurm node name.
                    f'export PET_RDZV_BACKEND=c10d PET_RDZV_ENDPOINT="${{first}}{suffix}:$port" PET_RDZV_ID="${{SLURM_JOB_ID:-0}}"',
                    'export PET_NNODES="${SLURM_STEP_NUM_NODES:-${SLURM_NNODES:-1}}"',
                    '[ "${SLURMD_NODENAME:-}" = "$first" ] && is_host=1 || is_host=0',
                    'export PET_RDZV_CONF="is_host=$is_host"',
                ]
                self.note("c10d rendezvous: torchrun --nnodes=$SLURM_STEP_NUM_NODES --rdzv-id=$SLURM_JOB_ID "
                          f"--rdzv-endpoint=<first node>{suffix}:<20000 + job id based port> (as PET_* variables, "
                          "so options you give torchrun still win)")
            # Lightning versions that try SLURMEnvironment first pick it whenever SLURM_NTASKS is set and take
            # the world size from it (1 launcher per node); without it they see torchrun's ranks
            # (TorchElasticEnvironment). SLURM_NTASKS counts launchers here, not ranks, so it misleads anyway.
            lines.append("unset SLURM_NTASKS SLURM_NPROCS")
            self.note("SLURM_NTASKS unset inside the step: it counts launchers, not ranks, and Lightning versions that "
                      f"check Slurm first would take the world size from it instead of {LAUNCHER_NAMES[kind]}'s")
        else:
            lines += [
                *where,
                'export RANK="$SLURM_PROCID" LOCAL_RANK="$SLURM_LOCALID" WORLD_SIZE="$SLURM_NTASKS"',
                # Tasks on this node: the step's "2(x3),1" list, walked to this node's entry.
                'n="${SLURM_NODEID:-0}"; lws=1; IFS=,; for e in ${SLURM_STEP_TASKS_PER_NODE:-1}; do '
                'c=${e%%(*}; r=1; case $e in *"(x"*) r=${e#*(x}; r=${r%)};; esac; '
                'if [ "$n" -lt "$r" ]; then lws=$c; break; fi; n=$((n - r)); done; unset IFS',
                'export LOCAL_WORLD_SIZE="$lws"',
                f'export MASTER_ADDR="${{first}}{suffix}" MASTER_PORT="$port"',
            ]
            per_task = self.size.gpus_per_task
            if self.size.slurm_binds_gpus and recipe.launch.per_task_gpu_env:
                self.note(f"{', '.join(recipe.launch.per_task_gpu_env)} not set in each task: srun --gpu-bind gives "
                          "each task its GPU")
            for name, source in () if self.size.slurm_binds_gpus else recipe.launch.per_task_gpu_env.items():
                if per_task <= 1:
                    lines.append(f'export {name}="${source}"')
                    self.note(f"{name}=${source} in each task: {recipe.cite('launch.per_task_gpu_env.' + name)}")
                    continue
                # a task that owns several GPUs sees all of them: task i gets GPUs i*k .. i*k+k-1
                devices = ",".join(f"$(( ${source} * {per_task} + {k} ))" for k in range(per_task))
                lines.append(f'export {name}="{devices}"')
                self.note(f"{name}: GPUs ${source}*{per_task} .. +{per_task - 1} in each task, {per_task} per task "
                          f"({recipe.cite('launch.per_task_gpu_env.' + name)})")
            self.note("RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE from SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS, "
                      "SLURM_STEP_TASKS_PER_NODE; MASTER_ADDR = first node of the step"
                      + (f" + '{suffix}'" if suffix else "") + " (host's scontrol), MASTER_PORT from the job id")
        lines.append('exec "$@"')
        return ["/bin/sh", "-c", "\n".join([*self.report_lines(), *lines]), TASK_SHIM_NAME]

    def report_lines(self) -> list[str]:
        """The job report's sampler, one per node: the node's first task starts it in the background before it
        becomes the container, with its own pid (the task's root) and its parent's (slurmstepd: all tasks of the
        step on this node) to watch. Its records travel in the task's stderr, which envrun reads (envbuild.report.
        wire); so a step whose stderr srun sends elsewhere, or a --pty step that envrun does not supervise, gets
        no report. It starts first, before the shim narrows the task's visible GPUs to the rank's own: the
        sampler reads every GPU the step holds on the node."""
        sampler = self.request.report_sampler
        opts = self.srun_opts or ()
        if not sampler:
            return []
        if has_option(opts, "--pty"):
            self.note("no job report: a --pty step is interactive, and envrun does not read its stderr")
            return []
        if has_option(opts, "-e", "--error", "-o", "--output"):
            self.note("no job report: srun --output/--error sends the tasks' stderr to a file, and the nodes' samplers "
                      "report through it (drop the option, or redirect envrun's own stderr instead)")
            return []
        self.report = True
        self.note("job report: one sampler per node (the node's first task starts it) reads the step's GPUs and CPUs "
                  "every few seconds; envrun prints the summary when the step ends (--no-report: none)")
        return sampler_start_lines(" ".join(sh_quote(word) for word in sampler))  # with the step's report key

    def container_shim(self) -> list[str]:
        """Inside the container: activate the image's conda when it says how ($WITH_CONDA, LUMI images), put
        the venv overlays on PATH, and set the recipe's variables whose values refer to others (${USER},
        ${SLURM_NODEID}): they can only be expanded in the task itself. Where none of it applies, no shim: the
        container starts the program itself."""
        activation_note = len(self.reasons)
        lines: list[str] = []
        mounts = tuple(mount for _, mount in self.request.overlays)
        lines += overlay_lines(mounts)
        if mounts:
            self.note(f"PATH starts with {', '.join(m + '/bin' for m in reversed(mounts))}, VIRTUAL_ENV={mounts[-1]}: "
                      "the overlays' venvs, the last given on top")
        for key, value in self.recipe.env.items():
            if "$" in value and key not in self.environ:
                lines.append(f'export {key}="${{{key}-{value}}}"')
                self.note(f"{key}={value}: {self.recipe.cite('env.' + key)}, expanded in each task")
        kind = self.signal_record_kind()
        if kind:
            lines.append(signal_record_line(kind))
            self.note(f"$ENVRUN_SIGNAL_DIR: the {'program' if kind == 'rank' else 'launcher'} records its process "
                      f"so that `envrun signal-ranks` can pass the checkpoint signal to the "
                      f"{'program' if kind == 'rank' else 'training processes it starts'}")
        activation = self.with_conda_from()
        if activation is None and not lines:
            self.reasons.insert(activation_note, "no shell in the container before the program: nothing can set "
                                "$WITH_CONDA (not the image's environment scripts, not this host's variables, not "
                                "the envrun config), and there are no overlays or per-task variables")
            return []
        self.reasons.insert(activation_note, "$WITH_CONDA is evaluated inside the container when the image sets it "
                            "(LUMI PyTorch images), by bash when the image has it; envrun stops if the activation "
                            "fails" + (f" (it may be set: {activation})" if activation else ""))
        lines = [*activation_lines(self.request.runtime.env_prefix), *lines, 'exec "$@"']
        return ["/bin/sh", "-c", BOOT, TASK_SHIM_NAME, "\n".join(lines)]

    def with_conda_from(self) -> str | None:
        """What may set $WITH_CONDA in the container ("" where envrun did not read the image), None where nothing
        can: the image's environment scripts (envbuild.launch.imageenv), this host's variables (apptainer passes
        them on, with APPTAINERENV_/SINGULARITYENV_ and --env/--env-file through their variables), the envrun
        config's and the recipe's env:, the image's runscript where envrun starts it."""
        if self.request.image_with_conda is None:
            return ""
        for name in WITH_CONDA_SOURCES:
            if name in self.environ:
                return f"${name} is set on this host"
        if any(key == "WITH_CONDA" for key, _ in self.request.env) or "WITH_CONDA" in self.recipe.env:
            return "the envrun config or the system recipe sets it"
        if self.request.runscript:
            return "the image's runscript runs before the program"
        return self.request.image_with_conda or None

    # -- torchrun ------------------------------------------------------------------------------------

    def torchrun_argv(self, size: LaunchSize) -> list[str]:
        head, own, rest = torchrun_split(self.program)
        added: list[str] = []
        if size.processes is not None and not torchrun_has(own, "--nproc-per-node"):
            added.append(f"--nproc-per-node={size.processes}")
        if size.numa_binding:
            added.append(f"--numa-binding={size.numa_binding}")
        self.reasons += size.notes
        size.notes = []
        if self.standalone:
            added.append("--standalone")
            self.note("--standalone: " + ("one node, so torchrun hosts its own rendezvous on a free port"
                                          if self.srun_opts is not None else "no srun, so this is a single-node run"))
        launcher = list(head)
        if self.request.overlays and head[0].rsplit("/", 1)[-1] == "torchrun":
            # The image's torchrun script starts with the base's Python, which does not see the overlay's
            # packages; so would every rank it starts itself (sys.executable). The overlay's python does.
            # (`python -m ...` as the user wrote it is already the python first on PATH: the overlay's.)
            launcher = ["python", "-m", TORCHRUN_MODULE]
            self.note(f"torchrun as `python -m {TORCHRUN_MODULE}` with the overlay's python, so that the launcher "
                      "and every rank see the overlay's packages")
        if self.uses_rank_shim():
            # --no-python and --module exclude each other in torchrun: -m moves into the rank step.
            module = any(w in ("-m", "--module") for w in own)
            own = tuple(w for w in own if w not in ("-m", "--module"))
            return [*launcher, *added, *own, "--no-python", *self.rank_affinity(size, module), *rest]
        return [*launcher, *added, *own, *rest]

    def uses_rank_shim(self) -> bool:
        """Whether torchrun starts each rank through envrun's rank shim (CPU affinity, signal record)."""
        _, own, rest = torchrun_split(self.program)
        return bool(rest) and self.recipe.launch.bind_cpus and not torchrun_passes_local_rank(self.program) and \
            not self.size.numa_binding and not torchrun_has(own, "--no-python", "--numa-binding", "--run-path")

    def signal_record_kind(self) -> str | None:
        """How the program is recorded for `envrun signal-ranks` in a --requeue batch job: `rank` (the program
        is a training process), `children` (a launcher whose children are), or None (the rank shim records
        each rank itself, or no batch script asked)."""
        if "ENVRUN_SIGNAL_DIR" not in self.environ:
            return None
        kind = launcher_kind(self.program)
        if kind == "torchrun":
            return None if self.uses_rank_shim() else "children"
        # accelerate's and deepspeed's ranks are the launcher's children (ranks that also pass through the
        # rank shim are recorded twice; envrun signal-ranks sends each pid one signal)
        return "children" if kind in NODE_LAUNCHERS else "rank"

    def wants_standalone(self) -> bool:
        own = torchrun_own_options(self.program)
        if torchrun_has(own, "--standalone", "--rdzv-endpoint", "--master-addr", "--nnodes"):
            return False
        return self.srun_opts is None or self.single_node()

    def single_node(self) -> bool:
        opts = self.srun_opts or ()
        nodes = option_value(opts, "-N", "--nodes") or self.environ.get("SLURM_JOB_NUM_NODES") or "1"
        return nodes.split("-")[0].split(":")[0] == "1"

    def rank_affinity(self, size: LaunchSize, module: bool) -> list[str]:
        """torchrun --no-python runs this before the rank's Python: it narrows the CPU affinity to the
        rank's cores, then execs `python -u script args` exactly as torchrun itself would. The cores are
        the recipe's GPU-to-core map on a whole node; otherwise the task's own CPUs (which only Slurm knows
        until the task runs), split evenly by LOCAL_RANK of LOCAL_WORLD_SIZE."""
        table = ";".join(f"{rank}:{','.join(map(str, cores))}" for rank, cores in enumerate(size.rank_cores or ()))
        script = rank_affinity_script(record="ENVRUN_SIGNAL_DIR" in self.environ)
        self.env.append(("ENVRUN_RANK_CORES", table))
        if not table:
            self.note("per-rank CPU affinity: the task's CPUs split evenly between its ranks, applied before each "
                      "rank's Python starts")
        else:
            self.note(f"per-rank CPU affinity {table}, applied before each rank's Python starts")
        return ["/bin/sh", "-c", script, "envrun-rank", *(["-m"] if module else [])]

    # -- container and environment ------------------------------------------------------------------------

    def leave_gpus_to_envrun(self) -> None:
        """The runscript's own GPU choice by Slurm task (ROCR_USE_SLURM_LOCALID=1: one GPU, $SLURM_LOCALID) is
        right only for one task per GPU; envrun's plan says which GPUs each task sees, so envrun's wins."""
        prefix = self.request.runtime.env_prefix
        for switch in GPU_SWITCHES:
            for name in (switch, prefix + switch):
                if name in self.environ:
                    self.unset.append(name)
                    self.note(f"{name} unset: with it the image's runscript would give each task the single GPU "
                              "$SLURM_LOCALID, and a torchrun launcher (local id 0) with all its ranks only GPU 0; "
                              "envrun sets the visible GPUs per task itself")

    def runtime_verbosity(self) -> list[str]:
        """--quiet (a global option, before exec/run): the runtime's INFO lines say nothing about the user's run
        (apptainer without setuid prints `INFO: gocryptfs not found, will not be able to use gocryptfs` at every
        start); its warnings and errors still show. Kept with envrun --explain."""
        if self.request.runtime_info:
            return []
        self.note(f"{self.request.runtime.name} --quiet: without its INFO lines, which say nothing about this run "
                  "(warnings and errors still show; envrun -v keeps them)")
        return ["--quiet"]

    def container_argv(self) -> list[str]:
        request, recipe = self.request, self.recipe
        runtime = [request.runtime.path, *self.runtime_verbosity()]
        if request.runscript:
            argv = [*runtime, "run", "--no-eval", *recipe.runtime.flags]
            self.note(f"{request.runtime.name} run --no-eval, not exec: {request.runscript}, as `singularity run` "
                      "would; --no-eval passes the arguments to it as they are, without a shell's eval")
        else:
            argv = [*runtime, "exec", *recipe.runtime.flags]
        if recipe.runtime.flags:
            self.note(f"{' '.join(recipe.runtime.flags)}: {recipe.cite('runtime.flags')}")
        elif recipe.node is None and self.size.node.gpu_vendor in GPU_RUNTIME_FLAGS:
            flag = GPU_RUNTIME_FLAGS[self.size.node.gpu_vendor]
            argv.append(flag)
            self.note(f"{flag}: {self.size.node.why['gpus']}")
        multinode = self.srun_opts is not None and not self.single_node()
        recipe_binds = [*recipe.binds, *(recipe.multinode_binds if multinode else ())]
        present = [b for b in recipe_binds if b not in request.missing_recipe_binds]
        binds = list(dict.fromkeys([request.cwd, *present, *request.binds]))
        if request.host_paths is not None:
            seen = check_visibility(self.program, request.cwd, binds, recipe.runtime.flags, self.environ,
                                    request.host_paths)
            binds += seen.binds
            self.program_binds += seen.binds
            self.reasons += seen.notes
            self.warnings += seen.warnings
        for bind in binds:
            argv += ["--bind", bind]
        if present:
            self.note(f"binds {', '.join(present)}: {recipe.cite('binds')}")
        if request.missing_recipe_binds:
            self.note(f"skipped recipe binds missing on this host: {', '.join(request.missing_recipe_binds)}")
        if request.overlays:
            from envbuild.launch.overlays import checked_overlays  # off the path of launches without overlays

            for path, mount in checked_overlays(request.overlays):
                argv += ["--bind", f"{path}:{mount}:image-src=/,ro"]
                self.note(f"overlay {path} mounted read-only at {mount}")
        argv += ["--pwd", request.cwd, request.image]
        return argv

    def common_env(self, size: LaunchSize) -> None:
        environ, recipe = self.environ, self.recipe
        self.reasons += size.notes
        if "OMP_NUM_THREADS" not in environ and size.threads is not None:
            self.env.append(("OMP_NUM_THREADS", str(size.threads)))
        if "TOKENIZERS_PARALLELISM" not in environ:
            self.env.append(("TOKENIZERS_PARALLELISM", "false"))
            self.note("TOKENIZERS_PARALLELISM=false: tokenizer threads would fight the DataLoader workers after fork")
        for key, value in recipe.env.items():
            if key not in environ and "$" not in value:
                self.env.append((key, value))
                self.note(f"{key}: {recipe.cite('env.' + key)}")
        self.container_env()
        net = recipe.network.nccl_net
        if net and (self.request.strict_net or recipe.network.strict_net) and "NCCL_NET" not in environ:
            self.env.append(("NCCL_NET", net))
            self.note(f"NCCL_NET={net}: --strict-net ({recipe.cite('network.nccl_net')}): NCCL/RCCL fail at start "
                      "instead of falling back to TCP sockets")

    def container_env(self) -> None:
        """The envrun config's and the project's variables, for the container only (see the module's
        docstring); a variable the caller's environment already sets keeps that value, as before."""
        prefix, environ = self.request.runtime.env_prefix, self.environ
        evaluated = not self.request.runscript and "--no-eval" not in self.recipe.runtime.flags
        for key, value in self.request.env:
            problem = env_name_problem(key)
            if problem:
                raise UsageError(f"env: {problem} (from the envrun config or envrun.yaml)", ENV_NAME_FIX)
            if key in environ or prefix + key in environ:
                continue
            self.env.append((prefix + key, shell_evaluated_literally(value) if evaluated else value))
            self.note(f"{key}: envrun config / envrun.yaml, set in the container only ({prefix}{key}): srun and "
                      f"{self.request.runtime.name} on the host do not see it")
