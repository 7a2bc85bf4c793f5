"""What a command line of a batch script runs: torchrun (directly, as `python -m torch.distributed.run`, inside
`singularity/apptainer exec IMG`, or inside a `bash -c "..."` string), accelerate, deepspeed, a plain Python
program, or something else. Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass

# torchrun, accelerate and deepspeed start the training processes of a node themselves (one launcher per node);
# "python" is a per-task launch (one training process per srun task); "other" is anything else.
PER_NODE_KINDS = ("torchrun", "accelerate", "deepspeed")

_PYTHON = re.compile(r"python(\d+(\.\d+)?)?$")
_PYTHON_IN_TEXT = re.compile(r"(^|[\s;&|(/])python(\d+(\.\d+)?)?\s")
_MODULE_KINDS = {
    "torch.distributed.run": "torchrun", "torch.distributed.launch": "torchrun",
    "accelerate.commands.launch": "accelerate", "deepspeed.launcher.runner": "deepspeed",
}
_CONTAINER_RUNTIMES = ("singularity", "apptainer")
# container exec options whose value is the next word (the image is the first word that is no option)
_CONTAINER_WITH_VALUE = {
    "-B", "--bind", "--mount", "--env", "--env-file", "-H", "--home", "-o", "--overlay", "--pwd", "-W", "--workdir",
    "-S", "--scratch", "--security", "--network", "--network-args", "--dns", "--hostname", "--app", "--fusemount",
    "--drop-caps", "--add-caps", "--cpus", "--memory", "--memory-swap", "--apply-cgroups", "--cwd", "--userns-map",
}
_WRAPPERS = ("env", "time", "nohup", "exec", "nice", "stdbuf")


@dataclass(frozen=True)
class Program:
    kind: str  # torchrun | accelerate | deepspeed | python | other
    words: tuple[str, ...]  # from the launcher or Python on ((), when it is inside a `-c` string)
    via: str = ""  # "singularity exec", "bash -c": how it is reached

    @property
    def per_node(self) -> bool:
        return self.kind in PER_NODE_KINDS

    @property
    def name(self) -> str:
        return {"python": "python", "other": self.words[0] if self.words else "the program"}.get(self.kind, self.kind)


def classify_program(words: tuple[str, ...], via: str = "") -> Program:
    index = 0
    while index < len(words):
        word = words[index]
        base = word.rsplit("/", 1)[-1]
        if "=" in word and not word.startswith("-") and word.split("=", 1)[0].isidentifier():
            index += 1
        elif base in _WRAPPERS:
            index += 1
            while index < len(words) and words[index].startswith("-"):
                index += 1
        else:
            break
    rest = words[index:]
    if not rest:
        return Program("other", (), via)
    base = rest[0].rsplit("/", 1)[-1]
    if base in _CONTAINER_RUNTIMES and rest[1:2] in (("exec",), ("run",)):
        after = _after_image(rest[2:])
        return classify_program(after, _join(via, f"{base} {rest[1]}"))
    if base in ("bash", "sh", "zsh"):
        return _shell_string(rest, via)
    if base == "torchrun":
        return Program("torchrun", rest, via)
    if base == "accelerate" and "launch" in rest[1:2]:
        return Program("accelerate", rest, via)
    if base == "deepspeed":
        return Program("deepspeed", rest, via)
    if _PYTHON.match(base):
        module = _python_module(rest[1:])
        return Program(_MODULE_KINDS.get(module or "", "python"), rest, via)
    if base.endswith(".py"):
        return Program("python", rest, via)
    if "/" in rest[0] and len(rest) > 1:  # a wrapper script such as LUMI's ./select_gpu: look at what it runs
        inner = classify_program(rest[1:], _join(via, rest[0]))
        if inner.kind != "other":
            return inner
    return Program("other", rest, via)


def _join(via: str, more: str) -> str:
    return f"{via}, {more}" if via else more


def _after_image(args: tuple[str, ...]) -> tuple[str, ...]:
    index = 0
    while index < len(args) and args[index].startswith("-"):
        word = args[index]
        index += 2 if ("=" not in word and word in _CONTAINER_WITH_VALUE) else 1
    return args[index + 1:]  # the image, then the command


def _python_module(args: tuple[str, ...]) -> str | None:
    for index, word in enumerate(args):
        if word == "-m" and index + 1 < len(args):
            return args[index + 1]
        if word.startswith("-m") and len(word) > 2:
            return word[2:]
        if not word.startswith("-"):
            return None
    return None


def _shell_string(words: tuple[str, ...], via: str) -> Program:
    """`bash -c "... torchrun ..."`: a substring test on the string; a script file (`bash run.sh`) is other."""
    for index, word in enumerate(words[1:], start=1):
        if word.startswith("-") and not word.startswith("--") and "c" in word[1:] and index + 1 < len(words):
            string = words[index + 1]
            where = _join(via, f"{words[0].rsplit('/', 1)[-1]} -c")
            if "torchrun" in string or "torch.distributed.run" in string or "torch.distributed.launch" in string:
                return Program("torchrun", (), where)
            if "accelerate launch" in string:
                return Program("accelerate", (), where)
            if "deepspeed" in string:
                return Program("deepspeed", (), where)
            if _PYTHON_IN_TEXT.search(string + " "):
                return Program("python", (), where)
            return Program("other", (), where)
    return Program("other", words, via)
