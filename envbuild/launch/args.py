"""Reading the user's srun and launcher command lines: which launcher a command starts, which words are
options, which take a value, where the program starts. Pure, and light (envrun's start-up path)."""

from __future__ import annotations

from envbuild.shared.errors import UsageError

# The launchers envrun knows, one home for every list of them (`envrun sbatch --launcher`, the batch plan, the
# script check, the launch plan): torchrun, accelerate and deepspeed start a node's training processes themselves
# (one launcher task per node); srun starts one task per rank. Plain tuples in this light module, because envrun's
# start-up path reads them.
LAUNCHERS = ("torchrun", "srun", "accelerate", "deepspeed")
PER_NODE_LAUNCHERS = tuple(name for name in LAUNCHERS if name != "srun")
# the per-node launchers envrun drives through a program shim (envbuild.launch.nodelaunchers); torchrun has its own
NODE_LAUNCHERS = tuple(name for name in PER_NODE_LAUNCHERS if name != "torchrun")

# Which launcher a command line starts, one home for every reader of command lines: envrun's launch plan
# (launchplan, sizing), the program-file check (visibility), envrun sbatch's training step (slurm.batch) and the
# batch-script check (slurm.check.programs). tests/launch/test_launchers.py holds them to it.
# Programs that are a launcher by their name (a path's last part): name -> (kind, the words that must follow
# it). JSC's torchrun_jsc is torchrun with a fixed rendezvous for its systems, with torchrun's options
# (https://github.com/HelmholtzAI-FZJ/torchrun_jsc).
LAUNCHER_PROGRAMS = {
    "torchrun": ("torchrun", ()), "torchrun_jsc": ("torchrun", ()), "torchrun-jsc": ("torchrun", ()),
    "accelerate": ("accelerate", ("launch",)), "deepspeed": ("deepspeed", ()),
}
# The launchers' own modules, `python -m MODULE` with the launcher's options and script after it
TORCHRUN_MODULE = "torch.distributed.run"
ACCELERATE_MODULE = "accelerate.commands.launch"
# torch.distributed.launch is torchrun's deprecated predecessor: torchrun's options and --use-env; without
# --use-env it passes --local-rank=N to the program, before the script's own arguments.
TORCH_LAUNCH_MODULE = "torch.distributed.launch"
LAUNCHER_MODULES = {
    TORCHRUN_MODULE: "torchrun", TORCH_LAUNCH_MODULE: "torchrun",
    ACCELERATE_MODULE: "accelerate", "deepspeed.launcher.runner": "deepspeed",
}

# srun options that take their value as the next word (`-n 2`, `--nodes 2`). Others are flags,
# or take their value after '=' (`--exclusive=user`), which is unambiguous.
SRUN_SHORT_WITH_VALUE = set("AbcCdDeGiJLmnNopqrStTwWx")
SRUN_LONG_WITH_VALUE = {
    "account", "acctg-freq", "begin", "bcast", "chdir", "comment", "constraint", "container", "core-spec",
    "cores-per-socket", "cpu-bind", "cpu-freq", "cpus-per-gpu", "cpus-per-task", "deadline", "delay-boot",
    "dependency", "distribution", "error", "export", "gpu-bind", "gpu-freq", "gpus", "gpus-per-node",
    "gpus-per-socket", "gpus-per-task", "gres", "gres-flags", "hint", "input", "job-name", "jobid", "licenses",
    "mem", "mem-bind", "mem-per-cpu", "mem-per-gpu", "mincpus", "mpi", "network", "nice", "nodefile", "nodelist",
    "nodes", "ntasks", "ntasks-per-core", "ntasks-per-gpu", "ntasks-per-node", "ntasks-per-socket", "output",
    "partition", "power", "prolog", "propagate", "qos", "relative", "reservation", "signal", "sockets-per-node",
    "task-epilog", "task-prolog", "thread-spec", "threads-per-core", "time", "time-min", "tmp", "uid", "gid",
    "wait", "wckey", "exclude", "extra-node-info", "switches", "cluster-constraint", "clusters", "het-group",
    # NVIDIA's pyxis plugin adds these to srun (https://github.com/NVIDIA/pyxis, "Usage"): the image is an
    # option's value, never the program
    "container-image", "container-mounts", "container-workdir", "container-name", "container-save",
    "container-env",
}
# torchrun options that take their value as the next word; `_` and `-` are interchangeable in torchrun.
TORCHRUN_WITH_VALUE = {
    "nnodes", "nproc-per-node", "rdzv-backend", "rdzv-endpoint", "rdzv-id", "rdzv-conf", "max-restarts",
    "monitor-interval", "start-method", "role", "node-rank", "master-addr", "master-port", "local-addr",
    "log-dir", "redirects", "tee", "local-ranks-filter", "logs-specs", "numa-binding", "event-log-handler",
    "signals-to-handle", "r", "t",
}
# torchrun options that take no value (`-` and `_` interchangeable); the others before the script take one
TORCHRUN_FLAGS = ("standalone", "no-python", "run-path", "m", "module")


# --- parsing --------------------------------------------------------------------------------------


def split_srun(words: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """("srun", "-N", "2", "--gres=gpu:4", "torchrun", ...) -> (srun options, program and its args)."""
    assert words and words[0] == "srun"
    index = 1
    while index < len(words):
        word = words[index]
        if word == "--":
            return words[1:index], words[index + 1 :]
        if not word.startswith("-") or word == "-":
            break
        if word.startswith("--"):
            name = word[2:].split("=", 1)[0]
            index += 2 if ("=" not in word and name in SRUN_LONG_WITH_VALUE) else 1
        else:
            letter = word[1:2]
            index += 2 if (letter in SRUN_SHORT_WITH_VALUE and len(word) == 2) else 1
    if index > len(words):
        raise UsageError(f"srun option {words[-1]!r} needs a value", "e.g. `srun -N 2 torchrun train.py`")
    return words[1:index], words[index:]


def has_option(words: tuple[str, ...], *names: str) -> bool:
    """Whether any of `names` (e.g. '-n', '--ntasks') occurs as `-n 2`, `-n2`, `--ntasks=2` or `--ntasks 2`."""
    return option_value(words, *names) is not None or any(w in names for w in words)


def option_value(words: tuple[str, ...], *names: str) -> str | None:
    for index, word in enumerate(words):
        for name in names:
            if word == name and index + 1 < len(words):
                return words[index + 1]
            if name.startswith("--") and word.startswith(name + "="):
                return word.split("=", 1)[1]
            if len(name) == 2 and not word.startswith("--") and word.startswith(name) and len(word) > 2:
                return word[2:]
    return None


def is_python(word: str) -> bool:
    """python, python3, python3.12, or a path to one."""
    name = word.rsplit("/", 1)[-1]
    return name == "python" or (name.startswith("python") and name[6:].replace(".", "").isdigit())


def python_program(words: tuple[str, ...]) -> tuple[str, int] | None:
    """What `python [options] ...` (words[0] is Python) runs, read as Python reads its options: (MODULE, the
    index after it) for `-m MODULE` or `-mMODULE`, ("", the script's index) for a script; None for -c code,
    stdin (`-`) or no program."""
    index = 1
    while index < len(words):
        word = words[index]
        if word == "--":
            index += 1
            break
        if word == "-" or not word.startswith("-"):
            break
        if word.startswith("--"):  # --check-hash-based-pycs MODE; the others (--version, --help) take none
            index += 2 if word == "--check-hash-based-pycs" else 1
            continue
        step = 1
        for at, letter in enumerate(word[1:], start=2):  # bundled letters: -u -B -m ... as -uBm
            if letter not in "cmWX":
                continue
            value = word[at:] or None  # attached (-mpkg, -Wignore) or the next word
            if letter == "c":
                return None
            if letter == "m":
                module = value or (words[index + 1] if index + 1 < len(words) else "")
                return (module, index + (1 if value else 2)) if module else None
            step = 1 if value else 2
            break
        index += step
    return ("", index) if index < len(words) and words[index] != "-" else None


def launcher_of(program: tuple[str, ...]) -> tuple[str, int]:
    """(kind, how many words name the launcher) of a command: ('torchrun', 1) for `torchrun ...`, ('torchrun', 3)
    for `python -m torch.distributed.run ...`, ('accelerate', 2) for `accelerate launch ...`; ('', 0) for any
    other program. Its own options and the script follow those words."""
    if not program:
        return "", 0
    name = program[0].rsplit("/", 1)[-1]
    if name in LAUNCHER_PROGRAMS:
        kind, then = LAUNCHER_PROGRAMS[name]
        size = 1 + len(then)
        return (kind, size) if program[1:size] == then else ("", 0)
    if is_python(name):
        started = python_program(program)
        if started is not None and started[0] in LAUNCHER_MODULES:
            return LAUNCHER_MODULES[started[0]], started[1]
    return "", 0


def launcher_kind(program: tuple[str, ...]) -> str:
    """'torchrun', 'accelerate' (accelerate launch), 'deepspeed', or '' for any other program (launcher_of)."""
    return launcher_of(program)[0]


def torchrun_options_end(args: tuple[str, ...]) -> int:
    """Index of the training script in torchrun's arguments: its own options stop there."""
    index = 0
    while index < len(args):
        word = args[index]
        if word == "--" or not word.startswith("-"):
            return index
        name = word.lstrip("-").split("=", 1)[0].replace("_", "-")
        if name in TORCHRUN_FLAGS:
            index += 1
            continue
        index += 2 if ("=" not in word and name in TORCHRUN_WITH_VALUE) else 1
    return min(index, len(args))


def torchrun_has(own: tuple[str, ...], *names: str) -> bool:
    spelled = {n.replace("_", "-") for n in names}
    for word in own:
        key = word.split("=", 1)[0]
        if key.startswith("--") and key.replace("_", "-") in spelled:
            return True
    return False


def torchrun_value(own: tuple[str, ...], name: str) -> str | None:
    for index, word in enumerate(own):
        key, eq, value = word.partition("=")
        if key.replace("_", "-") == name:
            if eq:
                return value
            return own[index + 1] if index + 1 < len(own) else None
    return None


def torchrun_split(program: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(the words that start torchrun, its own options, the script and its arguments) of a torchrun command in
    any of its spellings (launcher_of)."""
    size = launcher_of(program)[1] or 1
    args = program[size:]
    end = torchrun_options_end(args)
    return program[:size], args[:end], args[end:]


def torchrun_own_options(program: tuple[str, ...]) -> tuple[str, ...]:
    """torchrun's own options in `program` (torchrun ... script args): the words before the script."""
    return torchrun_split(program)[1]


def torchrun_passes_local_rank(program: tuple[str, ...]) -> bool:
    """Whether the torchrun command is torch.distributed.launch without --use-env, which puts --local-rank=N
    before the program's arguments (so envrun's rank step, a shell, cannot stand before the script)."""
    head, own, _ = torchrun_split(program)
    started = python_program(head) if is_python(head[0]) else None
    return started is not None and started[0] == TORCH_LAUNCH_MODULE and not torchrun_has(own, "--use-env")


# --- per-node launchers: accelerate launch, deepspeed -------------------------------------------------

# accelerate launch's options that take no value (accelerate 1.x; `-` and `_` are interchangeable, no
# abbreviations); every other option takes exactly one value.
ACCELERATE_FLAGS = {
    "-h", "--help", "-q", "--quiet", "-m", "--module", "--no_python", "--debug", "--cpu", "--multi_gpu", "--tpu",
    "--enable_cpu_affinity", "--dynamo_use_fullgraph", "--dynamo_use_dynamic", "--dynamo_use_regional_compilation",
    "--use_deepspeed", "--use_fsdp", "--use_parallelism_config", "--use_megatron_lm", "--same_network",
    "--tpu_cluster", "--no_tpu_cluster", "--tpu_use_sudo", "--downcast_bf16", "--fp8_use_autocast_during_eval",
}
# the deepspeed runner's options that take no value (deepspeed/launcher/runner.py); -m is envrun's own spelling
DEEPSPEED_FLAGS = {
    "-m", "--module", "--no_python", "--no_local_rank", "--no_ssh", "--no_ssh_check", "--force_multi", "--save_pid",
    "--elastic_training", "--bind_cores_to_rank", "-h", "--help",
}


def option_key(word: str) -> str:
    """An accelerate/deepspeed option's name as written in their flag lists: `--num-processes=8` -> `--num_processes`."""
    if word.startswith("--"):
        return "--" + word[2:].split("=", 1)[0].replace("-", "_")
    return word[:2]


def launcher_split(kind: str, program: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(launcher words, its own options, script and script arguments) of an accelerate or deepspeed command."""
    head = program[: launcher_of(program)[1] or (2 if kind == "accelerate" else 1)]
    flags = ACCELERATE_FLAGS if kind == "accelerate" else DEEPSPEED_FLAGS
    args = program[len(head) :]
    index = 0
    while index < len(args):
        word = args[index]
        if word == "--" or not word.startswith("-") or word == "-":
            break
        key = option_key(word)
        takes_value = key not in flags and "=" not in word and not (not word.startswith("--") and len(word) > 2)
        index += 2 if takes_value else 1
    index = min(index, len(args))
    return head, args[:index], args[index:]


def launcher_value(own: tuple[str, ...], *names: str) -> str | None:
    """The value of an accelerate/deepspeed option (`--num_processes 8`, `--num-processes=8`, `-t1`)."""
    for index, word in enumerate(own):
        if option_key(word) not in names:
            continue
        if word.startswith("--") and "=" in word:
            return word.split("=", 1)[1]
        if not word.startswith("--") and len(word) > 2:
            return word[2:]
        return own[index + 1] if index + 1 < len(own) else None
    return None


def launcher_has(own: tuple[str, ...], *names: str) -> bool:
    return any(option_key(word) in names for word in own if word.startswith("-"))


def accelerate_uses_torchrun(own: tuple[str, ...]) -> bool:
    """Whether accelerate launch starts the processes with torch.distributed.run: --multi_gpu (which envrun adds),
    --use_fsdp or --use_megatron_lm. Not with --cpu or --tpu (one process per launcher), --use_deepspeed
    (DeepSpeed's launcher), nor a --config_file that chooses for itself."""
    if launcher_has(own, "--cpu", "--tpu", "--use_deepspeed"):
        return False
    return launcher_has(own, "--multi_gpu", "--use_fsdp", "--use_megatron_lm") or not launcher_has(own, "--config_file")


def given_processes(kind: str, program: tuple[str, ...], nodes: int) -> tuple[str | None, str]:
    """The processes per node the user's launcher options ask for (None: not given), and how to name them."""
    if kind == "torchrun":
        value = torchrun_value(torchrun_own_options(program), "--nproc-per-node")
        return value, f"--nproc-per-node={value}"
    if kind not in NODE_LAUNCHERS:
        return None, ""
    own = launcher_split(kind, program)[1]
    if kind == "accelerate" and launcher_has(own, "--cpu", "--tpu"):
        return "1", "accelerate launch --cpu/--tpu, which starts one process per launcher"
    name = "--num_processes" if kind == "accelerate" else "--num_gpus"
    value = launcher_value(own, name, "--num_accelerators" if kind == "deepspeed" else name)
    if value is None:
        return None, ""
    if not value.isdigit() or int(value) < 1:
        raise UsageError(f"{name}={value} is not a positive number", f"e.g. {name}=2")
    if kind == "deepspeed":
        return value, f"your --num_gpus={value}"
    per_node = -(-int(value) // max(1, nodes))
    return str(per_node), f"your --num_processes={value} over {nodes} node(s) ({per_node} per node)"
