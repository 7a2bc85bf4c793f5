"""`envrun sbatch --check SCRIPT`: the pitfall rules of `envrun sbatch` applied to a hand-written batch
script's #SBATCH and srun lines, against the system's recipe.

    job.sh: lumi-g rules (SLURM_CLUSTER_NAME=lumi)
    job.sh:12: --gpus-per-task=1: lumi-g forbids this option without --gres-flags=allow-task-sharing
      why: per-task GPU cgroups hide the other GCDs ... (recipes/lumi-g.yaml:56 launch.forbidden_srun_options.0)
      fix: --gpus-per-node=8 (the GPUs per node) instead, ...
    job.sh: 1 finding for lumi-g

Each rule states the condition it applies under and is the function of its id; `recipe=None` (no recipe for
this site) runs only the rules that need no site facts, and the report says so first. Exit 0 when nothing is
an error or warning, 1 otherwise. `check_script` reads only the text, the recipe and the environment ($SBATCH_ACCOUNT), and asks
`bash -n` whether the text parses; `check_script_file` reads the file and writes the report (text or JSON).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace

from envbuild.shared.errors import EXIT_CLEAN, EXIT_PROBLEMS, UsageError
from envbuild.shared.terminaltext import printable
from envbuild.slurm.check import jobrules as checkjob
from envbuild.slurm.check import steprules as checksteps
from envbuild.slurm.check.parse import parse_script
from envbuild.slurm.check.rulebase import Context, FileProbe, Finding

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import TextIO

    from envbuild.recipes.protocols import SystemRecipe
    from envbuild.slurm.check.parse import BatchScript
    from envbuild.slurm.cluster import ClusterFacts

# (rule, level, needs the site's recipe), in the order their findings are listed when they share a line.
# error: sbatch refuses the job, or bash the script; warning: the job runs, worse than asked; info: not known.
RULES: tuple[tuple[Callable[[Context], list[Finding]], str, bool], ...] = (
    (checkjob.shell_syntax, "error", False),
    (checkjob.interpreter_line, "error", False),
    (checkjob.unread_lines, "info", False),
    (checkjob.commands_above_directives, "warning", False),
    (checkjob.late_directives, "warning", False),
    (checkjob.placeholders, "error", False),
    (checkjob.numbers, "error", False),
    (checkjob.account, "error", True),
    (checkjob.partition_exists, "error", True),
    (checkjob.partition_limits, "error", True),
    (checkjob.time_syntax, "error", False),
    (checkjob.srun_option_in_sbatch, "error", False),
    (checkjob.option_newer_than_slurm, "error", False),
    (checkjob.option_release_unknown, "info", False),
    (checkjob.cluster_partition, "error", False),
    (checkjob.cluster_limits, "error", False),
    (checkjob.cluster_account, "error", False),
    (checkjob.account_not_enforced, "info", False),
    (checkjob.accounting_unanswered, "info", False),
    (checkjob.recipe_vs_cluster, "info", True),
    (checkjob.sbatch_test_only, "error", False),
    (checkjob.sbatch_test_only_accepted, "info", False),
    (checkjob.gpus_per_node, "error", True),
    (checkjob.cpus_per_node, "error", True),
    (checkjob.memory_per_node, "error", True),
    (checkjob.gpu_partition_without_gpus, "warning", True),
    (checkjob.partial_gpus_on_billed_node, "warning", True),
    (checksteps.forbidden_options, "warning", True),
    (checksteps.srun_inherits, "warning", False),
    (checksteps.launcher_tasks, "warning", False),
    (checksteps.per_task_launch, "warning", False),
    (checksteps.launcher_without_srun, "warning", False),
    (checksteps.core_masks_on_shared_nodes, "warning", True),
    (checksteps.container_without_gpu_flag, "warning", True),
    (checksteps.signal_without_trap, "warning", False),
    (checksteps.task_variables_in_batch_shell, "warning", False),
    (checksteps.task_variables_inherited, "warning", False),
    (checksteps.program_not_visible, "error", False),
    (checksteps.program_missing, "error", False),
    (checksteps.program_unknown, "info", False),
)


@dataclass(frozen=True)
class CheckReport:
    system: str | None  # None: no recipe for this site
    findings: tuple[Finding, ...]
    notes: tuple[str, ...]
    directive_lines: int  # #SBATCH lines sbatch reads
    srun_lines: int

    @property
    def problems(self) -> int:
        """Errors and warnings (infos say what could not be known; they are nothing to fix)."""
        return sum(1 for finding in self.findings if finding.level != "info")


_ASK_BASH = (-1, "")  # check_script's default: ask bash -n itself


def check_script(text: str, recipe: SystemRecipe | None, environ: Mapping[str, str], site: str = "",
                 syntax_error: tuple[int, str] | None = _ASK_BASH, files: FileProbe | None = None,
                 cluster: ClusterFacts | None = None, test_only: tuple[int, str] | None = None,
                 parsed: BatchScript | None = None) -> CheckReport:
    """`site`: what detection saw, for the first note when `recipe` is None ("SLURM_CLUSTER_NAME=perlmutter").
    `syntax_error`: bash -n's answer for `text` where the caller has it (bash_syntax_error); by default bash is
    asked. A job handed to `sbatch <<EOF` in `text` is always asked of bash itself: bash -n of the script that
    holds it reads it as data.
    `files`: where the job starts and what exists there, for the rules that look (program_missing); None: not
    looked at (a script checked away from where it runs). `cluster`: what the cluster the script is for says
    now (envbuild.slurm.cluster), and `test_only` what `sbatch --test-only` said; None: not asked. `parsed`:
    parse_script(text) where the caller has read it already (a long script is not read twice)."""
    script = parse_script(text) if parsed is None else parsed
    submitted = submitted_here_document(text) if not script.directive_lines and not script.late_directives else None
    if submitted is not None:
        start, body, delimiter = submitted
        if not delimiter.startswith(("'", '"')):  # the script's shell expands the here-document: its own settings
            body = _expand_assigned(body, text.split("\n")[:start])
        # bash -n on this script reads the here-document as data: the job's own syntax is asked of the job's text
        # (bash_syntax_error(body), by the inner check's default), and this script's is reported at its own line
        inner = check_script(body, recipe, environ, site, _ASK_BASH, files, cluster, test_only)
        moved = tuple(replace(finding, line=finding.line + start, what=_moved_lines(finding.what, start),
                              fix=_moved_lines(finding.fix, start), edit=None if finding.edit is None else
                              (finding.edit[0] + start, finding.edit[1])) for finding in inner.findings)
        outer_error = bash_syntax_error(text) if syntax_error == _ASK_BASH else syntax_error
        if outer_error is not None:
            taken = {finding.line for finding in moved if finding.rule == "shell_syntax"}  # a marker in the job
            outer = [replace(finding, rule="shell_syntax", level="error") for finding in
                     checkjob.shell_syntax(Context(script, recipe, environ, [], outer_error)) if finding.line not in taken]
            moved = tuple(sorted((*moved, *outer), key=lambda finding: finding.line))
        note = (f"the script submits a job with `sbatch <<{delimiter}` (line {start}): the here-document is that job "
                "and is what was checked" + ("" if delimiter.startswith(("'", '"')) else
                                             "; its $VARIABLES are expanded by this script when it runs"))
        # without a recipe the first note stays the one that says so (the report's first line: whose rules ran)
        first = 1 if recipe is None else 0
        return replace(inner, findings=moved, notes=(*inner.notes[:first], note, *inner.notes[first:]))
    notes: list[str] = []
    if recipe is None:
        seen = site or _site_seen(environ)
        notes.append(f"no recipe for this site ({seen}): site rules skipped; only the rules that need no site "
                     "facts ran (choose a recipe with --system NAME where one fits)")
    ctx = Context(script, recipe, environ, notes, bash_syntax_error(text) if syntax_error == _ASK_BASH else syntax_error,
                  files, cluster, test_only)
    found: list[tuple[int, int, Finding]] = []
    for order, (rule, level, needs_site) in enumerate(RULES):
        if needs_site and recipe is None:
            continue
        found += [(finding.line, order, replace(finding, rule=rule.__name__, level=level)) for finding in rule(ctx)]
    findings = tuple(finding for _line, _order, finding in sorted(found, key=lambda item: item[:2]))
    return CheckReport(recipe.name if recipe is not None else None, findings, tuple(ctx.notes),
                       len(script.directive_lines), len(script.sruns))


_SBATCH_HERE_DOCUMENT = re.compile(r"^[ \t]*(?:\S*/)?sbatch\b[^\n]*?<<(-?)[ \t]*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\2[^\n]*\n",
                                   re.MULTILINE)


_SIMPLE_ASSIGNMENT = re.compile(r"^[ \t]*(?:export[ \t]+)?([A-Za-z_][A-Za-z0-9_]*)=([^\s;&|`$()<>'\"]*)[ \t]*$")


# in an unquoted here-document a backslash quotes only $, ` and itself (bash(1) "Here Documents"); a
# backslash-newline, which bash removes too, is left: the job's lines keep their numbers, and a continuation
# means the same to the job's shell
_HERE_DOCUMENT_EXPANSION = re.compile(r"\\([$`\\])|\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


# how a finding's text names another line of the script it is about ("opened on line 3", "(line 12)")
_LINE_REFERENCE = re.compile(r"(\b(?:on|from|above|below) line |\(line )(\d+)\b")


def _moved_lines(text: str, offset: int) -> str:
    """A finding's text about a here-document's job with the lines it names counted in the file that holds it."""
    return _LINE_REFERENCE.sub(lambda m: f"{m.group(1)}{int(m.group(2)) + offset}", text)


def _expand_assigned(body: str, before: list[str]) -> str:
    """`body` as the script's shell writes an unquoted here-document: \\$ as $ (the job's own variables and
    `$(...)`), and $NAME and ${NAME} replaced by the plain values the script assigned on its lines `before`;
    other variables stay as written."""
    values: dict[str, str] = {}
    for line in before:
        match = _SIMPLE_ASSIGNMENT.match(line)
        if match:
            values[match.group(1)] = match.group(2)

    def expanded(match: re.Match[str]) -> str:
        if match.group(1) is not None:
            return match.group(1)
        return values.get(match.group(2) or match.group(3), match.group(0))

    return _HERE_DOCUMENT_EXPANSION.sub(expanded, body)


def submitted_here_document(text: str) -> tuple[int, str, str] | None:
    """A job handed to sbatch on its standard input, `sbatch [options] <<EOF ... EOF` (a script that writes
    and submits its job): (the line before the here-document's first, its text, the delimiter as written);
    None when the script holds no such thing."""
    match = _SBATCH_HERE_DOCUMENT.search(text)
    if match is None:
        return None
    strip_tabs, quote, word = match.groups()
    body_start = match.end()
    end = re.compile(rf"^{chr(9) + '*' if strip_tabs else ''}{re.escape(word)}[ \t]*$", re.MULTILINE).search(text, body_start)
    body = text[body_start:end.start() if end else len(text)]
    if strip_tabs:
        body = "\n".join(line.lstrip("\t") for line in body.split("\n"))
    return text.count("\n", 0, body_start), body, f"{quote}{word}{quote}"


def _site_seen(environ: Mapping[str, str]) -> str:
    cluster = environ.get("SLURM_CLUSTER_NAME")
    if cluster:
        return f"SLURM_CLUSTER_NAME={cluster}"
    return f"hostname {environ['HOSTNAME']}" if environ.get("HOSTNAME") else "no site detected"


def bash_syntax_error(text: str) -> tuple[int, str] | None:
    """bash -n's first complaint about the text as (line, message), or None when it parses (or there is no
    bash to ask). bash reads it from stdin, with a time limit: a script is never run. Its stdin is a file in
    memory (memfd), not a pipe: from a pipe bash reads a byte per system call, seconds for a script of megabytes;
    from a file it can seek in, a buffer at a time."""
    import subprocess

    try:
        payload = text.encode("utf-8", "surrogateescape")
        script = _in_memory_file(payload)
        try:
            parsed = subprocess.run(["bash", "-n"], stdin=script, input=None if script is not None else payload,
                                    capture_output=True, timeout=10, check=False)
        finally:
            if script is not None:
                os.close(script)
    except (OSError, subprocess.TimeoutExpired, UnicodeError):
        return None
    if parsed.returncode == 0:
        return None
    first = (parsed.stderr.decode("utf-8", "replace").strip().splitlines() or ["a syntax error"])[0]
    message = first.removeprefix("bash: ")
    line = 0
    if message.startswith("line "):
        number, _, message = message[len("line "):].partition(": ")
        line = int(number) if number.isdigit() else 0
    return line, message


def _in_memory_file(payload: bytes) -> int | None:
    """A descriptor of an anonymous file holding `payload`, at its start; None where Linux's memfd is missing."""
    try:
        fd = os.memfd_create("envrun-check", os.MFD_CLOEXEC)
    except (AttributeError, OSError):
        return None
    try:
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view):]
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        os.close(fd)
        return None
    return fd


def render_report(name: str, report: CheckReport, site: str = "") -> str:
    """The text report. Its first line says whose rules ran: the clean line, or a heading above the findings
    ("job.sh: lumi-g rules (SLURM_CLUSTER_NAME=lumi)"), or that site rules were skipped."""
    lines: list[str] = []
    notes = list(report.notes)
    where = report.system or "this site (site rules skipped)"
    count = report.problems
    if report.system is None and notes:
        lines.append(f"{name}: note: {notes.pop(0)}")
    elif report.findings or notes:
        lines.append(f"{name}: {report.system} rules" + (f" ({site})" if site else ""))
    for finding in report.findings:
        level = "info: " if finding.level == "info" else ""
        lines += [f"{name}:{finding.line}: {level}{finding.what}", f"  why: {finding.why} ({finding.source})",
                  f"  fix: {finding.fix}"]
    lines += [f"{name}: note: {note}" for note in notes]
    if count:
        lines.append(f"{name}: {count} finding{'s' if count != 1 else ''} for {where}")
    else:
        lines.append(f"{name}: clean for {where} ({_plural(report.directive_lines, '#SBATCH line')}, "
                     f"{_plural(report.srun_lines, 'srun line')} checked)")
    return "\n".join(lines) + "\n"


def report_json(name: str, report: CheckReport) -> dict[str, object]:
    """The report as `envrun sbatch --check FILE --json` prints it."""
    return {
        "file": name, "system": report.system, "site_rules": report.system is not None,
        "findings": [{"rule": f.rule, "level": f.level, "line": f.line, "what": f.what, "why": f.why,
                      "source": f.source, "fix": f.fix, "edit": list(f.edit) if f.edit else None}
                     for f in report.findings],
        "notes": list(report.notes),
    }


def _plural(count: int, what: str) -> str:
    return f"{count} {what}{'s' if count != 1 else ''}"


def read_script(path: str) -> str:
    """The script's text; a UsageError for a file that cannot be a shell script (NUL bytes, not UTF-8)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_SCRIPT_BYTES + 1)
    except FileNotFoundError:
        raise UsageError(f"--check {path}: no such file", "give the path of the batch script, e.g. "
                         "`envrun sbatch --check job.sh`") from None
    except IsADirectoryError:
        raise UsageError(f"--check {path}: is a directory", "give the batch script file inside it") from None
    except OSError as exc:
        raise UsageError(f"--check {path}: cannot read it ({exc.strerror})",
                         "check its permissions, or copy it somewhere readable") from None
    if len(data) > MAX_SCRIPT_BYTES:
        raise UsageError(f"--check {path}: over {MAX_SCRIPT_BYTES // 1024 // 1024} MiB, not a batch script",
                         NOT_A_SCRIPT_FIX)
    nul = data.find(b"\0")
    if nul >= 0:
        raise UsageError(f"--check {path}: a binary file (a NUL byte at offset {nul}), not a shell script",
                         NOT_A_SCRIPT_FIX)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"--check {path}: not text (bytes that are not UTF-8 at offset {exc.start}), not a shell "
                         "script", NOT_A_SCRIPT_FIX) from None


MAX_SCRIPT_BYTES = 4 * 1024 * 1024  # sbatch's own limit is 4 MB (max_script_size in slurm.conf's SchedulerParameters)
NOT_A_SCRIPT_FIX = "give the batch script (the text file you submit with sbatch), e.g. `envrun sbatch --check job.sh`"


def refuse_non_script(path: str, script: BatchScript, syntax_error: tuple[int, str] | None) -> None:
    """Text with neither a #! line nor an #SBATCH line that bash cannot parse is not a batch script: say so
    rather than call it clean."""
    if script.interpreter is not None or script.directive_lines or script.late_directives or syntax_error is None:
        return
    line, message = syntax_error
    raise UsageError(f"--check {path}: not a shell script (no #! line, no #SBATCH line, and bash -n says: "
                     f"{'line ' + str(line) + ': ' if line else ''}{printable(message)})", NOT_A_SCRIPT_FIX)


def check_script_file(path: str, recipe: SystemRecipe | None, out: TextIO, environ: Mapping[str, str] | None = None,
                      site: str = "", as_json: bool = False, cluster: ClusterFacts | None = None,
                      test_only: tuple[int, str] | None = None, notes: tuple[str, ...] = (),
                      text: str | None = None) -> int:
    """Check the file and write its report; 1 when it has errors or warnings. `site`: how the recipe was
    chosen, or what detection saw where there is no recipe. `test_only`: what `sbatch --test-only` said of the
    script (its exit status and message), asked by the caller (envbuild.slurm.cluster.read_live_cluster) with
    `text`, the script as read_script read it then, which is the text checked here too."""
    text = read_script(path) if text is None else text
    environ = os.environ if environ is None else environ
    syntax_error = bash_syntax_error(text)
    script = parse_script(text)
    refuse_non_script(path, script, syntax_error)
    report = check_script(text, recipe, environ, site, syntax_error, FileProbe(os.getcwd(), os.path.exists), cluster,
                          test_only, parsed=script)
    if notes:
        report = replace(report, notes=(*report.notes, *notes))
    if as_json:
        import json

        out.write(json.dumps(report_json(path, report), indent=2) + "\n")
    else:
        out.write(render_report(path, report, site))
    return EXIT_PROBLEMS if report.problems else EXIT_CLEAN
