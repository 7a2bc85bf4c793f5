"""CPU seconds of the test process and of the child processes it has waited for (bash -n, mksquashfs), for the
tests that bound how long a reading takes: on a loaded CI machine (two cores, the cluster lane beside) wall time
doubles while the CPU a reading needs does not, and a complexity bound is about the latter. Tests that bound a
timeout or a wait keep the wall clock."""

from __future__ import annotations

import os


def cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system
