"""envrun under srun: srun runs as envrun's child instead of replacing it, so that envrun can say in one line why
a failed step failed (envbuild.launch.exitcause). Everything else stays as with exec:

- srun's stdout and stdin are envrun's own; its stderr (Slurm's messages and the tasks' stderr) passes through a
  pipe and is written on unchanged as it arrives, while the lines that may name a cause are kept (a few hundred).
- srun's exit status is envrun's (128 + N when srun was ended by signal N).
- Signals sent to envrun reach srun: SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2 always (a second SIGTERM or SIGHUP
  does nothing more in srun: it has already killed the step), SIGINT and SIGQUIT only when they did not come from
  the terminal, which sends them to srun itself too: srun reads two Ctrl-C within a second as "abort".
  Signals that envrun ignores (SIGINT in a batch script's background job) stay ignored, in srun too.
- Without envrun reading the pipe (envrun killed with SIGKILL), srun's next write fails and srun ends the step.

Light: os, _signal (signal without enum) and select; the cause is worked out after srun has ended.
"""

from __future__ import annotations

import os
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal as _signal  # typeshed has no stub for the C module; signal re-exports what is used of it
    from collections.abc import Callable

    from envbuild.report.stepreport import StepReport
else:
    import _signal

_FORWARDED = ("SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGINT", "SIGQUIT")
_FROM_TERMINAL = ("SIGINT", "SIGQUIT")
_KEEP_LINES = 400
_MAX_LINE = 65536
_DRAIN_S = 2.0  # after srun has ended, how long its stderr is still read (a process it left may hold the pipe)


class _State:
    child = 0
    pending: list[int] = []  # noqa: RUF012 - signals that arrived before srun started


def run_step(argv: tuple[str, ...], env: dict[str, str], *, step: str, time_limit: str = "",
             report: StepReport | None = None) -> int:
    """Run srun (argv) as a child, pass its stderr through, and return the exit code envrun should end with.
    On failure, one line from envbuild.launch.exitcause is written to stderr after srun's own output. With a
    `report`, the nodes' sampler records, the lines framed with the report's key, are taken out of the stderr
    (envbuild.report.wire) and the report's summary is written after everything else."""
    import select

    splitter = None
    if report is not None:
        from envbuild.report.wire import StreamSplitter

        splitter = StreamSplitter(report.key)

    read_end, write_end = os.pipe()
    # With a report, srun's stdout passes through envrun too (unchanged, as stderr does): the step's throughput
    # line (`envrun-metric:`) is usually printed there. A task's stdout is a pipe to slurmstepd either way.
    out_read, out_write = os.pipe() if report is not None else (-1, -1)
    terminal_signals = {getattr(_signal, name) for name in _FROM_TERMINAL}
    previous = {}
    for name in _FORWARDED:
        number = getattr(_signal, name)
        handler = _signal.getsignal(number)
        if handler is _signal.SIG_IGN:
            continue  # ignored stays ignored (srun inherits that), as with exec
        previous[number] = handler
        _signal.signal(number, _make_forwarder(number in terminal_signals))
    pid = os.fork()
    if pid == 0:  # the child: srun
        try:
            os.close(read_end)
            os.dup2(write_end, 2)
            os.close(write_end)
            if out_write >= 0:
                os.close(out_read)
                os.dup2(out_write, 1)
                os.close(out_write)
            for number in previous:
                _signal.signal(number, _signal.SIG_DFL)
            for name in ("SIGPIPE", "SIGXFSZ"):  # Python ignores these; a program started from a shell does not
                _signal.signal(getattr(_signal, name), _signal.SIG_DFL)
            os.execvpe(argv[0], list(argv), env)  # noqa: S606 - argv passed as words, no shell
        except OSError as exc:
            os.write(2, f"envrun: could not start {argv[0]}: {exc.strerror}\n".encode())
        os._exit(127)
    os.close(write_end)
    streams = {read_end: 2}  # our read end -> the fd of envrun's that it passes through to
    if out_write >= 0:
        os.close(out_write)
        streams[out_read] = 1
    _State.child = pid
    for number in _State.pending:
        _send(number)
    kept: list[str] = []
    status = None
    drain_until = 0.0
    partial = {fd: b"" for fd in streams}
    writable = {1: True, 2: True}
    at_line_start = True  # whether srun's stderr so far ends with a newline
    open_streams = dict(streams)
    while open_streams:
        ready = select.select(list(open_streams), [], [], 0.5 if status is None else 0.2)[0]
        if status is not None and (not ready or time.monotonic() > drain_until):
            break  # srun has ended and a pipe stays open: a process it left holds it
        if not ready:
            done, wait_status = os.waitpid(pid, os.WNOHANG)
            if done:
                status, drain_until = wait_status, time.monotonic() + _DRAIN_S
            continue
        for fd in ready:
            chunk = os.read(fd, 65536)
            target = streams[fd]
            if not chunk:
                del open_streams[fd]
                continue
            if target == 2 and splitter is not None and report is not None:
                chunk, payloads = splitter.feed(chunk)
                for payload in payloads:
                    report.feed(payload)
                if not chunk:
                    continue
            if writable[target]:
                writable[target] = _write_all(chunk, target)
            if target == 2:
                at_line_start = chunk.endswith(b"\n")
                partial[fd] = _keep(partial[fd] + chunk, kept, report)
            else:
                partial[fd] = _metric_lines(partial[fd] + chunk, report)
    for fd in streams:
        os.close(fd)
    if splitter is not None:
        held = splitter.flush()  # a line cut short that only looked like a record: srun's, passed on
        if held and writable[2]:
            writable[2] = _write_all(held)
            at_line_start = held.endswith(b"\n")
        partial[read_end] += held
    if partial[read_end]:
        _keep(partial[read_end] + b"\n", kept, report)
    if partial.get(out_read):
        _metric_lines(partial[out_read] + b"\n", report)
    writable_err = writable[2]
    if status is None:
        status = os.waitpid(pid, 0)[1]
    _State.child = 0
    for number, handler in previous.items():
        _signal.signal(number, handler)
    code = os.waitstatus_to_exitcode(status)
    final = code if code >= 0 else 128 - code
    if code != 0:
        from envbuild.launch.exitcause import cause_exit_code, explain

        line = explain(kept, code, step, time_limit)
        if writable_err:
            _write_all(("" if at_line_start else "\n").encode() + (line + "\n").encode())
            at_line_start = True
        final = cause_exit_code(kept, final)
    if report is not None:
        summary = report.finish(final)
        if writable_err:
            _write_all(("" if at_line_start else "\n").encode() + summary.encode())
    return final


def _make_forwarder(from_terminal: bool) -> Callable[[int, object], None]:
    def forward(number: int, _frame: object) -> None:
        if from_terminal and _terminal_sent_it():
            return
        if _State.child:
            _send(number)
        else:
            _State.pending.append(number)

    return forward


def _send(number: int) -> None:
    try:
        os.kill(_State.child, number)
    except ProcessLookupError:
        pass


def _terminal_sent_it() -> bool:
    """Whether envrun runs in the foreground of a terminal: Ctrl-C / Ctrl-\\ then reach srun (in envrun's process
    group) directly, and passing them on would count twice."""
    for fd in (0, 1, 2):
        try:
            if os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp():
                return True
        except OSError:
            continue
    return False


def _write_all(data: bytes, fd: int = 2) -> bool:
    """Write to envrun's stderr (or stdout); False once it is gone (then srun's output is read and dropped, not
    left blocking)."""
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except OSError:
            return False
        view = view[written:]
    return True


def _metric_lines(buffer: bytes, report: StepReport | None) -> bytes:
    """Show the report the complete lines of srun's stdout that carry a metric; return the incomplete rest."""
    from envbuild.report.metricline import METRIC_PREFIX

    *lines, rest = buffer.split(b"\n")
    if report is not None:
        prefix = METRIC_PREFIX.encode()
        for raw in lines:
            if prefix in raw:
                report.line(raw.decode("utf-8", "replace").rstrip("\r"))
    return rest[-_MAX_LINE:]


def _keep(buffer: bytes, kept: list[str], report: StepReport | None = None) -> bytes:
    """Keep the complete lines of `buffer` that may name a cause (and show the report its metric lines); return
    the incomplete rest."""
    from envbuild.launch.exitcause import keep_line

    *lines, rest = buffer.split(b"\n")
    for raw in lines:
        line = raw.decode("utf-8", "replace").rstrip("\r")
        if keep_line(line):
            kept.append(line)
        if report is not None:
            report.line(line)
    if len(kept) > _KEEP_LINES:  # the first lines name the cause; the last ones say how it ended
        del kept[_KEEP_LINES // 2 : len(kept) - _KEEP_LINES // 2]
    return rest[-_MAX_LINE:]
