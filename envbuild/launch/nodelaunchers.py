"""`srun accelerate launch ...` and `srun deepspeed ...`: one launcher per node, like `srun torchrun`.

Under srun every node runs one launcher task, which starts that node's training processes. The values the
launchers need exist only inside the step (the step's node count, this node's index, its first node, a port),
so the host shim exports them as ENVRUN_* variables (host_lines) and a small program shim puts them on the
launcher's command line:

    /bin/sh -c 'exec accelerate launch --num_machines="$ENVRUN_NNODES" ... "$@"' envrun-accelerate USER-ARGS...

The user's own launcher options, the script and its arguments travel as "$@", never parsed by a shell; an
option the user gave is not added again. The DeepSpeed runner (`deepspeed`) would start the other nodes'
launchers over ssh/pdsh, which is wrong under Slurm: each node runs DeepSpeed's per-node launcher
(`python -m deepspeed.launcher.launch`) instead, with a world_info made from the step's node count.
"""

from __future__ import annotations

from envbuild.launch.args import (
    ACCELERATE_MODULE,
    DEEPSPEED_FLAGS,
    TORCHRUN_MODULE,
    accelerate_uses_torchrun,
    launcher_has,
    launcher_split,
    launcher_value,
    option_key,
)
from envbuild.launch.shims import sh_quote
from envbuild.shared.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from envbuild.launch.sizing import LaunchSize

# deepspeed runner options envrun passes on to deepspeed.launcher.launch, spelled the same there
DEEPSPEED_PASSED = {"--module", "--no_python", "--no_local_rank", "--enable_each_rank_log", "--bind_cores_to_rank",
                    "--bind_core_list", "--master_addr", "--master_port"}
# deepspeed runner options that choose nodes, GPUs or how to reach the other nodes: the allocation decides that
DEEPSPEED_PLACEMENT = {"-H", "--hostfile", "-i", "--include", "-e", "--exclude", "--num_nodes", "--launcher",
                       "--launcher_args", "--ssh_port", "--no_ssh", "--no_ssh_check", "--force_multi", "--node_rank"}
# accelerate launch options that choose the distributed mode: with none of them envrun adds --multi_gpu
ACCELERATE_MODES = ("--multi_gpu", "--cpu", "--tpu", "--use_deepspeed", "--use_fsdp", "--use_megatron_lm", "--config_file")


def option_groups(own: tuple[str, ...], flags: set[str]) -> list[tuple[str, ...]]:
    """A launcher's own options, one tuple of words per option: ('--num_gpus', '4'), ('--module',)."""
    groups: list[tuple[str, ...]] = []
    index = 0
    while index < len(own):
        word = own[index]
        attached = "=" in word if word.startswith("--") else len(word) > 2
        width = 1 if option_key(word) in flags or attached else 2
        groups.append(own[index : index + width])
        index += width
    return groups


def check_launcher_options(kind: str, program: tuple[str, ...]) -> None:
    """Refuse the deepspeed runner's options that have no meaning for its per-node launcher under srun."""
    if kind != "deepspeed":
        return
    for group in option_groups(launcher_split(kind, program)[1], DEEPSPEED_FLAGS):
        key = option_key(group[0])
        if key in DEEPSPEED_PLACEMENT:
            raise UsageError(
                f"deepspeed {group[0]} under srun: the Slurm allocation decides which nodes and GPUs run, and envrun "
                "starts DeepSpeed's per-node launcher on every node of the step itself (no hostfile, pdsh or ssh)",
                f"drop {group[0]}; choose nodes and GPUs with srun/sbatch options (-N, --nodelist, --exclude, "
                "--gpus-per-node), and use --num_gpus N for the first N GPUs of each node")
        if key not in DEEPSPEED_PASSED and key not in ("-m", "--num_gpus", "--num_accelerators"):
            raise UsageError(f"deepspeed {group[0]} under srun: envrun runs DeepSpeed's per-node launcher "
                             "(deepspeed.launcher.launch), which has no such option",
                             "drop it, or run `envrun deepspeed ...` without srun on one node, where the deepspeed "
                             "runner runs as it is; options envrun passes on: -m/--module, --num_gpus, "
                             + ", ".join(sorted(DEEPSPEED_PASSED - {"--module"})))


class NodeLauncher:
    """The host shim lines and the program words of one accelerate or deepspeed launch under srun."""

    def __init__(self, kind: str, program: tuple[str, ...], size: LaunchSize, *, suffix: str, overlays: bool,
                 bind_cpus: bool, environ: Mapping[str, str], notes: list[str], env: list[tuple[str, str]]) -> None:
        self.kind = kind
        self.head, self.own, self.rest = launcher_split(kind, program)
        self.size = size
        self.suffix = suffix
        self.overlays = overlays
        self.bind_cpus = bind_cpus
        self.environ = environ
        self.notes = notes  # the plan's reasons and environment, added to in place
        self.env = env
        if size.tasks_per_node != 1:
            name = "accelerate launch" if kind == "accelerate" else "deepspeed.launcher.launch"
            raise UsageError(f"{size.tasks_per_node} tasks per node, but {name} runs once per node: its node rank is "
                             "$SLURM_NODEID", "drop --ntasks-per-node/-n: envrun runs one task per node")

    def host_lines(self) -> list[str]:
        """Inside the srun task, after the host shim's `first` and `port`: the values of the step."""
        lines = ['export ENVRUN_NNODES="${SLURM_STEP_NUM_NODES:-${SLURM_NNODES:-1}}" ENVRUN_NODE_RANK="${SLURM_NODEID:-0}"',
                 f'export ENVRUN_MASTER_ADDR="${{first}}{self.suffix}" ENVRUN_MASTER_PORT="$port"']
        if self.kind == "deepspeed":
            lines += world_info_lines(self.devices())
        return lines

    def argv(self, affinity: Callable[[bool], list[str]]) -> list[str]:
        """The program words; `affinity(module)` gives the rank step that pins each rank to its cores."""
        if self.kind == "deepspeed":
            return self.deepspeed_argv()
        return self.accelerate_argv(affinity)

    # -- accelerate launch ---------------------------------------------------------------------------------

    def accelerate_argv(self, affinity: Callable[[bool], list[str]]) -> list[str]:
        own, size, suffix = self.own, self.size, self.suffix
        lines: list[str] = []
        added: list[str] = []
        given = launcher_value(own, "--num_machines")
        nodes = given if given and given.isdigit() else "$ENVRUN_NNODES"
        per_node = size.processes or 1
        if given is None:
            added.append('--num_machines="$ENVRUN_NNODES"')
            self.note("--num_machines=$SLURM_STEP_NUM_NODES: the nodes of the step, one accelerate launch on each")
        if not launcher_has(own, "--machine_rank"):
            added.append('--machine_rank="$ENVRUN_NODE_RANK"')
            self.note("--machine_rank=$SLURM_NODEID: this node's index in the step, read in each task")
        if not launcher_has(own, "--main_process_ip"):
            added.append('--main_process_ip="$ENVRUN_MASTER_ADDR"')
            self.note(f"--main_process_ip=<first node of the step>{suffix} (host's scontrol): the rendezvous host is "
                      "machine rank 0")
        if not launcher_has(own, "--main_process_port"):
            added.append('--main_process_port="$ENVRUN_MASTER_PORT"')
            self.note("--main_process_port=<20000 + job id based port>: the same on every node of the step")
        total = launcher_value(own, "--num_processes")
        if total is None:
            added.append(f'--num_processes="$(({nodes.lstrip("$")} * {per_node}))"')
            self.note(f"--num_processes=<nodes> x {per_node}: {per_node} process(es) on each node")
        if not launcher_has(own, *ACCELERATE_MODES):
            why = (f"--multi_gpu: accelerate's launcher that starts several processes per node ({TORCHRUN_MODULE}, "
                   "static rendezvous on machine rank 0)")
            if per_node > 1 or (total is not None and int(total) > 1):
                added.append("--multi_gpu")
                self.note(why)
            elif total is None:
                lines.append(f'if [ "{nodes}" -gt 1 ]; then set -- --multi_gpu "$@"; fi')
                self.note(why + ", when the step has more than one node (one process per node)")
        if launcher_has(own, "--use_deepspeed") and not launcher_has(own, "--deepspeed_multinode_launcher"):
            added.append("--deepspeed_multinode_launcher=standard")
            self.note("--deepspeed_multinode_launcher=standard: every node runs its own launcher under srun; the "
                      "default (pdsh) would start the other nodes' over ssh")
        uses_torchrun = accelerate_uses_torchrun(own)
        if not size.gpus and uses_torchrun and "ACCELERATE_USE_CPU" not in self.environ:
            self.env.append(("ACCELERATE_USE_CPU", "true"))
            self.note("ACCELERATE_USE_CPU=true: no GPUs, and accelerate's multi-process launcher does not tell the "
                      "processes to use the CPU as --cpu would (--cpu allows only one process): Accelerator() then "
                      "runs them as MULTI_CPU with gloo")
        if launcher_has(own, "--cpu") and not launcher_has(own, "--mpirun_hostfile"):
            size.warnings.append("accelerate launch --cpu starts one process per node and gives it no rank (it expects "
                                 "mpirun); fix: leave out --cpu: on nodes without GPUs envrun runs the processes with "
                                 "--multi_gpu and ACCELERATE_USE_CPU=true")
        words = [*own, *self.rest]
        pins = self.bind_cpus and uses_torchrun and not launcher_has(own, "--no_python", "--enable_cpu_affinity")
        if self.rest and pins:
            # --no_python and --module exclude each other in accelerate too: -m moves into the rank step
            module = launcher_has(own, "-m", "--module")
            kept = tuple(word for word in own if option_key(word) not in ("-m", "--module"))
            words = [*kept, "--no_python", *affinity(module), *self.rest]
        launcher = " ".join(sh_quote(word) for word in self.head)
        if self.overlays and self.head[0].rsplit("/", 1)[-1] == "accelerate":  # `python -m` is the overlay's already
            launcher = f"python -m {ACCELERATE_MODULE}"
            self.note(f"accelerate launch as `python -m {ACCELERATE_MODULE}` with the overlay's python, so that "
                      "the launcher and every rank see the overlay's packages")
        lines.append(" ".join(["exec", launcher, *added, '"$@"']))
        return ["/bin/sh", "-c", "\n".join(lines), "envrun-accelerate", *words]

    # -- deepspeed -------------------------------------------------------------------------------------------

    def devices(self) -> int:
        return self.size.processes or 1

    def deepspeed_argv(self) -> list[str]:
        kept: list[str] = []
        for group in option_groups(self.own, DEEPSPEED_FLAGS):
            key = option_key(group[0])
            if key == "-m":
                kept.append("--module")
            elif key not in ("--num_gpus", "--num_accelerators"):
                kept += group
        added = ['--world_info="$ENVRUN_WORLD_INFO"', '--node_rank="$ENVRUN_NODE_RANK"']
        self.note("DeepSpeed's per-node launcher `python -m deepspeed.launcher.launch` on every node instead of the "
                  "deepspeed runner, which would start the other nodes' launchers over ssh/pdsh")
        self.note(f"--world_info: {{node0..node<N-1>: [0..{self.devices() - 1}]}} for the step's N nodes, "
                  "base64 JSON made in each task; --node_rank=$SLURM_NODEID")
        if not launcher_has(self.own, "--master_addr"):
            added.append('--master_addr="$ENVRUN_MASTER_ADDR"')
            self.note(f"--master_addr=<first node of the step>{self.suffix} (host's scontrol)")
        if not launcher_has(self.own, "--master_port"):
            added.append('--master_port="$ENVRUN_MASTER_PORT"')
            self.note("--master_port=<20000 + job id based port>: the same on every node of the step")
        script = " ".join(["exec python -m deepspeed.launcher.launch", *added, '"$@"'])
        return ["/bin/sh", "-c", script, "envrun-deepspeed", *kept, *self.rest]

    def note(self, text: str) -> None:
        self.notes.append(text)


def world_info_lines(devices: int) -> list[str]:
    """Shell lines that export ENVRUN_WORLD_INFO: deepspeed's --world_info for ENVRUN_NNODES nodes with `devices`
    device ids each, {"node0": [0, 1], "node1": [0, 1]} as url-safe base64 (the host's base64), as the deepspeed
    runner encodes it."""
    ids = ", ".join(str(i) for i in range(devices))
    return [
        f'i=0; nodes=; while [ "$i" -lt "$ENVRUN_NNODES" ]; do nodes="$nodes${{nodes:+, }}\\"node$i\\": [{ids}]"; '
        'i=$((i + 1)); done',
        'export ENVRUN_WORLD_INFO="$(printf "{%s}" "$nodes" | base64 | tr -d "\\n" | tr "+/" "-_")"',
    ]
