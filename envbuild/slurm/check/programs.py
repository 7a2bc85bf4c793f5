"""What a command line of a batch script runs, decided from its words (never from substrings: `python train.py
--deepspeed` runs python): torchrun, accelerate, deepspeed (in every spelling envbuild.launch.args.launcher_of
knows, such as `python -m torch.distributed.run`, as envrun's own launch plan reads them), a plain Python
program, something else, or a program that cannot be known from the text, each with the reason: `$CMD`, `eval`,
the MPI launchers that start their own processes (`mpirun`, `mpiexec`, TACC's `ibrun`), `deepspeed --hostfile`
or `--launcher` (DeepSpeed starts the ranks on the hostfile's nodes itself, from a file written when the job
runs), and a wrapper or runtime that names a launcher or Python later on its line (`podman-hpc run IMAGE python
...`, a project's `my_launch python ...`) or by its own name (IDRIS's `idr_accelerate`). Seen through: `env
VAR=1`, `time`, `nice`, `nohup`, `stdbuf`, `ionice`, `timeout`, `numactl`, `taskset`, `singularity|apptainer
exec|run [options] IMAGE`, CSC's `apptainer_wrapper exec` / `singularity_wrapper exec` (the image comes from
$SING_IMAGE), `uv run`, NERSC's `shifter`, `bash -c "..."` strings (read as bash reads them), wrapper scripts
such as LUMI's `./select_gpu python ...`. Pure."""

from __future__ import annotations

from dataclasses import dataclass, replace

from envbuild.launch.args import LAUNCHER_PROGRAMS, PER_NODE_LAUNCHERS, is_python, launcher_kind

# A program's kind: one of PER_NODE_LAUNCHERS (torchrun, accelerate and deepspeed start the training processes of
# a node themselves, one launcher per node); "python" is a per-task launch (one training process per srun task);
# "other" is anything else; "unknown" is a program the text does not name (a variable, mpirun's own processes, eval).

_CONTAINER_RUNTIMES = ("singularity", "apptainer")
_SITE_WRAPPERS = ("apptainer_wrapper", "singularity_wrapper")  # CSC: the image is $SING_IMAGE
# the runtime's own options before its subcommand (`apptainer --quiet exec`, as `envrun --dry-run` prints it;
# `-d`, `-s`, `-v`, `--nocolor` take no value): apptainer(1) / singularity(1) "Options"
_RUNTIME_GLOBAL_WITH_VALUE = {"-c", "--config"}
# container exec options whose value is the next word (the image is the first word that is no option)
_CONTAINER_WITH_VALUE = {
    "-B", "--bind", "--mount", "--env", "--env-file", "-H", "--home", "-o", "--overlay", "--pwd", "-W", "--workdir",
    "-S", "--scratch", "--security", "--network", "--network-args", "--dns", "--hostname", "--app", "--fusemount",
    "--drop-caps", "--add-caps", "--cpus", "--memory", "--memory-swap", "--apply-cgroups", "--cwd", "--userns-map",
}
# words that run the rest of the line: name -> its options that take the next word as their value
_WRAPPERS = {
    "env": {"-u", "--unset", "-C", "--chdir", "-S", "--split-string"}, "time": {"-f", "--format", "-o", "--output"},
    "nohup": set(), "exec": {"-a"}, "nice": {"-n", "--adjustment"}, "stdbuf": {"-i", "-o", "-e"},
    "command": set(), "builtin": set(), "ionice": {"-c", "-n", "-p"},
    "numactl": {"-C", "-N", "-m", "-p", "-i", "--physcpubind", "--cpunodebind", "--membind", "--preferred",
                "--interleave"},
}
_WITH_ONE_ARGUMENT = {"timeout": "the duration", "taskset": "the CPU mask"}  # then the command
_SHELLS = ("bash", "sh", "zsh", "dash", "ksh")
# commands of a `bash -c` string that set up rather than run (the program is what comes after them)
_SETUP = {"cd", "export", "source", ".", "set", "ulimit", "module", "ml", "echo", "printf", "true", "unset",
          "declare", "local", "umask", "conda", "hostname", "date", "mkdir", "nvidia-smi", "rocm-smi", "sleep",
          ":", "test", "["}
# Wrappers of two words that run the rest of the line, with their options that take the next word as value:
# `uv run` (https://docs.astral.sh/uv/reference/cli/#uv-run)
_TWO_WORD_WRAPPERS = {
    ("uv", "run"): {"--with", "--with-editable", "--with-requirements", "--python", "-p", "--project", "--directory",
                    "--env-file", "--extra", "--group", "--only-group", "--index", "--index-url", "--package",
                    "--default-index", "--extra-index-url", "--find-links", "-f", "--no-group", "--config-file"},
}
# NERSC's shifter runs the rest of the line in its image (https://docs.nersc.gov/development/containers/shifter/):
# its options that take the next word as value
_SHIFTER_WITH_VALUE = {"--image", "--volume", "-V", "--module", "-m", "--env", "-e", "--workdir", "-w",
                       "--entrypoint", "--env-file", "--user"}
_UNKNOWN_PROGRAMS = {
    "mpirun": "mpirun starts its own processes (how many, and where, is in its options or hostfile)",
    "mpiexec": "mpiexec starts its own processes (how many, and where, is in its options or hostfile)",
    "eval": "eval runs a command built when the job runs",
    "ibrun": "ibrun (TACC's MPI launcher) starts its own processes, one per task of the job",
}
# DeepSpeed's options that make it start the ranks on other nodes itself (through pdsh, ssh, mpirun or srun, from
# a hostfile): https://www.deepspeed.ai/getting-started/#resource-configuration-multi-node
_DEEPSPEED_MULTI_NODE = ("--hostfile", "-H", "--launcher")
# words of a program's name that say it wraps a launcher (IDRIS's idr_accelerate, a project's run_deepspeed)
_LAUNCHER_WORDS = ("torchrun", "accelerate", "deepspeed")


@dataclass(frozen=True)
class Program:
    kind: str  # torchrun | accelerate | deepspeed | python | other | unknown
    words: tuple[str, ...]  # from the launcher or Python on (the inner command, for a `-c` string)
    via: str = ""  # "singularity exec", "bash -c": how it is reached
    why: str = ""  # unknown: why it cannot be known
    container: tuple[str, ...] | None = None  # `singularity|apptainer exec`'s own options; None: not in one

    @property
    def per_node(self) -> bool:
        return self.kind in PER_NODE_LAUNCHERS

    @property
    def name(self) -> str:
        return {"python": "python", "other": self.words[0] if self.words else "the program",
                "unknown": self.words[0] if self.words else "the program"}.get(self.kind, self.kind)


def classify_program(words: tuple[str, ...], via: str = "") -> Program:
    rest = _skip_wrappers(words)
    if not rest:
        return Program("other", (), via)
    first = rest[0]
    base = first.rsplit("/", 1)[-1]
    if "$" in first or "`" in first:
        return Program("unknown", rest, via, f"{first} is decided when the job runs")
    if base in _UNKNOWN_PROGRAMS:
        return Program("unknown", rest, via, _UNKNOWN_PROGRAMS[base])
    subcommand = _after_options(rest[1:], _RUNTIME_GLOBAL_WITH_VALUE) if base in _CONTAINER_RUNTIMES else ()
    if subcommand[:1] in (("exec",), ("run",)):
        options, command = _split_image(subcommand[1:])
        inner = classify_program(command, _join(via, f"{base} {subcommand[0]}"))
        return replace(inner, container=options) if inner.container is None else inner
    if base in _SITE_WRAPPERS and rest[1:2] in (("exec",), ("run",)):
        return classify_program(rest[2:], _join(via, f"{base} {rest[1]}"))
    if base in _SHELLS:
        return _shell_string(rest, via)
    launcher = launcher_kind(rest)  # every spelling of every launcher: envbuild.launch.args.launcher_of
    if launcher == "deepspeed" and _deepspeed_starts_other_nodes(rest):
        return Program("unknown", rest, via, "deepspeed --hostfile starts the ranks on the hostfile's nodes itself "
                       "(pdsh, ssh or its --launcher): which nodes, and how many processes on each, is in a file "
                       "written when the job runs")
    if launcher:
        return Program(launcher, rest, via)
    if tuple(word.rsplit("/", 1)[-1] for word in rest[:2]) in _TWO_WORD_WRAPPERS:
        name = (base, rest[1])
        command = _after_options(rest[2:], _TWO_WORD_WRAPPERS[name])
        return classify_program(command, _join(via, " ".join(name)))
    if base == "shifter":
        return classify_program(_after_options(rest[1:], _SHIFTER_WITH_VALUE), _join(via, "shifter"))
    if is_python(base) or base.endswith(".py"):
        return Program("python", rest, via)
    if "/" in first and len(rest) > 1:  # a wrapper script such as LUMI's ./select_gpu: look at what it runs
        inner = classify_program(rest[1:], _join(via, first))
        if inner.kind not in ("other", "unknown"):
            return inner
    if base in _SETUP:
        return Program("other", rest, via)
    # a site's or a project's wrapper or runtime (my_launch python ..., podman-hpc run IMAGE python ...): what it
    # does with the launcher or Python it names is its own
    runs = next((word for word in rest[1:] if _names_a_launcher(word)), None)
    if runs is not None:
        return Program("unknown", rest, via, f"{base} runs {runs.rsplit('/', 1)[-1]} in a way the check does not "
                       "know (a site's or the project's wrapper)")
    wrapped = next((word for word in _LAUNCHER_WORDS if word in base.replace("-", "_").split("_")), None)
    if wrapped is not None:
        return Program("unknown", rest, via, f"{base} is a wrapper of {wrapped} (by its name): how many processes "
                       "it starts per task is its own")
    return Program("other", rest, via)


def _deepspeed_starts_other_nodes(words: tuple[str, ...]) -> bool:
    """`deepspeed --hostfile FILE train.py`: DeepSpeed's own options (those before the training script) name a
    hostfile or a multi-node launcher."""
    for word in words[1:]:
        if word.endswith(".py"):
            return False
        if word.split("=", 1)[0] in _DEEPSPEED_MULTI_NODE:
            return True
    return False


def _names_a_launcher(word: str) -> bool:
    base = word.rsplit("/", 1)[-1]
    return base in LAUNCHER_PROGRAMS or is_python(base)


def _after_options(args: tuple[str, ...], with_value: set[str]) -> tuple[str, ...]:
    """The command after a wrapper's options (`--name value`, `--name=value`, `-x value`, `--`)."""
    index = 0
    while index < len(args) and args[index].startswith("-"):
        word = args[index]
        if word == "--":
            return args[index + 1:]
        index += 2 if ("=" not in word and word in with_value) else 1
    return args[index:]


def _skip_wrappers(words: tuple[str, ...]) -> tuple[str, ...]:
    index = 0
    while index < len(words):
        word = words[index]
        base = word.rsplit("/", 1)[-1]
        if "=" in word and not word.startswith("-") and word.split("=", 1)[0].isidentifier():
            index += 1
        elif base in _WRAPPERS:
            with_value = _WRAPPERS[base]
            index += 1
            while index < len(words) and words[index].startswith("-") and words[index] != "--":
                index += 2 if words[index] in with_value else 1
            if index < len(words) and words[index] == "--":
                index += 1
        elif base in _WITH_ONE_ARGUMENT:
            index += 1
            while index < len(words) and words[index].startswith("-"):
                index += 2 if base == "timeout" and words[index] in ("-s", "--signal", "-k", "--kill-after") else 1
            index += 1  # the duration, or the mask
        else:
            break
    return words[index:]


def _join(via: str, more: str) -> str:
    return f"{via}, {more}" if via else more


def _split_image(args: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the runtime's options, the command after the image)."""
    index = 0
    while index < len(args) and args[index].startswith("-"):
        word = args[index]
        index += 2 if ("=" not in word and word in _CONTAINER_WITH_VALUE) else 1
    return args[:index], args[index + 1:]


def _shell_string(words: tuple[str, ...], via: str) -> Program:
    """`bash -c "cd /w && torchrun ..."`: the string is read as bash reads it, and its program is the first
    command that is not set-up (cd, export, module, ...). A script file (`bash run.sh`) is other."""
    for index, word in enumerate(words[1:], start=1):
        if not word.startswith("-") or word.startswith("--"):
            break
        if "c" in word[1:] and index + 1 < len(words):
            from envbuild.slurm.check.shellwords import read_commands

            where = _join(via, f"{words[0].rsplit('/', 1)[-1]} -c")
            commands, _comments = read_commands(words[index + 1])
            unknown: Program | None = None
            for command in commands:
                texts = command.texts
                if texts[0] in _SETUP or all("=" in t and t.split("=", 1)[0].isidentifier() for t in texts):
                    continue
                program = classify_program(texts, where)
                if program.kind == "unknown":
                    unknown = unknown or program
                    continue
                return program
            return unknown or Program("other", (), where)
    return Program("other", words, via)
