"""The shape of a generated shell script, for the injection tests (issue 40: a guard that cannot fail).

A script made from hostile values must have exactly the lines its generator means: the same logical lines
(a newline inside a quoted word does not end one) as its benign twin, made from plain values, each of the
same kind (a comment, an `#SBATCH` line for the same option, a command) and each command with the same
operators outside quotes (`;`, `&`, `|`, `<`, `>`, `(`, `)`) and the same number of words. A value that
escaped its quotes adds a word, an operator or a line; a newline that escaped a comment adds a line. And the
shell itself must read the script (`bash -n`)."""

from __future__ import annotations

import subprocess

_OPERATORS = frozenset(";&|<>()")


def logical_lines(script: str) -> list[str]:
    """The script's logical lines: a comment line, or a command up to the first newline outside quotes
    (single quotes, double quotes with backslash escapes, a backslash outside them); blank lines left out."""
    lines: list[str] = []
    position, end = 0, len(script)
    while position < end:
        while position < end and script[position] in " \t":
            position += 1
        if position >= end:
            break
        if script[position] == "\n":
            position += 1
            continue
        start = position
        if script[position] == "#":
            stop = script.find("\n", position)
            stop = end if stop < 0 else stop
            lines.append(script[start:stop])
            position = stop + 1
            continue
        while position < end and script[position] != "\n":
            char = script[position]
            if char == "'":
                close = script.find("'", position + 1)
                position = end if close < 0 else close + 1
            elif char == '"':
                position += 1
                while position < end and script[position] != '"':
                    position += 2 if script[position] == "\\" else 1
                position += 1
            elif char == "\\":
                position += 2
            elif char == "#" and script[position - 1] in " \t;":  # a comment after the command
                stop = script.find("\n", position)
                position = end if stop < 0 else stop
            else:
                position += 1
        lines.append(script[start:position])
        position += 1
    return lines


def _unquoted(line: str) -> str:
    """`line` with every quoted part and escaped character replaced by `x` (one word stays one word)."""
    out: list[str] = []
    position = 0
    while position < len(line):
        char = line[position]
        if char == "'":
            close = line.find("'", position + 1)
            position = len(line) if close < 0 else close + 1
            out.append("x")
        elif char == '"':
            position += 1
            while position < len(line) and line[position] != '"':
                position += 2 if line[position] == "\\" else 1
            position += 1
            out.append("x")
        elif char == "\\":
            position += 2
            out.append("x")
        elif char == "#" and (not out or out[-1] in " \t;"):
            break
        else:
            out.append(char)
            position += 1
    return "".join(out)


def line_shape(line: str) -> tuple[str, ...]:
    """What kind of line it is and what the shell makes of it, without the values in it."""
    if line.startswith("#SBATCH"):
        return ("#SBATCH", line.split()[1].split("=", 1)[0] if len(line.split()) > 1 else "")
    if line.startswith("#"):
        return ("#",)
    bare = _unquoted(line)
    return ("command", "".join(char for char in bare if char in _OPERATORS), str(len(bare.split())))


def shape(script: str) -> list[tuple[str, ...]]:
    return [line_shape(line) for line in logical_lines(script)]


def shape_problems(script: str, twin: str) -> list[str]:
    """How `script` differs in shape from its benign `twin` (empty: the same lines, each of the same kind)."""
    mine, theirs = logical_lines(script), logical_lines(twin)
    problems = []
    for index in range(max(len(mine), len(theirs))):
        line = mine[index] if index < len(mine) else "<none>"
        expected = theirs[index] if index < len(theirs) else "<none>"
        if index >= len(mine) or index >= len(theirs) or line_shape(line) != line_shape(expected):
            problems.append(f"logical line {index + 1}: {line[:200]!r} is not shaped like {expected[:200]!r}")
    if len(mine) != len(theirs):
        problems.append(f"{len(mine)} logical lines, the benign twin has {len(theirs)}")
    return problems


def bash_syntax_problem(script: str) -> str | None:
    """bash's complaint when it cannot parse `script` (bash -n), else None."""
    done = subprocess.run(["bash", "-n"], input=script.encode("utf-8", "surrogateescape"), capture_output=True,
                          timeout=30, check=False)
    return None if done.returncode == 0 else done.stderr.decode(errors="replace")
