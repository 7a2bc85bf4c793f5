"""`envbuild import` in time linear in the recipe (issue 40).

A 16 MB here-document took over 120 s: each of its lines was added to the instruction's text by string
concatenation, and the spec was written by PyYAML's Python emitter. Long single values were quadratic too:
shlex builds a word a character at a time (a LABEL, a COPY path, a %environment line), the ENV reader joined
its value a character at a time, every ENV line copied all earlier ones, and two regular expressions re-read
long runs of blanks. Each shape below is read and written within a budget, the old code's minutes."""

from __future__ import annotations

import random
import shlex
from collections.abc import Callable
from functools import partial

import pytest

from envbuild.convert.deffile import import_def
from envbuild.convert.dockerfile import import_dockerfile
from envbuild.convert.shellscript import split_words
from envbuild.convert.specbuilder import ImportResult
from envbuild.inventory.registryconfig import ImageConfig, parse_reference
from tests.support.cputime import cpu_seconds

BUDGET_S = 4.0  # each shape took under 1.5 s here; before, the 16 MB ones over 120 s, the 1 MB ones minutes
MB = 1 << 20
LINE = "echo a line of the body with some words $HOME\n"
BODY = LINE * (16 * MB // len(LINE))  # 16 MB
DOCKER = "FROM ubuntu:22.04\n"
DEF = "Bootstrap: docker\nFrom: ubuntu:22.04\n"
# A base whose config was read: its Env is what $NAME of a WORKDIR line is looked up in, after the file's ENV.
WITH_BASE = partial(import_dockerfile, read_base=lambda reference: ImageConfig(
    parse_reference(reference), "sha256:" + "1" * 64, "linux/amd64",
    tuple((f"B{i}", f"/b{i}") for i in range(1000)), "/workspace"))

SHAPES: dict[str, tuple[Callable[..., ImportResult], str]] = {
    "Dockerfile RUN <<EOF, 16 MB": (import_dockerfile, f"{DOCKER}RUN <<EOF\n{BODY}EOF\n"),
    "Dockerfile COPY <<'EOF', 16 MB": (import_dockerfile, f"{DOCKER}COPY <<'EOF' /opt/data\n{BODY}EOF\n"),
    "Dockerfile RUN cat <<EOF, 16 MB": (import_dockerfile, f"{DOCKER}RUN cat > /opt/x <<EOF\n{BODY}EOF\n"),
    "definition %post here-document, 16 MB": (
        import_def, f"{DEF}%post\n    cat > /opt/x <<EOF\n" + BODY.replace("echo", "    echo") + "    EOF\n"),
    "ENV value, 1 MB": (import_dockerfile, f"{DOCKER}ENV A=" + "x" * MB + "\n"),
    "ENV quoted value, 1 MB": (import_dockerfile, f'{DOCKER}ENV A="' + 'x\\"' * (MB // 3) + '"\n'),
    "ENV of 40,000 lines": (import_dockerfile, DOCKER + "".join(f"ENV A{i}=x:$A{i}\n" for i in range(40_000))),
    "ENV of 20,000 lines, each read by a WORKDIR, on a base read": (
        WITH_BASE, DOCKER + "".join(f"ENV A{i}=/a{i}:$B{i % 1000}\nWORKDIR $A{i}\n" for i in range(20_000))),
    "LABEL value, 1 MB": (import_dockerfile, f'{DOCKER}LABEL a="' + "x " * (MB // 2) + '"\n'),
    "COPY source, 1 MB": (import_dockerfile, f"{DOCKER}COPY " + "a" * MB + " /opt/x\n"),
    "RUN with 4 MB of blanks": (import_dockerfile, f"{DOCKER}RUN echo a" + " " * (4 * MB) + "b\n"),
    "%environment value, 1 MB": (import_def, f"{DEF}%environment\n    export A=" + "x" * MB + "\n"),
    "%files source, 1 MB": (import_def, f"{DEF}%files\n    " + "a" * MB + " /opt/x\n"),
}


@pytest.mark.parametrize("shape", SHAPES)
def test_a_large_recipe_is_imported_within_budget(shape: str) -> None:
    reader, text = SHAPES[shape]
    started = cpu_seconds()
    rendered = reader(text, "big", source="recipe").render("recipe")
    elapsed = cpu_seconds() - started
    assert elapsed < BUDGET_S, f"{shape}: {elapsed:.1f} s"
    assert len(rendered) > MB // 2 or "ENV of" in shape


def test_the_here_document_is_kept_byte_for_byte() -> None:
    result = import_dockerfile(f"{DOCKER}RUN <<EOF\n{BODY}EOF\n", "big")
    assert result.spec["post"] == [BODY.rstrip("\n")]


def test_split_words_reads_as_shlex_split() -> None:
    draw = random.Random(40)
    alphabet = ["a", "b", " ", "\t", '"', "'", "\\", "#", "=", "-", "\r", "\n", "\f", "é", "$", "\v"]
    for comments in (False, True):
        for _ in range(20_000):
            text = "".join(draw.choice(alphabet) for _ in range(draw.randint(0, 14)))
            try:
                expected: list[str] | None = shlex.split(text, comments=comments)
            except ValueError:
                expected = None
            try:
                words: list[str] | None = split_words(text, comments=comments)
            except ValueError:
                words = None
            assert words == expected, repr(text)
