"""Starting a build's tools and stopping them: the environment they start with, and a session of their own so
that they can be stopped completely.

A tool gets the host's environment less what the container runtime would carry into the container. Each tool
runs in a session (process group) of its own. Then an interruption stops the tool and
everything it started (apptainer's starter, the shell, uv or mksquashfs inside) before the step's
cleanup removes their half-written files; otherwise a still-running writer could recreate files under
a directory being deleted, or keep the store's disk busy after envbuild has exited.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping

# apptainer and singularity pass these into every container, --cleanenv or not (APPTAINERENV_HF_TOKEN
# becomes HF_TOKEN inside): a build step would see, and a post command could write into the image, what
# the user meant for their own runs. Builds pass their own variables with the prefix (Run.env).
CONTAINER_ENV_PREFIXES = ("APPTAINERENV_", "SINGULARITYENV_")


def tool_environment(environ: Mapping[str, str], extra: tuple[tuple[str, str], ...] = ()) -> dict[str, str]:
    """The environment of a build tool: the host's, less what the runtime would carry into the container,
    plus the action's own variables."""
    env = {key: value for key, value in environ.items() if not key.startswith(CONTAINER_ENV_PREFIXES)}
    env.update(dict(extra))
    return env


# mksquashfs and uv stop within a second of SIGTERM here; apptainer forwards it to the container's
# process. Slurm's KillWait (30 s by default) is the hard limit for the whole cleanup, so 10 s is ample.
GRACE_SECONDS = 10.0


def start_child(argv: tuple[str, ...], *, env: dict[str, str], cwd: str | None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, errors="replace", start_new_session=True,
    )


def stop_child(process: subprocess.Popen[str], grace: float = GRACE_SECONDS) -> None:
    """SIGTERM to the tool's whole process group, SIGKILL after `grace` seconds; returns once it is gone."""
    for signum, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 30.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signum)
        try:
            process.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    # Members of the group that outlived its leader (a daemonised child) get the same end.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    if process.stdout is not None:
        with contextlib.suppress(OSError):
            process.stdout.close()
