"""`envbuild packages` read by hand (envbuild.cli.packages_entry) answers exactly as click's command does: the
same table, JSON, matrix, warnings, errors and exit status, cold (images read in parallel worker processes) and
warm (from the index, with nothing of the reader or click loaded)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envbuild.cli.packages_entry import simple_packages_line
from tests.conftest import REPO
from tests.support.inventory_layout import cache_env, fixture_image

BY_HAND = "import sys; from envbuild.cli.packages_entry import answer_packages; answer_packages(sys.argv[1:])"
BY_CLICK = "import sys; from envbuild.cli.envbuild_main import main; main(sys.argv[1:])"
# Loaded by neither path of a warm listing: the CLI framework, the spec's libraries, and the image reader.
NOT_WARM = ("click", "pydantic", "yaml", "dataclasses", "typing", "json", "re", "hashlib", "envbuild.inventory.image",
            "envbuild.inventory.squashfs", "envbuild.sif.reader", "envbuild.inventory.parallelread")
LOADED = ("import atexit, sys; watched = sys.argv.pop(1).split(','); "
          "atexit.register(lambda: print(sorted(m for m in watched if m in sys.modules), file=sys.stderr)); ")


def run(code: str, args: list[str], env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code, *extra, "packages", *args], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), **env}, cwd=REPO, timeout=120)


@pytest.mark.parametrize(("argv", "expected"), [
    (["packages", "a.sif"], {"images": ["a.sif"], "pattern": None, "no_cache": False, "as_json": False, "as_matrix": False}),
    (["packages", "--grep", "torch", "a.sif", "--no-cache", "b.sif"],
     {"images": ["a.sif", "b.sif"], "pattern": "torch", "no_cache": True, "as_json": False, "as_matrix": False}),
    (["packages", "--grep=^(a|b)$", "--json", "--matrix", "a.sif"],
     {"images": ["a.sif"], "pattern": "^(a|b)$", "no_cache": False, "as_json": True, "as_matrix": True}),
])
def test_the_usual_command_lines_are_read_by_hand(argv: list[str], expected: dict[str, object]) -> None:
    assert simple_packages_line(argv) == expected


@pytest.mark.parametrize("argv", [
    ["packages"], ["packages", "--grep", "x"], ["packages", "-h"], ["packages", "--help", "a.sif"],
    ["packages", "--overlay", "o.sqsh", "a.sif"], ["packages", "--via-runtime", "a.sif"], ["packages", "--", "a.sif"],
    ["packages", "--grep", "a", "--grep", "b", "a.sif"], ["packages", "--grep", "--json", "a.sif"],
    ["packages", "--json=yes", "a.sif"], ["packages", "--no-cach", "a.sif"], ["packages", "-", "a.sif"],
    ["build", "a.yaml"], [],
])
def test_every_other_command_line_is_left_to_click(argv: list[str]) -> None:
    assert simple_packages_line(argv) is None


def images_and_a_bad_one(tmp_path: Path) -> list[str]:
    """Two compressions, a copy (another inode), a file that is no image, one that is not there."""
    copy = tmp_path / "copy.sif"
    shutil.copy(fixture_image("gzip"), copy)
    (tmp_path / "readme.sif").write_text("not an image")
    return [str(fixture_image("gzip")), str(fixture_image("zstd")), str(tmp_path / "readme.sif"), str(copy),
            str(tmp_path / "missing.sif"), str(fixture_image("gzip"))]


@pytest.mark.parametrize("options", [["--grep", "TORCH"], ["--grep", "^(six|torch)$"], ["--json"], ["--matrix"],
                                     ["--matrix", "--json", "--grep", "six"], []])
def test_by_hand_and_by_click_answer_alike_cold_and_warm(tmp_path: Path, options: list[str]) -> None:
    images = images_and_a_bad_one(tmp_path)
    answers = {}
    for name, code in (("hand", BY_HAND), ("click", BY_CLICK)):
        env = cache_env(tmp_path / name)
        cold = run(code, [*options, *images, "--no-cache"], env)
        filling = run(code, [*options, *images], env)
        warm = run(code, [*options, *images], env)
        answers[name] = [(done.returncode, done.stdout, done.stderr) for done in (cold, filling, warm)]
        assert cold.returncode == 1 and "2 of 6 images could not be read" in cold.stderr, cold.stderr
        assert "Traceback" not in cold.stderr + filling.stderr + warm.stderr
        assert cold.stdout == filling.stdout == warm.stdout
    assert answers["hand"] == answers["click"]
    if "--json" in options:
        document = json.loads(answers["hand"][2][1])
        assert [image["architecture"] for image in document["images"]] == ["x86_64", "x86_64", None, "x86_64", None, "x86_64"]


def test_a_warm_listing_loads_neither_click_nor_the_reader(tmp_path: Path) -> None:
    images = [str(fixture_image("gzip")), str(fixture_image("zstd"))]
    env = cache_env(tmp_path)
    first = run(LOADED + BY_HAND, ["--grep", "torch", *images], env, ",".join(NOT_WARM))
    assert first.returncode == 0, first.stderr
    assert "envbuild.inventory.image" in first.stderr  # the cold listing read the images
    warm = run(LOADED + BY_HAND, ["--grep", "torch", *images], env, ",".join(NOT_WARM))
    assert warm.returncode == 0 and warm.stdout == first.stdout, warm.stderr
    assert warm.stderr.strip().splitlines()[-1] == "[]", f"a warm `envbuild packages` loaded {warm.stderr}"


def test_a_grep_outside_ascii_is_found_as_re_finds_it(tmp_path: Path) -> None:
    """--grep of plain letters is not compiled as a regex, and still finds what re.IGNORECASE finds: "k"
    matches the Kelvin sign in a name (re's case folding), which a lower-cased search would miss."""
    from envbuild.commands.packages import _name_pattern

    literal = _name_pattern("six-K")
    assert not hasattr(literal, "flags")  # not a compiled regex
    for name in ("six-k", "SIX-K", "a_six-kx", "six-\u212a", "six_k", "si x-k", "six-\u0130"):
        import re

        assert bool(literal.search(name)) == bool(re.search("six-K", name, re.IGNORECASE)), name
