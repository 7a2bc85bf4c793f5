"""A script that writes its job and hands it to `sbatch <<EOF` (issue 38): the here-document is the job, and is
what --check reads, with the lines of the file and the script's own settings expanded as its shell would."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from envbuild.recipes.loadrecipe import load_recipe
from envbuild.slurm.check.pitfalls import bash_syntax_error, check_script, check_script_file, submitted_here_document

DRIVER = """#!/bin/bash
# writes and submits the job
NODES=2
sbatch --parsable <<EOF
#!/bin/bash
#SBATCH --nodes=$NODES
#SBATCH --time=6h
srun python train.py --nodes ${NODES}
EOF
"""


def test_the_here_document_is_found() -> None:
    start, body, delimiter = submitted_here_document(DRIVER) or (0, "", "")
    assert (start, delimiter) == (4, "EOF") and body.startswith("#!/bin/bash\n#SBATCH --nodes=$NODES")
    assert submitted_here_document("#!/bin/bash\ncat <<EOF\nx\nEOF\n") is None  # not sbatch's


def test_the_job_in_it_is_checked_at_its_lines() -> None:
    report = check_script(DRIVER, load_recipe("local"), {}, syntax_error=None)
    assert [(f.line, f.rule) for f in report.findings] == [(7, "time_syntax")]  # --nodes=$NODES is 2 when it runs
    assert report.directive_lines == 2 and report.srun_lines == 1
    assert report.notes[0].startswith("the script submits a job with `sbatch <<EOF` (line 4)")


def test_a_quoted_delimiter_is_taken_as_written() -> None:
    quoted = DRIVER.replace("<<EOF", "<<'EOF'")
    report = check_script(quoted, load_recipe("local"), {}, syntax_error=None)
    assert ("numbers", 6) in [(f.rule, f.line) for f in report.findings]  # sbatch gets the text $NODES
    assert "expanded" not in report.notes[0]


def test_the_jobs_own_variables_escaped_in_the_here_document_are_read_as_the_job_gets_them() -> None:
    """`\\$(hostname)` and `\\$SLURM_JOB_ID` in an unquoted here-document reach the job as `$(hostname)` and
    `$SLURM_JOB_ID` (the Alliance's and many projects' submit scripts): the job is read whole, not cut at a `\\$`
    that bash would never have left there."""
    driver = DRIVER.replace("srun python", "export MASTER_ADDR=\\$(hostname) RUN=\\${SLURM_JOB_ID}\nsrun python")
    report = check_script(driver, load_recipe("local"), {}, syntax_error=None)
    assert [(f.line, f.rule) for f in report.findings] == [(7, "time_syntax")]
    assert report.srun_lines == 1
    body = submitted_here_document(driver)
    assert body is not None and "MASTER_ADDR=\\$(hostname)" in body[1]  # as written; expanded when checked


def test_without_a_recipe_the_first_note_still_says_so() -> None:
    report = check_script(DRIVER, None, {"SLURM_CLUSTER_NAME": "narval"}, syntax_error=None)
    assert report.notes[0].startswith("no recipe for this site (SLURM_CLUSTER_NAME=narval)")
    assert report.notes[1].startswith("the script submits a job with `sbatch <<EOF` (line 4)")


def test_the_lines_a_finding_names_are_the_files_lines() -> None:
    """A finding about the job that names another of its lines ("comes after the first command (line N)") names
    it as the file counts it, as its own line is."""
    driver = DRIVER.replace("#SBATCH --time=6h\n", "module load python\n#SBATCH --time=06:00:00\n")
    report = check_script(driver, load_recipe("local"), {}, syntax_error=None)
    (late,) = [f for f in report.findings if f.rule == "late_directives"]
    assert late.line == 8 and "(line 7)" in late.what and late.fix.endswith("above line 7")


def test_a_syntax_error_in_the_job_is_found_at_the_files_line() -> None:
    """bash -n on the script never parses the here-document (it is data to that shell): the job's text is asked
    of bash itself, and its complaint is reported at the line of the file."""
    broken = DRIVER.replace("#SBATCH --time=6h\n", "#SBATCH --time=06:00:00\nif [ -n \"$X\" ]; then\n")
    assert bash_syntax_error(broken) is None  # the whole script parses: the job is only text to it
    for given in ({}, {"syntax_error": None}):  # asked here, or the caller's answer for the script
        report = check_script(broken, load_recipe("local"), {}, **given)  # type: ignore[arg-type]
        (finding,) = [f for f in report.findings if f.rule == "shell_syntax"]
        assert finding.level == "error" and finding.line == 10  # the job's end, where bash finds no `fi`
        assert finding.what.startswith("bash cannot parse the script: syntax error")


def test_an_unclosed_quote_in_the_job_names_the_files_line() -> None:
    broken = DRIVER.replace("srun python train.py", "srun python 'train.py")
    report = check_script(broken, load_recipe("local"), {})
    (finding,) = [f for f in report.findings if f.rule == "shell_syntax"]
    assert finding.line == 8 and "opened on line 8" in finding.what


def test_the_scripts_own_syntax_error_stays_at_its_line() -> None:
    broken = DRIVER + "if true; then\n  echo submitted\n"
    report = check_script(broken, load_recipe("local"), {})
    assert [(f.line, f.rule) for f in report.findings] == [(7, "time_syntax"), (12, "shell_syntax")]


def test_check_script_file_checks_the_job_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "submit.sh"
    (tmp_path / "train.py").write_text("")
    path.write_text(DRIVER.replace("#SBATCH --time=6h\n", "#SBATCH --time=06:00:00\nwhile true; do\n"))
    out = io.StringIO()
    monkeypatch.chdir(tmp_path)  # where sbatch is run, and the job starts: train.py is there
    assert check_script_file(str(path), load_recipe("local"), out, {}, as_json=True) == 1
    findings = json.loads(out.getvalue())["findings"]
    assert [(f["line"], f["rule"]) for f in findings if f["level"] == "error"] == [(10, "shell_syntax")]
