"""`envrun sbatch --check` on a corpus of batch scripts as users write them (tests/slurm/scripts/<site>/*.sh,
our own scripts in the shapes of LUMI, CSC, JSC and, a folder each, other centres' public material), against the table
tests/slurm/scripts/expected.yaml: for each script exactly its error and warning findings as (rule, line), the
infos it must have, each check under 2 s; every one-line fix a finding offers, applied, removes that finding
and adds none."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections import Counter
from functools import cache
from pathlib import Path

import pytest

from envbuild.recipes.loadrecipe import load_recipe
from envbuild.shared.errors import SpecError
from envbuild.shared.yamlsource import parse_yaml_text
from envbuild.slurm.check.pitfalls import check_script, render_report

TYPE_CHECKING = False
if TYPE_CHECKING:
    from envbuild.slurm.check.pitfalls import CheckReport

CORPUS = Path(__file__).resolve().parent / "scripts"
RECIPE_SITES = ("lumi", "puhti", "mahti", "roihu", "juwels", "jureca")
# centres without a recipe, a folder each (unknown/ holds single scripts of other sites)
CENTRES = ("perlmutter", "tacc", "kempner", "princeton", "alliance", "leonardo", "marenostrum5", "jeanzay", "alps",
           "snellius", "isambard", "meluxina", "vega", "dfki", "sigma2")
SITES = (*RECIPE_SITES, *CENTRES, "unknown")
# The rule ids of the check (the contract of issue 29): a typo in the table fails here, not as a silent miss.
RULES = {
    "interpreter_line", "late_directives", "numbers", "account", "partition_exists", "partition_limits",
    "time_syntax", "gpus_per_node", "cpus_per_node", "memory_per_node", "forbidden_options", "srun_inherits",
    "launcher_tasks", "per_task_launch", "launcher_without_srun", "core_masks_on_shared_nodes",
    "gpu_partition_without_gpus", "partial_gpus_on_billed_node", "shell_syntax", "commands_above_directives",
    "program_not_visible", "program_unknown", "signal_without_trap", "container_without_gpu_flag", "placeholders",
    "task_variables_in_batch_shell", "task_variables_inherited",
}
SECONDS_PER_CHECK = 2.0


def _load_table(text: str, file: str) -> dict[str, dict]:
    """The table, read by the loader that refuses a duplicate key (a second entry for a script would silently
    replace the first, and with it the findings the first expects)."""
    return parse_yaml_text(text, file).data


def _table() -> dict[str, dict]:
    path = CORPUS / "expected.yaml"
    return _load_table(path.read_text(encoding="utf-8"), str(path))


TABLE = _table()
NAMES = sorted(TABLE)


@cache
def _recipe(system: str | None):
    return None if system is None else load_recipe(system)


def _check(text: str, entry: dict) -> tuple[CheckReport, float]:
    recipe = _recipe(entry["system"])
    started = time.perf_counter()
    report = check_script(text, recipe, dict(entry.get("environ") or {}))
    return report, time.perf_counter() - started


def _serious(report: CheckReport) -> Counter[tuple[str, int]]:
    """The error and warning findings as (rule, line), counted."""
    return Counter((finding.rule, finding.line) for finding in report.findings if finding.level != "info")


def _describe(report: CheckReport) -> str:
    return "\n".join(f"  {finding.level} {finding.rule} line {finding.line}: {finding.what} (fix: {finding.fix})"
                     for finding in report.findings) or "  (no findings)"


def test_the_table_refuses_a_script_named_twice() -> None:
    entry = "  system: null\n  environ: {}\n  findings: []\n  why: x\n"
    text = f"unknown/a.sh:\n{entry}unknown/b.sh:\n{entry}unknown/a.sh:\n{entry}"
    with pytest.raises(SpecError, match=r"duplicate key 'unknown/a.sh'.*first given on line 1"):
        _load_table(text, "expected.yaml")


def test_table_and_corpus_match() -> None:
    on_disk = sorted(str(path.relative_to(CORPUS)) for path in CORPUS.rglob("*.sh"))
    assert on_disk == NAMES, "every script in tests/slurm/scripts has one entry in expected.yaml, and back"
    for name, entry in TABLE.items():
        assert set(entry) == {"system", "environ", "findings", "why"}, name
        assert entry["why"].strip(), name
        for expected in entry["findings"]:
            assert expected["rule"] in RULES, (name, expected)
            assert set(expected) <= {"rule", "line", "level"} and expected.get("level", "info") == "info", name
            lines = (CORPUS / name).read_text().count("\n") + 1
            assert 1 <= expected["line"] <= lines, (name, expected)


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_corpus_scripts_are_what_the_table_says() -> None:
    """The fixtures themselves, independent of the check: bash -n fails exactly where the table expects
    shell_syntax, and the first line is #! exactly where it expects no interpreter_line finding."""
    for name in NAMES:
        rules = {item["rule"] for item in TABLE[name]["findings"]}
        text = (CORPUS / name).read_text()
        parsed = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True, timeout=30, check=False)
        assert (parsed.returncode != 0) == ("shell_syntax" in rules), (name, parsed.stderr)
        assert text.startswith("#!") == ("interpreter_line" not in rules), name


def test_corpus_covers_every_site() -> None:
    per_site = Counter(name.split("/", 1)[0] for name in NAMES)
    assert set(per_site) == set(SITES), per_site
    assert all(per_site[site] >= 4 for site in (*RECIPE_SITES, "unknown")), per_site
    # at least ten centres without a recipe, each in more than one shape, all checked with no recipe
    assert len(CENTRES) >= 10 and all(per_site[centre] >= 2 for centre in CENTRES), per_site
    assert all(TABLE[name]["system"] is None for name in NAMES if name.split("/", 1)[0] in CENTRES)
    assert sum(per_site.values()) >= 40, per_site
    assert any(not TABLE[name]["findings"] for name in NAMES) and any(TABLE[name]["findings"] for name in NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_script_findings(name: str) -> None:
    entry = TABLE[name]
    report, seconds = _check((CORPUS / name).read_text(), entry)
    expected = Counter((item["rule"], item["line"]) for item in entry["findings"] if item.get("level") != "info")
    infos = {(item["rule"], item["line"]) for item in entry["findings"] if item.get("level") == "info"}
    assert _serious(report) == expected, f"{name}: {entry['why']}\nfound:\n{_describe(report)}"
    found_infos = {(finding.rule, finding.line) for finding in report.findings if finding.level == "info"}
    assert infos <= found_infos, f"{name}: missing infos {infos - found_infos}\nfound:\n{_describe(report)}"
    assert seconds < SECONDS_PER_CHECK, f"{name}: the check took {seconds:.2f} s"
    if entry["system"] is None:
        assert report.notes and report.notes[0].startswith("no recipe for this site"), report.notes
        assert "site rules skipped" in report.notes[0], report.notes
        cluster = (entry.get("environ") or {}).get("SLURM_CLUSTER_NAME")
        if cluster:
            assert cluster in report.notes[0], report.notes  # says what was detected
        assert "clean for local" not in render_report(name, report)


@pytest.mark.parametrize("name", NAMES)
def test_each_offered_edit_removes_its_finding_and_adds_none(name: str) -> None:
    entry = TABLE[name]
    text = (CORPUS / name).read_text()
    report, _seconds = _check(text, entry)
    before = Counter((finding.rule, finding.line) for finding in report.findings)
    for finding in report.findings:
        if finding.edit is None:
            continue
        line, new_text = finding.edit
        assert "\n" not in new_text, (name, finding)
        lines = text.split("\n")
        assert 1 <= line <= len(lines), (name, finding)
        lines[line - 1] = new_text
        after, _seconds = _check("\n".join(lines), entry)
        left = Counter((found.rule, found.line) for found in after.findings)
        expected = before - Counter({(finding.rule, finding.line): 1})
        assert not left - expected, (f"{name}: the edit of line {line} to {new_text!r} ({finding.rule}) leaves or "
                                     f"adds:\n{_describe(after)}")
