"""Reading a hand-written batch script the way sbatch and bash do: its #SBATCH directives, its srun lines and
what each srun runs, the variables it exports. Pure (text in, data out); the rules are in envbuild.slurm.check.pitfalls.

sbatch reads #SBATCH lines until the first line that is neither blank nor a comment (sbatch(1)); a line may
hold several options, and an unquoted `#` starts a comment. The body is read as bash reads it
(envbuild.slurm.check.shellwords: quotes, continuations, here-documents); srun is found as a command word, also after
other words (`envrun --image x.sif srun ...`, `time srun ...`, `VAR=1 srun ...`). Option spellings are made
one: `-N 2`, `-N2`, `--nodes 2`, `--nodes=2` and `--tasks-per-node` (= `--ntasks-per-node`) read alike.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from envbuild.convert.shellscript import split_words
from envbuild.launch.args import SRUN_LONG_WITH_VALUE, SRUN_SHORT_WITH_VALUE, split_srun
from envbuild.shared.errors import UsageError
from envbuild.slurm.check.programs import Program, classify_program
from envbuild.slurm.check.shellwords import SimpleCommand, read_commands

# sbatch's one-letter options and the long names they stand for
SHORT_NAMES = {
    "A": "account", "a": "array", "B": "extra-node-info", "b": "begin", "C": "constraint", "c": "cpus-per-task",
    "D": "chdir", "d": "dependency", "e": "error", "F": "nodefile", "G": "gpus", "i": "input", "J": "job-name",
    "L": "licenses", "M": "clusters", "m": "distribution", "N": "nodes", "n": "ntasks", "o": "output",
    "p": "partition", "q": "qos", "S": "core-spec", "t": "time", "w": "nodelist", "x": "exclude",
    "H": "hold", "h": "help", "I": "immediate", "k": "no-kill", "O": "overcommit", "Q": "quiet", "s": "oversubscribe",
    "V": "version", "v": "verbose", "W": "wait",
}
SHORT_FLAGS = set("HhIkOQsVvW")
# long sbatch options that take the next word as their value (besides srun's)
LONG_WITH_VALUE = SRUN_LONG_WITH_VALUE | {
    "array", "batch", "cpus-per-gpu", "export-file", "get-user-env", "mail-type", "mail-user", "mcs-label",
    "open-mode", "parsable", "priority", "tres-per-task", "tres-bind", "wckey",
}
# long sbatch options without a value; with LONG_WITH_VALUE, what a unique prefix (--ntasks-per-n) may stand for
LONG_FLAGS = {
    "contiguous", "exclusive", "hold", "ignore-pbs", "kill-on-invalid-dep", "no-kill", "no-requeue", "overcommit",
    "oversubscribe", "parsable", "quiet", "reboot", "requeue", "spread-job", "test-only", "use-min-nodes", "verbose",
    "wait", "help", "usage", "version",
}
# sbatch and srun accept these spellings for the same option (sbatch(1), srun(1); src/common/slurm_opt.c)
ALIASES = {"tasks-per-node": "ntasks-per-node", "cpu_bind": "cpu-bind", "mem_bind": "mem-bind",
           "gpu_bind": "gpu-bind", "gres_flags": "gres-flags"}
# srun's one-letter options (srun(1)); the flags among them take no value
SRUN_SHORT_NAMES = {
    "A": "account", "b": "begin", "c": "cpus-per-task", "C": "constraint", "d": "dependency", "D": "chdir",
    "e": "error", "G": "gpus", "i": "input", "J": "job-name", "L": "licenses", "m": "distribution", "n": "ntasks",
    "N": "nodes", "o": "output", "p": "partition", "q": "qos", "r": "relative", "S": "core-spec", "t": "time",
    "T": "threads", "w": "nodelist", "W": "wait", "x": "exclude", "E": "preserve-env", "H": "hold",
    "I": "immediate", "k": "no-kill", "K": "kill-on-bad-exit", "l": "label", "O": "overcommit", "Q": "quiet",
    "s": "oversubscribe", "u": "unbuffered", "v": "verbose", "X": "disable-status", "Z": "no-allocate",
}
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\+?=")
_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
_WHOLE_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))$")
# Commands that may matter to a rule name one of these (srun, a launcher, Python, a program that cannot be
# known, a variable); any other line is skipped unread (envbuild.slurm.check.shellwords, `wanted`).
_WANTED = re.compile(r"srun|torch|accelerate|deepspeed|python|mpirun|mpiexec|eval|export|declare|typeset|readonly|"
                     r"local|unset|=|_wrapper|(?:^|[\s;&|(])(?:cd|pushd|module|ml)\s", re.MULTILINE)
# words that may come before srun without being a program of their own
SRUN_PREFIXES = {"time", "exec", "nohup", "env", "command", "builtin", "if", "then", "else", "elif", "do", "while",
                 "until", "!", "{", "nice"}
_DECLARATIONS = ("export", "declare", "typeset", "readonly", "local")
# srun's input environment variables that stand for an option (srun(1), INPUT ENVIRONMENT VARIABLES: "Same as
# --gres-flags", ...), for the options the rules reason on. Options on the srun line override them, as srun
# documents ("command line options will override any environment variables"). Only what the script itself
# exports or sets before srun counts: inside a job, SLURM_NTASKS and its kind are sbatch's output variables, which
# srun reads for the allocation, not options the user chose.
SRUN_INPUT_OPTIONS = {
    "SLURM_GRES_FLAGS": "gres-flags", "SLURM_GPUS_PER_TASK": "gpus-per-task", "SLURM_NTASKS_PER_GPU": "ntasks-per-gpu",
    "SLURM_CPUS_PER_GPU": "cpus-per-gpu", "SRUN_CPUS_PER_TASK": "cpus-per-task", "SLURM_CPU_BIND": "cpu-bind",
    "SLURM_GPU_BIND": "gpu-bind", "SLURM_MEM_BIND": "mem-bind", "SLURM_DISTRIBUTION": "distribution",
    "SLURM_HINT": "hint", "SLURM_GPUS_PER_NODE": "gpus-per-node", "SLURM_NTASKS_PER_NODE": "ntasks-per-node",
    "SLURM_EXACT": "exact", "SLURM_OVERLAP": "overlap", "SLURM_TRES_PER_TASK": "tres-per-task",
    "SLURM_EXPORT_ENV": "export",
}
_FLAG_INPUTS = frozenset({"SLURM_EXACT", "SLURM_OVERLAP"})  # set at all: the flag


@dataclass(frozen=True)
class Directive:
    """One option of an #SBATCH line: `name` is the long name without dashes ("nodes" for -N)."""

    line: int
    name: str
    value: str | None
    written: str  # as in the script: "-N 2", "--nodes=2"


@dataclass(frozen=True)
class SrunLine:
    line: int  # where the command starts
    prefix: tuple[str, ...]  # words before srun: envrun and its options, time, VAR=value
    options: tuple[str, ...]  # srun's own options as --name=value or --flag, variables the script sets expanded
    program: Program
    words: tuple[str, ...]  # the command's words, quotes removed
    written: tuple[str, ...] = ()  # srun's options as written
    # the options srun takes from input variables the script exports before the line or sets on it, as
    # (variable=value as written, the line that sets it, --name=value), where the line does not give the option
    from_environment: tuple[tuple[str, int, str], ...] = ()

    @property
    def text(self) -> str:
        return shlex.join(self.words)

    @property
    def under_envrun(self) -> bool:
        return any(word.rsplit("/", 1)[-1] == "envrun" for word in self.prefix)

    def sets_inline(self, variable: str) -> bool:
        return any(word.startswith(variable + "=") for word in self.prefix)


class Assignment(NamedTuple):  # a tuple: a long script has many of them
    """What the batch shell does to one of its variables at a line: `how` is "set" (NAME=value), "export"
    (export NAME[=value], declare -x), "unexport" (export -n) or "unset"."""

    line: int
    name: str
    value: str | None  # quotes removed, $NAME kept as written; None: no value given (export NAME, unset NAME)
    expands: bool  # bash expands the value's $NAME (no part of it in single quotes or escaped)
    how: str


@dataclass(frozen=True)
class Command:
    """A command of the body that is not an srun line (for torchrun started without srun)."""

    line: int
    program: Program


@dataclass
class BatchScript:
    directives: list[Directive] = field(default_factory=list)
    directive_lines: list[int] = field(default_factory=list)  # the #SBATCH lines sbatch reads
    late_directives: list[tuple[int, str]] = field(default_factory=list)  # #SBATCH lines after the first command
    late_options: list[Directive] = field(default_factory=list)  # their options, which sbatch does not read
    first_command_line: int | None = None
    first_command: str = ""  # its text
    sruns: list[SrunLine] = field(default_factory=list)
    commands: list[Command] = field(default_factory=list)
    exports: dict[str, int] = field(default_factory=dict)  # variable -> the first line that exports it
    environment: dict[str, int] = field(default_factory=dict)  # variable -> the last line that put it in the environment
    interpreter: str | None = None  # what the #! first line names; None without one (sbatch refuses the script)
    lines: list[str] = field(default_factory=list)  # the text's lines, for fixes that rewrite one
    open_quote_line: int | None = None  # a command whose quote or $( never closes (bash -n fails there)
    directories: list[tuple[int, str | None]] = field(default_factory=list)  # `cd DIR` lines; None: not known
    modules: list[tuple[int, str]] = field(default_factory=list)  # `module load NAME` lines (a module may bind)
    assignments: list[Assignment] = field(default_factory=list)  # the batch shell's own variables, in line order

    def directory_at(self, line: int) -> str | None:
        """The working directory at `line` where the script set it with `cd /absolute/path`; None: not known
        (the directory sbatch was run in, or a `cd` to a variable or a relative path)."""
        found = [directory for at, directory in self.directories if at < line]
        return found[-1] if found else None

    def last(self, *names: str) -> Directive | None:
        """The directive sbatch uses for an option (the last one given), by any of its names."""
        found = [d for d in self.directives if d.name in names]
        return found[-1] if found else None

    def exported_before(self, variable: str, line: int) -> bool:
        return variable in self.exports and self.exports[variable] < line

    @property
    def commands_above_directives(self) -> bool:
        """A command above the whole #SBATCH block (`set -euo pipefail` first): sbatch reads none of the block,
        which starts right after it, with nothing but comments and blank lines between. (A command inside the
        block is the usual late_directives case.)"""
        if not self.late_directives or self.first_command_line is None or self.directive_lines:
            return False
        first_late = self.late_directives[0][0]
        return not any(self.first_command_line < command.line < first_late for command in self.commands) and \
            not any(self.first_command_line < srun.line < first_late for srun in self.sruns)


def parse_script(text: str) -> BatchScript:
    lines = text.split("\n")  # as bash counts lines (a \r stays part of its line)
    script = BatchScript(lines=lines)
    if lines and lines[0].startswith("#!"):
        script.interpreter = lines[0][2:].strip()
    index = 0
    while index < len(lines):
        raw = lines[index]
        stripped = raw.strip()
        if raw.startswith("#SBATCH"):
            script.directive_lines.append(index + 1)
            script.directives += parse_directive_line(raw[len("#SBATCH"):], index + 1)
        elif stripped and not stripped.startswith("#"):
            break
        index += 1
    if index < len(lines):
        script.first_command_line = index + 1
        script.first_command = lines[index].strip()
        _read_body(text[sum(len(line) + 1 for line in lines[:index]):], index + 1, script)
    return script


# --- #SBATCH lines ------------------------------------------------------------------------------------


def directive_words(text: str) -> list[str]:
    """The words of an #SBATCH line after the magic word; an unquoted `#` ends them. Read as shlex reads them,
    in linear time (envbuild.convert.shellscript.split_words: shlex took quadratic time in a long quoted word)."""
    try:
        return split_words(text, comments=True)
    except ValueError:  # an unclosed quote: sbatch takes the words as they are
        return text.split("#", 1)[0].split()


def long_name(name: str) -> str:
    """getopt's rule: an exact name, else the one known name it is a unique prefix of (--ntasks-per-n); the
    other spellings of an option (--tasks-per-node) as its usual name."""
    known = LONG_WITH_VALUE | LONG_FLAGS | set(ALIASES)
    if name not in known:
        matches = [k for k in known if k.startswith(name)]
        name = matches[0] if len(matches) == 1 else name
    return ALIASES.get(name, name)


@dataclass(frozen=True)
class OptionWord:
    """One option of a command line as Slurm's getopt reads it, or a word that is no option (`name` None)."""

    name: str | None
    value: str | None  # None: a flag, or a value missing at the end of the line
    written: str  # as written: the option, and its value's word where that is the next one
    takes_value: bool = False
    more_flags: str = ""  # the letters after a short flag (`-lK`)


def getopt_words(words: tuple[str, ...] | list[str], *, long_name: Callable[[str], str], long_with_value: set[str],
                 short_name: Callable[[str], str], short_with_value: Callable[[str], bool]) -> Iterator[OptionWord]:
    """Slurm's options read as its getopt reads them, for sbatch's directives and srun's command line alike. A
    value is `--name=value`, `-xvalue`, `-x=value`, or the next word where the option takes one (`--name value`,
    `-x value`)."""
    index = 0
    while index < len(words):
        word = words[index]
        index += 1
        if word.startswith("--"):
            raw, eq, value = word[2:].partition("=")
            name = long_name(raw)
            if not eq and name in long_with_value and index < len(words):
                value, eq = words[index], "="
                word = f"{word} {value}"
                index += 1
            yield OptionWord(name, value if eq else None, word, takes_value=bool(eq))
        elif word.startswith("-") and len(word) > 1:
            letter = word[1]
            if not short_with_value(letter):
                yield OptionWord(short_name(letter), None, word, more_flags=word[2:])
                continue
            argument = word[2:].lstrip("=") or None
            if argument is None and index < len(words):
                argument = words[index]
                word = f"{word} {argument}"
                index += 1
            yield OptionWord(short_name(letter), argument, word, takes_value=True)
        else:
            yield OptionWord(None, None, word)


def parse_directive_line(text: str, line: int) -> list[Directive]:
    options = getopt_words(directive_words(text), long_name=long_name, long_with_value=LONG_WITH_VALUE,
                           short_name=lambda letter: SHORT_NAMES.get(letter, letter),
                           short_with_value=lambda letter: letter not in SHORT_FLAGS)
    return [Directive(line, option.name, option.value, option.written) for option in options if option.name is not None]


# --- the body -----------------------------------------------------------------------------------------


def _read_body(body: str, first_line: int, script: BatchScript) -> None:
    commands, comments = read_commands(body, first_line, wanted=_WANTED)
    for comment in comments:
        if comment.line_start and comment.text.startswith("#SBATCH"):
            script.late_directives.append((comment.line, comment.text.strip()))
            script.late_options += parse_directive_line(comment.text[len("#SBATCH"):], comment.line)
    variables: dict[str, str] = {}
    for command in commands:
        if not command.closed:
            script.open_quote_line = script.open_quote_line or command.line
            continue  # bash refuses the script there (the shell_syntax rule); its words are not what bash runs
        _read_command(command, variables, script)


def expand(word: str, variables: dict[str, str]) -> str:
    """$NAME and ${NAME} from the script's own simple assignments; others are left as written."""
    return _VARIABLE.sub(lambda m: variables.get(m.group(1) or m.group(2), m.group(0)), word)


def expand_words(command: SimpleCommand, start: int, variables: dict[str, str]) -> tuple[str, ...]:
    """The command's words from `start` as bash runs them where the script says: an unquoted `$CMD` the script
    set is split into its words; any other variable stays as written (what it holds is not known here)."""
    out: list[str] = []
    quoting = command.quoting
    for index in range(start, len(command.texts)):
        text = command.texts[index]
        if "$" not in text:
            out.append(text)
            continue
        quoted, expands = quoting[index] if quoting is not None else (False, True)
        whole = _WHOLE_VARIABLE.match(text)
        name = whole and (whole.group(1) or whole.group(2))
        if name and not quoted and name in variables:
            out += variables[name].split()
        else:
            out.append(expand(text, variables) if expands else text)
    return tuple(out)


def srun_options(written: tuple[str, ...]) -> tuple[str, ...]:
    """srun's options as --name=value or --flag: `-n 2`, `-n2`, `--ntasks 2`, `--ntasks=2` all `--ntasks=2`."""
    out: list[str] = []
    options = getopt_words(written, long_name=lambda raw: ALIASES.get(raw, raw), long_with_value=SRUN_LONG_WITH_VALUE,
                           short_name=lambda letter: SRUN_SHORT_NAMES.get(letter, letter),
                           short_with_value=SRUN_SHORT_WITH_VALUE.__contains__)
    for option in options:
        if option.name is None:
            out.append(option.written)
        elif option.takes_value:
            out.append(f"--{option.name}={option.value or ''}")
        else:
            out.append(f"--{option.name}")
            out += [f"--{SRUN_SHORT_NAMES.get(letter, letter)}" for letter in option.more_flags]  # -lK
    return tuple(out)


def _read_command(command: SimpleCommand, variables: dict[str, str], script: BatchScript) -> None:
    texts = command.texts
    line = command.line
    expands = [how[1] for how in command.quoting] if command.quoting is not None else [True] * len(texts)
    if texts[0] in _DECLARATIONS:
        flags = "".join(word[1:] for word in texts[1:] if word.startswith("-"))
        how = ("unexport" if "n" in flags else "export") if texts[0] == "export" else \
            "export" if "x" in flags else "set"
        for index, word in enumerate(texts[1:], start=1):
            if word.startswith("-"):
                continue
            name, eq, value = word.partition("=")
            script.assignments.append(Assignment(line, name, value if eq else None, expands[index], how))
            if eq:
                _assign(variables, name, value)
            if texts[0] == "export" or name not in script.exports:
                script.exports.setdefault(name, line)
            if texts[0] == "export" or any(flag.startswith("-") and "x" in flag for flag in texts[1:]
                                           if flag.startswith("-")):
                script.environment[name] = line
        return
    if all(_ASSIGNMENT.match(word) for word in texts):
        for index, word in enumerate(texts):
            name, _, value = word.partition("=")
            script.assignments.append(Assignment(line, name.rstrip("+"), value, expands[index], "set"))
            _assign(variables, name, value)
        return
    if texts[0] == "unset":
        script.assignments += [Assignment(line, name, None, True, "unset") for name in texts[1:]
                               if not name.startswith("-")]
    srun_at = next((i for i, word in enumerate(texts) if word.rsplit("/", 1)[-1] == "srun"), None)
    if srun_at is not None and _is_srun_prefix(list(texts[:srun_at])):
        srun_words = ("srun", *[_usual_spelling(w) if w.startswith("--") else w
                                for w in expand_words(command, srun_at + 1, variables)])
        try:
            options, program = split_srun(srun_words)
        except UsageError:
            options, program = srun_words[1:], ()
        given = srun_options(options)
        from_environment = _options_from_environment(texts[:srun_at], given, variables, script, line)
        script.sruns.append(SrunLine(
            line=line, prefix=texts[:srun_at], options=given + tuple(option for _, _, option in from_environment),
            program=classify_program(program), words=texts, written=options, from_environment=from_environment,
        ))
        return
    words = expand_words(command, 0, variables)
    if not words:  # `$EMPTY` alone: bash runs nothing
        return
    if words[0] in ("cd", "pushd"):
        target = words[1] if len(words) > 1 else ""
        script.directories.append((line, target if target.startswith("/") and "$" not in target else None))
    elif words[0] in ("module", "ml"):
        script.modules += [(line, word) for word in words[1:] if not word.startswith("-") and
                           word not in ("load", "add", "purge", "use", "unload", "rm", "swap", "restore", "list")]
    script.commands.append(Command(line, classify_program(words)))


def _options_from_environment(prefix: tuple[str, ...], given: tuple[str, ...], variables: dict[str, str],
                              script: BatchScript, line: int) -> tuple[tuple[str, int, str], ...]:
    """The options srun takes from SRUN_INPUT_OPTIONS variables set on its line (`SLURM_GPU_BIND=none srun`) or
    exported before it with a value the script gives, where its own options do not give them."""
    inline = {name: value for name, eq, value in (word.partition("=") for word in prefix) if eq}
    found: list[tuple[str, int, str]] = []
    for variable, option in SRUN_INPUT_OPTIONS.items():
        if variable in inline:
            value, at = expand(inline[variable], variables), line
        elif variable in script.environment and variable in variables:
            value, at = variables[variable], script.environment[variable]
        else:
            continue
        if any(word == f"--{option}" or word.startswith(f"--{option}=") for word in given):
            continue  # the line's own option wins
        if variable in _FLAG_INPUTS:
            found.append((f"{variable}={value}", at, f"--{option}"))
        elif value:
            found.append((f"{variable}={value}", at, f"--{option}={value}"))
    return tuple(found)


def _assign(variables: dict[str, str], name: str, value: str) -> None:
    """NAME=value and NAME+=value as the script's own variables; an array (`NAME=(a b)`) holds what is not known
    here, so its name is dropped."""
    base = name.rstrip("+")
    if value.startswith("("):
        variables.pop(base, None)
        return
    variables[base] = (variables.get(base, "") if name.endswith("+") else "") + expand(value, variables)


def _usual_spelling(word: str) -> str:
    """`--tasks-per-node=1` as `--ntasks-per-node=1`: srun's other spellings, before its options are split."""
    if not word.startswith("--"):
        return word
    name, eq, value = word[2:].partition("=")
    return f"--{ALIASES[name]}{eq}{value}" if name in ALIASES else word


def _is_srun_prefix(words: list[str]) -> bool:
    if not words:
        return True
    if words[0].rsplit("/", 1)[-1] == "envrun":
        return True
    index = 0
    while index < len(words):
        word = words[index]
        if word == "timeout":  # timeout [options] DURATION srun ...
            index += 1
            while index < len(words) and words[index].startswith("-"):
                index += 1
        elif not (_ASSIGNMENT.match(word) or word in SRUN_PREFIXES or word.startswith("-")):
            return False
        index += 1
    return True
