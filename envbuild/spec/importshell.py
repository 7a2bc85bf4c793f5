"""The shell scripts of imported recipes (%post, RUN) read line by line, keeping what the shell would see.

Continuation lines are joined (a pip install may span several), but a here-document is kept byte for byte
with the command that opens it (its body is data, indentation included, never a command to rewrite), and a
comment line is kept as it is (it runs nothing, so nothing in it is noted or taken out)."""

from __future__ import annotations

import re
from typing import NamedTuple

# <<EOF, <<-EOF, <<'EOF', <<"EOF" (not <<<, a here-string)
HEREDOC = re.compile(r"(?<!<)<<(?!<)(-?)\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\2")


class ScriptLine(NamedTuple):
    line: int  # where it starts in the recipe
    text: str
    verbatim: bool  # a here-document or a comment: to be kept exactly as written


def heredoc_delimiters(text: str) -> list[str]:
    return [match[3] for match in HEREDOC.finditer(text)]


def script_lines(script: str, first_line: int) -> list[ScriptLine]:
    """Logical lines of `script`, whose first line is line `first_line` of the recipe."""
    result: list[ScriptLine] = []
    raw_lines = script.splitlines()
    index = 0
    while index < len(raw_lines):
        start = index
        raw = raw_lines[index]
        if raw.strip().startswith("#"):
            result.append(ScriptLine(first_line + index, raw.strip(), True))
            index += 1
            continue
        current = ""
        while raw.rstrip().endswith("\\") and index + 1 < len(raw_lines):
            current += raw.rstrip()[:-1].rstrip() + " "
            index += 1
            raw = raw_lines[index]
        current = (current + raw.strip()).strip()
        index += 1
        delimiters = heredoc_delimiters(current)
        if delimiters:
            body = [current]
            while delimiters and index < len(raw_lines):
                body.append(raw_lines[index])
                if raw_lines[index].strip() == delimiters[0]:
                    delimiters.pop(0)
                index += 1
            result.append(ScriptLine(first_line + start, "\n".join(body), True))
        elif current:
            result.append(ScriptLine(first_line + start, current, False))
    return result
