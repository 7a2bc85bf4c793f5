"""`envrun doctor`: resolve what the launch would use (envbuild.doctor.gather), then either check it (on this
machine, the job's nodes or recorded hosts) and report, or print this host's record (--node-record, what
doctor runs on each node of a job)."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from envbuild.shared.errors import EXIT_CLEAN, UsageError

if TYPE_CHECKING:
    from envbuild.doctor.gather import DoctorRequest


def run_doctor_command(*, image: str | None, overlays: Sequence[str], system: str | None, command: Sequence[str],
                       strict_net: bool, probe: bool, host_records: Sequence[str], strict: bool, as_json: bool,
                       node_record: bool, environ: Mapping[str, str], cwd: str) -> int:
    """`envrun doctor` as its options ask: the findings printed (as JSON with as_json) and the report's exit
    status (warnings count with strict), or with node_record this host's record. A --host-record file that
    cannot be read or is not a record is a usage error."""
    from envbuild.doctor.gather import DoctorRequest

    request = DoctorRequest(image=image, overlays=list(overlays), system=system, command=tuple(command),
                            strict_net=strict_net, probe=probe, host_records=list(host_records), environ=dict(environ),
                            cwd=cwd)
    try:
        if node_record:
            print_node_record(request)
            return EXIT_CLEAN
        return doctor(request, strict=strict, as_json=as_json)
    except (OSError, ValueError) as exc:
        if not host_records:
            raise
        raise UsageError(str(exc), "give a file written by `envrun doctor --node-record`") from None


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
