"""The job report of one srun step, as envrun's step supervisor (envbuild.launch.supervise) keeps it.

The supervisor hands over what it takes out of srun's stderr: the nodes' records (envbuild.report.wire: the
lines framed with this step's `key`, which envrun hands the host shim and no one else) and the step's
`envrun-metric:` lines. When srun has ended, `finish` builds the report (envbuild.report.collect),
writes its files when a directory was asked for, and returns the summary for envrun's stderr. The summary is
printed on a terminal and holds text from outside envrun (node and GPU names, the job's name, the program's
words): every character that could steer the terminal is shown as an escape (envbuild.shared.terminaltext).

A report never fails the step: whatever goes wrong here (a module that cannot load, a full disk, records
that make no sense) costs the report, is said in one line, and envrun still exits with srun's status.
"""

from __future__ import annotations

import os
import time

from envbuild.report.metricline import METRIC_PREFIX
from envbuild.report.wire import new_key
from envbuild.shared.terminaltext import printable, printable_lines

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from envbuild.report.collect import Collector

JOB_VARIABLES = (("id", "SLURM_JOB_ID"), ("name", "SLURM_JOB_NAME"), ("nodes", "SLURM_JOB_NODELIST"))


class StepReport:
    """Records in, summary and files out. `directory` "" prints the summary only."""

    def __init__(self, *, command: tuple[str, ...], environ: Mapping[str, str], directory: str = "") -> None:
        self.command = list(command)
        self.job = {key: printable(environ[name]) for key, name in JOB_VARIABLES if environ.get(name)}
        self.directory = expand_directory(directory, environ) if directory else ""
        self.started = time.time()
        self.key = new_key()  # frames this step's records (envbuild.report.wire); the program never sees it
        self.records = 0
        self._collector: Collector | None = None
        self._failed = ""
        self._metric = ""

    def feed(self, payload: str) -> None:
        """One record's text (after the marker)."""
        if self._failed:
            return
        try:
            if self._collector is None:
                from envbuild.report.collect import Collector

                self._collector = Collector(self.command, self.job)
            self._collector.feed(payload)
            self.records += 1
        except Exception as exc:  # noqa: BLE001 - the report must never fail the step
            self._failed = f"could not read the samplers' records ({type(exc).__name__}: {exc})"

    def line(self, text: str) -> None:
        """One complete line of the step's stdout or stderr; the last throughput line counts (as in a sweep)."""
        if METRIC_PREFIX in text:
            self._metric = text[text.index(METRIC_PREFIX) :]

    def finish(self, exit_code: int) -> str:
        """The summary to print (ending with a newline), after writing the files; never raises."""
        if self._failed:
            return printable(f"envrun: report: {self._failed}; no report for this step") + "\n"
        if self._collector is None:
            return ("envrun: report: no sampler reported (the step ended before its first record, its stderr went "
                    "elsewhere, or srun --export kept the step's report key from the tasks); no report for this step\n")
        try:
            from envbuild.report.reportrender import summary_text, write_report

            if self._metric:
                self._collector.metric(self._metric)
            report = self._collector.build(exit_code, self.started, time.time())
            text = summary_text(report)
            if self.directory:
                _site_packages()  # matplotlib for the timeline: bin/envrun starts Python without them (-S)
                written = write_report(report, target_directory(self.directory, self.job))
                text += f"report: {os.path.dirname(written[0]) if written else self.directory}\n"
            text = printable_lines(text.rstrip("\n"))  # its lines stay lines; nothing else steers the terminal
            return text + "\n"
        except Exception as exc:  # noqa: BLE001
            return printable(f"envrun: report: could not write the report ({type(exc).__name__}: {exc})") + "\n"


def _site_packages() -> None:
    """Turn on the environment's site-packages when envrun started without them (bin/envrun's `python -S`,
    which keeps every launch fast); the step has ended, so the time no longer counts."""
    import sys

    if sys.flags.no_site and not any(path.endswith("-packages") for path in sys.path):
        import site

        site.main()


def expand_directory(pattern: str, environ: Mapping[str, str]) -> str:
    """--report's directory with Slurm's filename patterns that make sense for a job: %j (job id), %x (job
    name), %A and %a (array job id and task index), %u (user), %% (a %). Others stay as they are; outside a
    job %j is "local" and %x "envrun"."""
    job = environ.get("SLURM_JOB_ID") or "local"
    values = {"j": job, "x": environ.get("SLURM_JOB_NAME") or "envrun", "A": environ.get("SLURM_ARRAY_JOB_ID") or job,
              "a": environ.get("SLURM_ARRAY_TASK_ID") or "0", "u": environ.get("USER") or str(os.getuid()), "%": "%"}
    out: list[str] = []
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "%" and index + 1 < len(pattern) and pattern[index + 1] in values:
            out.append(values[pattern[index + 1]])
            index += 2
            continue
        out.append(char)
        index += 1
    return "".join(out)


def target_directory(directory: str, job: Mapping[str, str]) -> str:
    """Where this step's files go: `directory`, or a step-N folder in it when an earlier step of the job wrote
    its report there (a batch script that runs several steps keeps every step's report)."""
    if not os.path.exists(os.path.join(directory, "report.json")):
        return directory
    number = 1
    while os.path.exists(os.path.join(directory, f"step-{number}", "report.json")):
        number += 1
    return os.path.join(directory, f"step-{number}")
