"""Reading a hand-written batch script the way sbatch and bash do: its #SBATCH directives, its srun lines and
what each srun runs, the variables it exports. Pure (text in, data out); the rules are in envbuild.batch.check.

sbatch reads #SBATCH lines until the first line that is neither blank nor a comment (sbatch(1)); a line may
hold several options, and an unquoted `#` starts a comment. srun lines are found anywhere in the body, with
backslash continuations joined (the line number is where the command starts), also after other words
(`envrun --image x.sif srun ...`, `time srun ...`, `VAR=1 srun ...`).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from envbuild.batch.scriptprogram import Program, classify_program
from envbuild.errors import UsageError
from envbuild.launch.args import SRUN_LONG_WITH_VALUE, split_srun

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
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_HEREDOC = re.compile(r"(?<!<)<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")
_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
OPERATORS = {";", "&&", "||", "|", "|&", "&", ";;", "(", ")"}
# words that may come before srun on its line without being a program of their own
SRUN_PREFIXES = {"time", "exec", "nohup", "env", "command", "builtin", "if", "then", "else", "elif", "do", "while",
                 "until", "!", "{", "nice"}


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
    options: tuple[str, ...]  # srun's own options, shell variables expanded where the script sets them
    program: Program
    text: str

    @property
    def under_envrun(self) -> bool:
        return any(word.rsplit("/", 1)[-1] == "envrun" for word in self.prefix)

    def sets_inline(self, variable: str) -> bool:
        return any(word.startswith(variable + "=") for word in self.prefix)


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
    first_command_line: int | None = None
    sruns: list[SrunLine] = field(default_factory=list)
    commands: list[Command] = field(default_factory=list)
    exports: dict[str, int] = field(default_factory=dict)  # variable -> the first line that exports it
    interpreter: str | None = None  # what the #! first line names; None without one (sbatch refuses the script)

    def last(self, *names: str) -> Directive | None:
        """The directive sbatch uses for an option (the last one given), by any of its names."""
        found = [d for d in self.directives if d.name in names]
        return found[-1] if found else None

    def exported_before(self, variable: str, line: int) -> bool:
        return variable in self.exports and self.exports[variable] < line


def parse_script(text: str) -> BatchScript:
    lines = text.splitlines()
    script = BatchScript()
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
    _read_body(lines, index, script)
    return script


# --- #SBATCH lines ------------------------------------------------------------------------------------


def directive_words(text: str) -> list[str]:
    """The words of an #SBATCH line after the magic word; an unquoted `#` ends them."""
    lexer = shlex.shlex(text, posix=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        return list(lexer)
    except ValueError:  # an unclosed quote: sbatch takes the words as they are
        return text.split("#", 1)[0].split()


def long_name(name: str) -> str:
    """getopt's rule: an exact name, else the one known name it is a unique prefix of (--ntasks-per-n)."""
    known = LONG_WITH_VALUE | LONG_FLAGS
    if name in known:
        return name
    matches = [k for k in known if k.startswith(name)]
    return matches[0] if len(matches) == 1 else name


def parse_directive_line(text: str, line: int) -> list[Directive]:
    words = directive_words(text)
    found: list[Directive] = []
    index = 0
    while index < len(words):
        word = words[index]
        index += 1
        if word.startswith("--"):
            raw, eq, value = word[2:].partition("=")
            name = long_name(raw)
            if not eq and name in LONG_WITH_VALUE and index < len(words):
                value, eq = words[index], "="
                word = f"{word} {value}"
                index += 1
            found.append(Directive(line, name, value if eq else None, word))
        elif word.startswith("-") and len(word) > 1:
            letter = word[1]
            name = SHORT_NAMES.get(letter, letter)
            if letter in SHORT_FLAGS:
                found.append(Directive(line, name, None, word))
                continue
            value = word[2:].lstrip("=") or None
            if value is None and index < len(words):
                value = words[index]
                word = f"{word} {value}"
                index += 1
            found.append(Directive(line, name, value, word))
    return found


# --- the body -----------------------------------------------------------------------------------------


def _read_body(lines: list[str], index: int, script: BatchScript) -> None:
    variables: dict[str, str] = {}
    heredoc: str | None = None
    while index < len(lines):
        start = index
        raw = lines[index]
        index += 1
        if heredoc is not None:
            if raw.strip() == heredoc:
                heredoc = None
            continue
        if raw.startswith("#SBATCH"):
            script.late_directives.append((start + 1, raw.strip()))
            continue
        if not raw.strip() or raw.strip().startswith("#"):
            continue
        text = raw
        while text.endswith("\\") and index < len(lines):
            text = text[:-1] + " " + lines[index]
            index += 1
        segments = None
        while segments is None:
            try:
                segments = shell_segments(text)
            except ValueError:  # a quote that closes on a later line
                if index >= len(lines):
                    segments = []
                    break
                text += "\n" + lines[index]
                index += 1
        marker = _HEREDOC.search(hide_substitutions(text))
        if marker:
            heredoc = marker.group(2)
        for words in segments:
            _read_command(words, start + 1, text, variables, script)


def hide_substitutions(text: str) -> str:
    """`$(...)`, `$((...))` and backquoted commands become one opaque word: their insides are another
    command (scontrol, hostname), and their `|` or `;` must not split this one."""
    out: list[str] = []
    index = 0
    while index < len(text):
        if text.startswith("$(", index):
            depth, index = 1, index + 2
            while index < len(text) and depth:
                depth += {"(": 1, ")": -1}.get(text[index], 0)
                index += 1
            out.append("$__substitution__")
        elif text[index] == "`":
            end = text.find("`", index + 1)
            index = len(text) if end < 0 else end + 1
            out.append("$__substitution__")
        else:
            out.append(text[index])
            index += 1
    return "".join(out)


def shell_segments(text: str) -> list[list[str]]:
    """The simple commands of a line: its words split at ; && || | & and parentheses, redirections left out."""
    lexer = shlex.shlex(hide_substitutions(text), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    segments: list[list[str]] = [[]]
    skip_next = False
    for word in lexer:
        if skip_next:
            skip_next = False
            continue
        if word in OPERATORS:
            segments.append([])
        elif word and set(word) <= set("<>&|") and word not in OPERATORS:
            skip_next = not word.startswith("<<")  # a redirection and its target
        else:
            segments[-1].append(word)
    return [words for words in segments if words]


def expand(word: str, variables: dict[str, str]) -> str:
    """$NAME and ${NAME} from the script's own simple assignments; others are left as written."""
    return _VARIABLE.sub(lambda m: variables.get(m.group(1) or m.group(2), m.group(0)), word)


def _read_command(words: list[str], line: int, text: str, variables: dict[str, str], script: BatchScript) -> None:
    if words[0] in ("export", "declare", "typeset"):
        for word in words[1:]:
            if word.startswith("-"):
                continue
            name, eq, value = word.partition("=")
            if eq:
                variables[name] = expand(value, variables)
            script.exports.setdefault(name, line)
        return
    if all(_ASSIGNMENT.match(word) for word in words):
        for word in words:
            name, _, value = word.partition("=")
            variables[name] = expand(value, variables)
        return
    srun_at = next((i for i, word in enumerate(words) if word.rsplit("/", 1)[-1] == "srun"), None)
    if srun_at is not None and _is_srun_prefix(words[:srun_at]):
        srun_words = ("srun", *words[srun_at + 1:])
        try:
            options, program = split_srun(srun_words)
        except UsageError:
            options, program = srun_words[1:], ()
        script.sruns.append(SrunLine(
            line=line, prefix=tuple(words[:srun_at]), options=tuple(expand(w, variables) for w in options),
            program=classify_program(program), text=text.strip(),
        ))
        return
    script.commands.append(Command(line, classify_program(tuple(words))))


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
