"""`envrun sbatch --check` in time linear in the script (issue 40).

One long quoted #SBATCH word took quadratic time (640 KB 16 s, 4 MB over 120 s): shlex builds a word a character
at a time by string concatenation. And bash -n read the script from a pipe, a byte per system call (4 MB: 3 s).
The #SBATCH words are now read a part at a time (checked equal to shlex's reading on seeded random lines), and
bash reads the script from a file in memory."""

from __future__ import annotations

import io
import random
import shlex
from pathlib import Path

import pytest

from envbuild.recipes.loadrecipe import load_recipe
from envbuild.slurm.check import pitfalls
from envbuild.slurm.check.parse import directive_words, parse_script
from envbuild.slurm.check.pitfalls import bash_syntax_error, check_script_file
from tests.support.cputime import cpu_seconds

SIZE = 4_000_000
BUDGET_S = 3.0  # each shape took under 1 s here; the old reading took over 120 s
N = SIZE // 3
# the word as written on the #SBATCH line, and the value sbatch reads (None: an unclosed quote, no value checked)
LONG_WORDS: dict[str, tuple[str, str | None]] = {
    "double-quoted": ('"' + "a b" * N + '"', "a b" * N),
    "double-quoted with escapes": ('"' + 'a\\"' * N + '"', 'a"' * N),
    "single-quoted": ("'" + "a b" * N + "'", "a b" * N),
    "escaped blanks": ("a\\ " * N, "a " * N),
    "bare": ("a" * SIZE, "a" * SIZE),
    "unclosed quote": ('"' + "a" * SIZE, None),
}


def shlex_words(text: str) -> list[str]:
    """The reading the checker had before (and sbatch's, which it follows): shlex, posix, # as a comment."""
    lexer = shlex.shlex(text, posix=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        return list(lexer)
    except ValueError:
        return text.split("#", 1)[0].split()


def test_directive_words_read_as_shlex_reads_them() -> None:
    draw = random.Random(40)
    alphabet = ["a", "b", " ", "\t", '"', "'", "\\", "#", "=", "-", "\r", "\f", "é", "$", "--job-name="]
    for _ in range(30_000):
        text = "".join(draw.choice(alphabet) for _ in range(draw.randint(0, 14)))
        assert directive_words(text) == shlex_words(text), repr(text)


@pytest.mark.parametrize("shape", LONG_WORDS)
def test_a_4_mb_directive_word_is_checked_within_budget(shape: str, tmp_path: Path) -> None:
    word, value = LONG_WORDS[shape]
    path = tmp_path / "job.sbatch"
    path.write_text(f"#!/bin/bash\n#SBATCH --job-name={word}\n#SBATCH --time=1:00:00\nsrun python train.py\n")
    started = cpu_seconds()
    check_script_file(str(path), load_recipe("local"), io.StringIO(), {})
    elapsed = cpu_seconds() - started
    assert elapsed < BUDGET_S, f"{shape}: {elapsed:.1f} s"
    [job_name] = [d.value for d in parse_script(path.read_text()).directives if d.name == "job-name"]
    assert value is None or job_name == value


def test_bash_reads_a_long_script_within_budget_and_still_finds_its_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    long_line = "#!/bin/bash\n# " + "x" * SIZE + "\n"
    started = cpu_seconds()
    assert bash_syntax_error(long_line + "srun python train.py\n") is None
    assert cpu_seconds() - started < BUDGET_S
    assert bash_syntax_error(long_line + "if true\nsrun python train.py\n") == (5, "syntax error: unexpected end of file")
    # where there is no memfd, bash reads a pipe: the same answer
    monkeypatch.setattr(pitfalls, "_in_memory_file", lambda payload: None)
    assert bash_syntax_error("#!/bin/bash\nif true\n") == (3, "syntax error: unexpected end of file")
