"""What the launch planner is given and what it returns (envbuild.launch.launchplan), as plain data.

Light on purpose (no dataclasses or typing at run time): envrun builds these on every launch.
"""

from __future__ import annotations

from envbuild.launch.bindstyle import SLURM_NOT_READ, TORCH_NOT_READ

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from envbuild.host.node import HostNode
    from envbuild.host.runtime import Runtime
    from envbuild.launch.allocation import Allocation
    from envbuild.launch.visibility import HostPaths
    from envbuild.recipes.protocols import SystemRecipe


class LaunchRequest:
    """What to launch and everything the planner needs to know, as plain data."""

    __slots__ = ("allocation", "binds", "command", "cwd", "env", "environ", "host", "host_paths", "image",
                 "image_with_conda", "missing_recipe_binds", "notes", "overlays", "recipe", "report_sampler", "runscript", "runtime",
                 "runtime_info", "slurm", "step_timeout", "step_timeout_from", "strict_net", "system_reason", "torch",
                 "warnings")

    def __init__(
        self, *, command: tuple[str, ...], image: str, recipe: SystemRecipe, runtime: Runtime, cwd: str,
        binds: tuple[str, ...] = (), env: tuple[tuple[str, str], ...] = (), environ: Mapping[str, str] | None = None,
        missing_recipe_binds: tuple[str, ...] = (), system_reason: str = "", host: HostNode | None = None,
        allocation: Allocation | None = None, overlays: tuple[tuple[str, str], ...] = (),
        warnings: tuple[str, ...] = (), notes: tuple[str, ...] = (), strict_net: bool = False,
        step_timeout: str = "", step_timeout_from: str = "--step-timeout", runscript: str = "",
        host_paths: HostPaths | None = None, report_sampler: tuple[str, ...] = (), runtime_info: bool = False,
        slurm: tuple[str, str] = SLURM_NOT_READ, torch: tuple[str, str, bool] = TORCH_NOT_READ,
        image_with_conda: str | None = None,
    ) -> None:
        self.command = command  # everything after envrun's own options, e.g. ("srun", "torchrun", "train.py")
        self.image = image
        self.recipe = recipe
        self.runtime = runtime
        self.cwd = cwd
        self.binds = binds  # user binds (--bind and config), checked to exist by the caller
        self.env = env  # from envrun's config (HF_HOME, TORCH_HOME, ...)
        self.environ = environ if environ is not None else {}
        self.missing_recipe_binds = missing_recipe_binds  # recipe binds absent on this host (skipped, with a note)
        self.system_reason = system_reason
        self.host = host  # this machine's CPUs and GPUs (None: unknown, e.g. a wrapper planned for later)
        self.allocation = allocation  # the job envrun runs in (read_allocation(environ)), None outside one
        # venv overlays, bottom first: (absolute host path of NAME.sqsh, mount point its record names)
        self.overlays = overlays
        self.warnings = warnings  # the caller's own (e.g. an overlay run on another base with --force-overlay)
        self.notes = notes  # the caller's own reasons (how the image was found, overlay checks)
        self.strict_net = strict_net  # --strict-net: NCCL_NET from the recipe, so a missing transport fails the job
        self.step_timeout = step_timeout  # the user's duration ("30m", "1:30:00"): srun's --time for the step
        self.step_timeout_from = step_timeout_from  # where it was given, for the notes and messages
        # What the image's runscript does when envrun should honour it (envbuild.launch.runscript: start the
        # image with `run --no-eval` instead of `exec`); "" for `exec`
        self.runscript = runscript
        # This host's file system, asked whether the command's paths are under the binds (envbuild.launch.
        # visibility); None: not checked (a plan for golden tests)
        self.host_paths = host_paths
        # The job report (envbuild.report): the words that start this node's sampler under srun, e.g.
        # ("env", "PYTHONPATH=/opt/envbuild", "/opt/envbuild/.venv/bin/python", "-m", "envbuild.report.sampler",
        # "--interval", "5"); () for no report
        self.report_sampler = report_sampler
        # Whether the runtime prints its INFO lines (apptainer's "gocryptfs not found" at every start); without it
        # the runtime runs with --quiet, which keeps its warnings and errors
        self.runtime_info = runtime_info
        # This Slurm's version and where it was read ("23.11.10", "`srun --version` (/usr/bin/srun)"), or "" and
        # why it is unknown: whether srun has the site's newer GPU binding (envbuild.launch.bindstyle)
        self.slurm = slurm
        # The image's torch version, where it was read, and whether the image has numactl: whether torchrun's own
        # NUMA binding may replace envrun's per-rank affinity (envbuild.launch.bindstyle)
        self.torch = torch
        # Whether the image's environment scripts may set $WITH_CONDA (envbuild.launch.imageenv): "" where none can,
        # else why they may; None: not read (a plan for golden tests, a wrapper planned for later), so the
        # container shim activates it whenever it is set, as it does where it may be
        self.image_with_conda = image_with_conda


class LaunchPlan:
    """The host command and the environment changes envrun makes before exec'ing it."""

    __slots__ = ("argv", "env", "program_binds", "reasons", "report", "step", "time_limit", "unset", "warnings")

    def __init__(self, argv: tuple[str, ...], env: tuple[tuple[str, str], ...], unset: tuple[str, ...],
                 reasons: tuple[str, ...], warnings: tuple[str, ...] = (), step: str = "", time_limit: str = "",
                 program_binds: tuple[str, ...] = (), report: bool = False) -> None:
        self.argv = argv
        self.env = env  # set in envrun's environment before exec (apptainer passes it on)
        self.unset = unset
        self.reasons = reasons  # why each setting was chosen
        self.warnings = warnings  # combinations that run, but not well: always shown
        # Under srun: what each task runs ("torchrun", "accelerate", "deepspeed", or "rank" for one task per
        # rank), so that envrun can name the cause when the step fails; "" without srun (envrun execs).
        self.step = step
        self.time_limit = time_limit  # the step's time limit in words ("--step-timeout 30m"), "" when none
        self.program_binds = program_binds  # `DIR:DIR:ro` binds envrun added so that the container sees the program
        self.report = report  # each node's sampler runs beside the step: envrun collects its records (envbuild.report)

    def script(self) -> str:
        """A runnable, shell-quoted script doing exactly what envrun would do (envbuild.shared.shelltext: names
        checked, values quoted, comments escaped)."""
        from shlex import quote

        from envbuild.shared.shelltext import comment, env_name

        lines = ["#!/bin/sh", "# generated by envrun --dry-run"]
        lines += [comment(f"warning: {warning}") for warning in self.warnings]
        lines += [comment(reason) for reason in self.reasons]
        lines += [f"unset {env_name(name, 'a variable envrun unsets')}" for name in self.unset]
        lines += [f"export {env_name(k, 'a variable envrun sets')}={quote(v)}" for k, v in self.env]
        lines.append("exec " + " ".join(quote(a) for a in self.argv))
        return "\n".join(lines) + "\n"
