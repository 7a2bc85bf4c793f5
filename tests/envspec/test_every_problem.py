"""Every problem of a spec in one run: the checks after the model (the system recipe, the files and base image on
this host, the torch companions, the checks across parts) run on what is valid even when other parts are wrong,
and a check that needs a part with a problem says it waits for it. `validate`, `build --dry-run` and `lock`
all load specs through the same loader, so each reports them all."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from envbuild.cli.envbuild_main import main
from envbuild.envspec.loadspec import load_spec
from envbuild.shared.errors import SpecError

# What a new user writes: the reference spec with three fields misspelled and the system written as the
# module name (lumi_g) instead of the recipe's (lumi-g).
MISSPELLED = """\
    name: my-env
    system: lumi_g
    base: docker://rocm/pytorch:latest
    pyhton:
      packages: [numpy]
    lables:
      maintainer: me
    test:
      - python -c 'import numpy'
    """


def write_spec(directory: Path, text: str) -> Path:
    path = directory / "env.yaml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def problems_in(path: Path) -> list[str]:
    with pytest.raises(SpecError) as info:
        load_spec(path)
    return [f"{p.field}: {p.message}" + (f" | fix: {p.hint}" if p.hint else "") for p in info.value.problems]


def test_misspelled_fields_and_an_unknown_system_in_one_run(tmp_path: Path) -> None:
    problems = problems_in(write_spec(tmp_path, MISSPELLED))
    assert [p.split(":", 1)[0] for p in problems] == ["system", "pyhton", "lables", "test"]
    assert problems[0].startswith("system: no system recipe named 'lumi_g'")
    assert "did you mean 'lumi-g'?" in problems[0]
    assert "did you mean 'tests'?" in problems[3]


@pytest.mark.parametrize("command", [["validate"], ["build", "--dry-run"], ["lock"]])
def test_each_command_reports_them_all(tmp_path: Path, command: list[str]) -> None:
    spec = write_spec(tmp_path, MISSPELLED)
    result = CliRunner().invoke(main, [*command, str(spec)])
    assert result.exit_code != 0
    assert "4 problems in spec" in result.output
    for field in ("system: no system recipe named 'lumi_g'", "pyhton: unknown field", "lables: unknown field",
                  "test: unknown field"):
        assert field in result.output, (field, result.output)


def test_host_checks_run_beside_the_model_problems(tmp_path: Path) -> None:
    # A wrong name and a second files entry without an absolute dest: the first entry's missing source and the
    # missing local base image are still looked for.
    problems = problems_in(write_spec(tmp_path, """\
        name: my env
        base: localimage:images/base.sif
        files:
          - src: data/config.json
            dest: /opt/config.json
          - src: run.sh
            dest: bin/run.sh
        """))
    assert [p.split(":", 1)[0] for p in problems] == ["name", "base", "files[0].src", "files[1].dest"]
    assert "local image 'images/base.sif' does not exist" in problems[1]
    assert "'data/config.json' does not exist" in problems[2]


def test_a_system_written_wrong_is_not_also_looked_up(tmp_path: Path) -> None:
    problems = problems_in(write_spec(tmp_path, "name: demo\nsystem: [lumi-g]\nbase: debootstrap:bookworm\n"))
    assert problems == ["system: expected a string, got a list"]


def test_torch_companions_are_checked_beside_other_problems(tmp_path: Path) -> None:
    problems = problems_in(write_spec(tmp_path, """\
        name: demo
        base: debootstrap:bookworm
        python:
          installer: conda
          pytorch:
            version: "2.5.1"
          transformers: "4.x"
          packages:
            - torchvision==0.19.0
        """))
    assert [p.split(":", 1)[0] for p in problems] == ["python.installer", "python.transformers", "python.packages[0]"]
    assert "'4.x' is not a version or version specifier for transformers" in problems[1]
    assert "excludes torchvision 0.20.1, the version that goes with torch 2.5.1" in problems[2]


def test_companions_wait_for_a_valid_torch_version(tmp_path: Path) -> None:
    problems = problems_in(write_spec(tmp_path, """\
        name: demo
        base: debootstrap:bookworm
        python:
          pytorch:
            version: 2.5
          packages: [torchvision==0.19.0]
        """))
    [problem] = problems
    assert problem.startswith("python.pytorch.version: expected a string, got float 2.5")
    assert problem.endswith("then the torchvision/torchaudio versions listed are checked against this torch version")


def test_checks_across_parts_run_on_the_valid_parts(tmp_path: Path) -> None:
    # An overlay on a docker base is refused by a check across parts, which the model runs only when every
    # field is valid: here the unknown system and the missing file are found with it.
    problems = problems_in(write_spec(tmp_path, """\
        name: ov
        system: lumi_gg
        base: docker://rocm/pytorch:latest
        overlay: {}
        python:
          packages: [torchvision==0.1]
          pytorch: {version: "2.5.1"}
        files:
          - src: nothere
            dest: /x
        """))
    assert [p.split(":", 1)[0] for p in problems] == ["", "system", "python.packages[0]", "files[0].src"]
    assert "an overlay is made on an existing image file, but base is docker://rocm/pytorch:latest" in problems[0]


def test_a_check_across_parts_says_what_it_waits_for(tmp_path: Path) -> None:
    problems = problems_in(write_spec(tmp_path, """\
        name: ov
        base: rocm/pytorch
        overlay:
          mount: /opt/extra
        python:
          installer: uvv
        """))
    assert [p.split(":", 1)[0] for p in problems] == ["base", "python.installer"]
    assert problems[0].endswith("once base: and python: are fixed, overlay: is checked against them")
    assert "overlay:" not in problems[1]
