"""Placeholders left from a guide or a template are findings (issue 38): in #SBATCH options, in srun lines and in
the programs the body starts, quoted or not; real values that merely look alike are not."""

from __future__ import annotations

import pytest

from envbuild.recipes.loadrecipe import load_recipe
from envbuild.slurm.check.jobrules import placeholder_in
from envbuild.slurm.check.pitfalls import check_script, render_report

HEAD = "#!/bin/bash\n#SBATCH --time=01:00:00\n"


@pytest.mark.parametrize("value", [
    "project_xxxxxxxxx",  # the LUMI AI guide's scripts
    "<ACCOUNT>", "<partition-name>", "<NODES>", "XXXX", "your_project", "YOUR_ACCOUNT", "xyz-cluster",
    "/path/to/logs/%j.out", "...", "changeme", "/scratch/<project>/run",
])
def test_placeholders_are_found(value: str) -> None:
    assert placeholder_in(value) is not None


@pytest.mark.parametrize("value", [
    "project_465001234", "logs/%x-%j.out", "xyzzy", "boxxxer", "yourself", "xxl", "gpu", "standard-g",
    "/scratch/project_2001234/run", "a100|h100", "1..4", "--foo=<<EOF",
])
def test_real_values_are_not_placeholders(value: str) -> None:
    assert placeholder_in(value) is None


def findings(text: str, system: str | None = "lumi-g") -> list[tuple[int, str, str]]:
    report = check_script(text, load_recipe(system) if system else None, {}, syntax_error=None)
    return [(f.line, f.rule, f.what) for f in report.findings if f.rule == "placeholders"]


def test_a_guide_script_with_its_placeholders_left_in() -> None:
    text = (HEAD + "#SBATCH --account=project_xxxxxxxxx\n#SBATCH --partition=<partition-name>\n"
            "#SBATCH --nodes=<NODES>\nsrun python train.py --data \"<options>\"\n")
    report = check_script(text, load_recipe("lumi-g"), {}, syntax_error=None)
    got = [(f.line, f.rule) for f in report.findings]
    assert ("placeholders" in [rule for _line, rule in got]), render_report("job.sh", report)
    assert [line for line, rule in got if rule == "placeholders"] == [3, 4, 5, 6]
    assert "numbers" not in [rule for _line, rule in got]  # --nodes=<NODES> is said once, as a placeholder
    assert "partition_exists" not in [rule for _line, rule in got]
    account = next(f for f in report.findings if f.line == 3)
    assert account.level == "error" and "project_465000000" in account.fix  # the recipe's example


def test_without_a_recipe_placeholders_are_still_found() -> None:
    text = HEAD + "#SBATCH --account=<ACCOUNT>\n#SBATCH --clusters=xyz-cluster\npython train.py\n"
    assert [line for line, _rule, _what in findings(text, None)] == [3, 4]


def test_a_clean_script_has_none() -> None:
    text = HEAD + "#SBATCH --account=project_465001234\n#SBATCH --output=logs/%x-%j.out\nsrun python train.py\n"
    assert findings(text) == []
