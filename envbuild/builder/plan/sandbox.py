"""The build sandbox: where envbuild puts things inside it, and so inside the image (build steps, the executor
and verify share these paths), and a program run inside it (`apptainer exec`), with host directories bound in,
as a Run action."""

from __future__ import annotations

from dataclasses import dataclass

from envbuild.builder.plan.actions import Run
from envbuild.builder.plan.plandata import BuildRequest
from envbuild.shared.envnames import shell_evaluated_literally

# Build-time mount points inside the sandbox (host pip sources, caches, tools); removed before squashing.
HOST_MOUNT = "/.envbuild-host"

# Where the image records how it was made.
RECORD_DIR = "/.envbuild"

ENV_SCRIPT = "/.singularity.d/env/90-envbuild.sh"

# Apptainer's and SingularityCE's default PATH inside a container.
DEFAULT_CONTAINER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

LABELS_FILE = "/.singularity.d/labels.json"

# What `apptainer build --sandbox` (and singularity's) writes into a tree by host paths, following any link on the
# way: a base whose tree has a link out of it at one of these would have the runtime write on the host.
RUNTIME_WRITES = (
    "/.singularity.d/labels.json", "/.singularity.d/Singularity", "/.singularity.d/runscript",
    "/.singularity.d/startscript", "/.singularity.d/test", "/.singularity.d/runscript.help",
    "/.singularity.d/env/90-environment.sh", "/.singularity.d/actions/run", "/.singularity.d/libs/.keep",
    "/environment", "/singularity", "/.exec", "/.run", "/.shell", "/.test",
)


@dataclass(frozen=True)
class Bind:
    host: str
    inside: str  # absolute path inside the sandbox
    is_file: bool = False
    read_only: bool = True

    def flag(self) -> str:
        return f"{self.host}:{self.inside}" + (":ro" if self.read_only else "")


def sandbox_exec(request: BuildRequest, sandbox: str, command: list[str], *, writable: bool,
          binds: list[Bind] | None = None, env: list[tuple[str, str]] | None = None, overlay: str | None = None) -> Run:
    """`command` run in `sandbox`; with `overlay`, a directory whose files lie over the sandbox's, read-only
    (envbuild.builder.plan.upperplan: the user layer of a `--layered` build)."""
    runtime = request.facts.runtime
    # --cleanenv: the host's environment (a venv's VIRTUAL_ENV, PYTHONPATH, PIP_*) must not leak
    # into the build. --no-mount: nothing of the host's home or working directory is written into
    # (or left as an empty mount point in) the image; writable steps also use the image's own /tmp,
    # while read-only test runs keep the host's /tmp, as every later run of the image will.
    # --no-umask: what the tools write inside gets umask 0022's modes, whatever the builder's umask (0007 would
    # leave the venv unreadable to every user of the image but root).
    argv = [runtime.path, "exec", "--cleanenv", "--no-umask", "--no-mount", "home,cwd,tmp" if writable else "home,cwd", "--pwd", "/"]
    if writable:
        argv.append("--writable")
    for bind in binds or []:
        argv += ["--bind", bind.flag()]
    if overlay:
        argv += ["--overlay", f"{overlay}:ro"]
    argv += [sandbox, *command]
    # The runtime evaluates APPTAINERENV_ values as shell text: escaped, so that a password with a `$` in a
    # credential variable, or a proxy URL, arrives as written (builds do not pass --no-eval).
    host_env = [(runtime.env_prefix + key, shell_evaluated_literally(value)) for key, value in (env or [])]
    host_env += [(runtime.env_prefix + key, shell_evaluated_literally(value)) for key, value in request.facts.proxy_env]
    if request.options.source_date_epoch is not None:
        # Python then writes hash-based .pyc files (no source times inside): reproducible byte code.
        host_env.append((runtime.env_prefix + "SOURCE_DATE_EPOCH", str(request.options.source_date_epoch)))
    return Run(tuple(argv), env=tuple(host_env))
