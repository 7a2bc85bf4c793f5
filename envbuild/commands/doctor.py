"""`envrun doctor`: resolve what the launch would use (envbuild.doctor.gather), then either check it (on this
machine, the job's nodes or recorded hosts) and report, or print this host's record (--node-record, what
doctor runs on each node of a job)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from envbuild.doctor.gather import DoctorRequest


def doctor(request: DoctorRequest, *, strict: bool, as_json: bool) -> int:
    """Check and print the findings (as JSON with as_json); the report's exit status (warnings count with strict)."""
    from envbuild.doctor.gather import run_doctor

    report = run_doctor(request)
    sys.stdout.write(report.to_json() + "\n" if as_json else report.render())
    return report.exit_code(strict)


def print_node_record(request: DoctorRequest) -> None:
    """This host's record, with the container's answer, as one JSON line."""
    from envbuild.doctor.gather import node_record, resolve
    from envbuild.doctor.hostrecord import record_lines

    print("\n".join(record_lines(node_record(resolve(request), request.environ))), flush=True)
