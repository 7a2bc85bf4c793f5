"""`envrun sbatch --check SCRIPT`: the pitfall rules of `envrun sbatch` applied to a hand-written batch
script's #SBATCH and srun lines, against the system's recipe.

    job.sh:12: --gpus-per-task=1: lumi-g forbids this option without --gres-flags=allow-task-sharing
      why: per-task GPU cgroups hide the other GCDs ... (recipes/lumi-g.yaml:56 launch.forbidden_srun_options.0)
      fix: --gpus-per-node=8 (the GPUs per node) instead, ...
    job.sh: 1 finding for lumi-g

Exit 0 when clean, 1 with findings. `check_script` is pure over the text, the recipe and the environment
(only $SBATCH_ACCOUNT is read); `check_script_file` reads the file and writes the report.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from envbuild.batch import checkjob, checksteps
from envbuild.batch.checkbase import Context, Finding
from envbuild.batch.scriptparse import parse_script
from envbuild.errors import UsageError
from envbuild.terminaltext import printable

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import TextIO

    from envbuild.batch.scriptparse import BatchScript
    from envbuild.recipes.schema import Recipe

# In the order their findings are listed when they share a line.
RULES: tuple[Callable[[Context], list[Finding]], ...] = (
    checkjob.interpreter_line,
    checkjob.late_directives,
    checkjob.numbers,
    checkjob.account,
    checkjob.partition_exists,
    checkjob.partition_limits,
    checkjob.time_syntax,
    checkjob.gpus_per_node,
    checkjob.cpus_per_node,
    checkjob.memory_per_node,
    checksteps.forbidden_options,
    checksteps.srun_inherits,
    checksteps.launcher_tasks,
    checksteps.per_task_launch,
    checksteps.launcher_without_srun,
    checksteps.core_masks_on_shared_nodes,
)


@dataclass(frozen=True)
class CheckReport:
    system: str
    findings: tuple[Finding, ...]
    notes: tuple[str, ...]
    directive_lines: int  # #SBATCH lines sbatch reads
    srun_lines: int


def check_script(text: str, recipe: Recipe, environ: Mapping[str, str]) -> CheckReport:
    script = parse_script(text)
    ctx = Context(script, recipe, environ)
    found: list[tuple[int, int, Finding]] = []
    for order, rule in enumerate(RULES):
        found += [(finding.line, order, finding) for finding in rule(ctx)]
    findings = tuple(finding for _line, _order, finding in sorted(found, key=lambda item: item[:2]))
    return CheckReport(recipe.name, findings, tuple(ctx.notes), len(script.directive_lines), len(script.sruns))


def render_report(name: str, report: CheckReport) -> str:
    lines: list[str] = []
    for finding in report.findings:
        lines += [f"{name}:{finding.line}: {finding.what}", f"  why: {finding.why} ({finding.source})",
                  f"  fix: {finding.fix}"]
    lines += [f"{name}: note: {note}" for note in report.notes]
    count = len(report.findings)
    if count:
        lines.append(f"{name}: {count} finding{'s' if count != 1 else ''} for {report.system}")
    else:
        lines.append(f"{name}: clean for {report.system} ({_plural(report.directive_lines, '#SBATCH line')}, "
                     f"{_plural(report.srun_lines, 'srun line')} checked)")
    return "\n".join(lines) + "\n"


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


def refuse_non_script(path: str, text: str, script: BatchScript) -> None:
    """Text with neither a #! line nor an #SBATCH line that bash cannot parse is not a batch script: say so
    rather than call it clean."""
    if script.interpreter is not None or script.directive_lines or script.late_directives:
        return
    import subprocess

    try:
        parsed = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return  # no bash to ask: the rules still report the missing #! line
    if parsed.returncode != 0:
        first = (parsed.stderr.strip().splitlines() or ["a syntax error"])[0].replace("bash: ", "", 1)
        raise UsageError(f"--check {path}: not a shell script (no #! line, no #SBATCH line, and bash -n says: "
                         f"{printable(first)})", NOT_A_SCRIPT_FIX)


def check_script_file(path: str, recipe: Recipe, out: TextIO, environ: Mapping[str, str] | None = None) -> int:
    text = read_script(path)
    refuse_non_script(path, text, parse_script(text))
    report = check_script(text, recipe, os.environ if environ is None else environ)
    out.write(render_report(path, report))
    return 1 if report.findings else 0
