"""`envrun`: run a command (torchrun, python, ...) inside an envbuild image, optionally under srun.

envrun starts before every job step, so its own start-up is part of every launch (issue goal: under
50 ms over a bare `apptainer exec`). Its handful of options is read by a small loop; argparse (slow
to import with re and enum) is only loaded for --help and for input the loop does not accept, and click
(slower still), which `envbuild` uses, not at all. Only light modules are imported on the way to exec: recipes
come from their JSON cache, pydantic is loaded only to validate a changed file.
"""

from __future__ import annotations

import os
import sys

from envbuild import __version__

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable
    from typing import Any

    from envbuild.commands.launch import RunRequest


class Subcommand:
    """One of envrun's subcommands (its first word): what `envrun --help` says of it, the function that runs it
    with the words after it, and the one that builds its parser for docs/gen_reference.py (None: it is left
    out of the reference). Both as "module:function", imported when used: the launch loads none of them."""

    __slots__ = ("parser", "run", "summary")

    def __init__(self, summary: str, run: str, parser: str | None = None) -> None:
        self.summary = summary
        self.run = run
        self.parser = parser


# envrun's subcommands, the one list: main() dispatches from it, `envrun --help` and the CLI reference list it.
SUBCOMMANDS = {
    "sbatch": Subcommand("write, check, submit and follow a Slurm batch script that runs COMMAND with envrun",
                         "envbuild.cli.sbatch_cmd:main", "envbuild.cli.sbatch_cmd:build_parser"),
    "sweep": Subcommand("run COMMAND as one batch job per scale point and report how it scales",
                        "envbuild.cli.sweep_cmd:main", "envbuild.cli.sweep_cmd:build_parser"),
    "doctor": Subcommand("find what would make a job fail or run slowly, before it runs",
                         "envbuild.cli.doctor_cmd:main", "envbuild.cli.doctor_cmd:build_parser"),
    "kernel": Subcommand("install, list and remove Jupyter kernels that run inside the image (envrun kernel --help)",
                         "envbuild.cli.kernel_cmd:main", "envbuild.cli.kernel_cmd:build_kernel_parser"),
    "recipe": Subcommand("draft a system recipe for this cluster from what its Slurm says (envrun recipe draft --help)",
                         "envbuild.cli.recipe_cmd:main", "envbuild.cli.recipe_cmd:build_parser"),
    "shell": Subcommand("an interactive shell in the image, with envrun's environment",
                        "envbuild.cli.kernel_cmd:shell_main", "envbuild.cli.kernel_cmd:build_shell_parser"),
    # generated --requeue scripts run it, nobody types it: no parser, not in the reference
    "signal-ranks": Subcommand("forward a signal to this node's ranks (what envrun sbatch --requeue scripts run)",
                               "envbuild.cli.envrun_main:signal_ranks_main"),
}


def imported(target: str) -> Callable[..., Any]:
    """The function a table entry names ("module:function"), its module imported now."""
    import importlib

    module, _, name = target.partition(":")
    function: Callable[..., Any] = getattr(importlib.import_module(module), name)
    return function


DESCRIPTION = "Run COMMAND inside IMG with the system's binds, environment and CPU binding.\n\ncommands:\n" + "".join(
    f"  {name:<14}{subcommand.summary}\n" for name, subcommand in SUBCOMMANDS.items())

EPILOG = """examples:
  envrun --image env.sif srun torchrun train.py --lr 3e-4     # one launcher per node
  envrun --image env.sif srun python train.py                 # one task per GPU
  envrun --image env.sif srun accelerate launch train.py      # one accelerate launch per node
  envrun --image env.sif srun deepspeed train.py --deepspeed  # DeepSpeed's per-node launcher, no ssh
  envrun --image env.sif torchrun train.py                    # this node only
  envrun --image env.sif --step-timeout 2h srun torchrun train.py  # Slurm ends the step after 2 h (srun --time)
  envrun --image base.sif --overlay env.sqsh python train.py  # a venv overlay over a site image
  envrun srun torchrun train.py                               # the environment of this project
  envrun sbatch --nodes 2 --submit --wait -- python train.py  # a batch job (envrun sbatch --help)
  envrun doctor --probe                                       # check image, job, GPUs, network (envrun doctor --help)
  envrun sweep --nodes 1,2,4 -- python train.py               # a scaling table, plot and report (envrun sweep --help)

Without --image/--overlay, the environment is $ENVRUN_IMAGE (+ $ENVRUN_OVERLAYS, colon-separated),
else image:/overlays: in the nearest envrun.yaml (this directory or a parent; `envbuild build` writes it),
else the one *.sif in this directory. An overlay built for another base is refused (--force-overlay runs
it with a warning). $WITH_CONDA (LUMI images) runs under bash in the container; envrun stops if it fails.
An image whose runscript sets up its environment and then runs its arguments (LUMI AI Factory images) is
started with `run --no-eval` instead of `exec`, as `singularity run` would; --explain says which and why.

Data directories and HF_HOME/TORCH_HOME can be set in ~/.config/envbuild/envrun.yaml
(binds: [...], env: {...}, systems: {NAME: {binds, env}}); $ENVRUN_CONFIG names another file.
A project's envrun.yaml takes the same keys (its env wins) plus image: and overlays:. Their env: is set
in the container only (APPTAINERENV_*), never for srun or apptainer on the host.

The program file (python/torchrun/accelerate launch/deepspeed PATH) outside every bind gets its directory
bound read-only (--explain says so); other existing paths in the command outside the binds get a warning.
A first word near a subcommand that is no program on PATH here (`envrun kernal install`) is refused with
the subcommand it meant (exit 2); a program only the image has runs as given after --: envrun -- PROGRAM ...

Outside a Slurm job, a launch envrun execs keeps its plan in ~/.cache/envrun with what it was made from;
the same command line in the same directory then execs it while nothing that plan read has changed
(--dry-run and --explain always plan; ENVRUN_PLAN_CACHE=off plans every launch). A checkout's bin/envrun
does that without starting Python where provision/python-env.sh built .venv/libexec/envrun-repeat
(ENVRUN_REPEAT_TRACE=1 says why a launch still starts Python).

An envrun.yaml (or the one *.sif here) that another user owns or may write is ignored with a warning,
and the search upwards stops at another file system and at a directory like /tmp that is not yours and
others may write. A group project that shares one: add its directory to $ENVRUN_TRUST_DIR
(colon-separated) or to trusted_dirs: [...] in your own envrun config.

Under srun, envrun waits for srun and passes its messages through; when the step fails it adds one line naming
the cause it can read from srun's exit status and messages: a rank's exit code or signal, a time limit (Slurm's
"DUE TO TIME LIMIT"), a node that failed, or a container runtime that could not start. Its exit status is srun's.

Under srun, envrun also reports what the step did: a light sampler on every node reads the job's GPUs
(NVML/nvidia-smi, amd-smi/rocm-smi or sysfs) and the ranks' CPU use from /proc every few seconds, and when
the step ends envrun prints a short summary with findings (an idle rank, GPUs left idle, GPUs waiting on
the input pipeline) and their fixes; --report DIR also writes report.json, report.html and a timeline
(docs/concepts/report.md). --no-report turns it off.

"""


def build_parser() -> argparse.ArgumentParser:
    """For --help and for what the fast loop leaves to argparse; the shared options' words come from
    envbuild.cli.options, imported here only (never on the way to exec)."""
    import argparse

    from envbuild.cli.options import (
        BIND,
        DRY_RUN,
        DURATION_FORMS,
        FORCE_OVERLAY,
        IMAGE,
        OVERLAY,
        SYSTEM,
        VERBOSE,
        add_option,
    )
    from envbuild.shared.errors import exit_status_help

    parser = argparse.ArgumentParser(
        prog="envrun", formatter_class=argparse.RawDescriptionHelpFormatter, description=DESCRIPTION,
        usage="envrun [options] COMMAND ...\n       envrun {" + ",".join(SUBCOMMANDS) + "} ...",
        epilog=EPILOG + exit_status_help("the launch failed; once COMMAND runs, envrun exits with its status "
                                         "(under srun, srun's)"),
    )
    parser.add_argument("--version", action="version", version=f"envrun, version {__version__}")
    add_option(parser, IMAGE)
    add_option(parser, OVERLAY, dest="overlays", action="append", default=[], note="read-only, at its mount point",
               default_help="$ENVRUN_OVERLAYS, else overlays: in envrun.yaml")
    add_option(parser, FORCE_OVERLAY)
    add_option(parser, BIND, dest="binds", action="append", default=[])
    add_option(parser, SYSTEM)
    add_option(parser, DRY_RUN, note="it prints the launch as a runnable shell script")
    parser.add_argument("--explain", action="store_true", help="say why each setting was chosen (on stderr), then run")
    add_option(parser, VERBOSE, note="the container runtime's INFO lines included, which envrun leaves out "
                                     "otherwise (apptainer --quiet; its warnings and errors always show)")
    parser.add_argument("--strict-net", action="store_true",
                        help="set NCCL_NET from the recipe, so NCCL/RCCL fail instead of falling back to TCP sockets")
    parser.add_argument("--step-timeout", metavar="DURATION",
                        help=f"time limit for the srun step, e.g. {DURATION_FORMS}: srun --time, rounded up to whole "
                             "minutes. Slurm then stops every task "
                             "(SIGTERM, SIGKILL after KillWait), also ranks hung in a collective "
                             "(default: $ENVRUN_STEP_TIMEOUT)")
    parser.add_argument("--report", metavar="DIR",
                        help="under srun, also write the step's report there: report.json, report.html, timeline.png "
                             "and summary.txt (%%j: job id, %%x: job name; default: $ENVRUN_REPORT, else the summary "
                             "on stderr only)")
    parser.add_argument("--no-report", action="store_true",
                        help="no job report: no sampler beside the step, no summary (also: ENVRUN_REPORT=off)")
    parser.add_argument("--report-interval", metavar="DURATION",
                        help="time between two samples of a node's GPUs and CPUs, e.g. 10s (default: "
                             "$ENVRUN_REPORT_INTERVAL, else 5s)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="srun ..., torchrun ..., python ... or any program")
    return parser


_WITH_VALUE = {"--image": "image", "--overlay": "overlays", "--bind": "binds", "-B": "binds", "--system": "system",
               "--step-timeout": "step_timeout", "--report": "report", "--report-interval": "report_interval"}
_FLAGS = {"--dry-run": "dry_run", "--explain": "explain", "--force-overlay": "force_overlay", "--strict-net": "strict_net",
          "--no-report": "no_report", "-v": "verbose", "--verbose": "verbose"}
_REPEATED = ("binds", "overlays")


def parse_options(argv: list[str]) -> RunRequest | None:
    """envrun's options, then the command. None when the loop cannot decide (help, abbreviations, a
    missing value): argparse then parses, explains or refuses exactly as the help text describes."""
    values: dict[str, str] = {}
    repeated: dict[str, list[str]] = {name: [] for name in _REPEATED}
    flags: set[str] = set()
    index = 0
    while index < len(argv):
        word = argv[index]
        if word == "--":
            return _request(argv[index + 1 :], values, repeated, flags)
        if not word.startswith("-") or word == "-":
            return _request(argv[index:], values, repeated, flags)
        name, eq, value = word.partition("=")
        if name in _FLAGS and not eq:
            flags.add(_FLAGS[name])
            index += 1
            continue
        if name == "--version" and not eq:
            from envbuild.shared.errors import EXIT_CLEAN

            print(f"envrun, version {__version__}")
            sys.exit(EXIT_CLEAN)
        attribute = _WITH_VALUE.get(name)
        if attribute is None and word.startswith("-B") and len(word) > 2 and not word.startswith("--"):
            attribute, value, eq = "binds", word[2:], "="
        if attribute is None:
            return None
        if not eq:
            if index + 1 >= len(argv):
                return None
            value = argv[index + 1]
            index += 1
        if attribute in repeated:
            repeated[attribute].append(value)
        else:
            values[attribute] = value
        index += 1
    return _request([], values, repeated, flags)


def _request(command: list[str], values: dict[str, str], repeated: dict[str, list[str]], flags: set[str]) -> RunRequest:
    """The request from what the loop read: options with a value, repeated ones, and flags."""
    from envbuild.commands.launch import RunRequest

    return RunRequest(
        command=command, image=values.get("image"), overlays=repeated["overlays"], binds=repeated["binds"],
        system=values.get("system"), step_timeout=values.get("step_timeout"), dry_run="dry_run" in flags,
        explain="explain" in flags, force_overlay="force_overlay" in flags, strict_net="strict_net" in flags,
        report=values.get("report"), no_report="no_report" in flags, report_interval=values.get("report_interval"),
        verbose="verbose" in flags,
    )


def _parsed_request(args: argparse.Namespace) -> RunRequest:
    """The request from what argparse parsed (the loop could not decide); argparse keeps the "--" before
    the command, the loop does not."""
    from envbuild.commands.launch import RunRequest

    return RunRequest(
        command=args.command[1:] if args.command[:1] == ["--"] else args.command, image=args.image,
        overlays=args.overlays, binds=args.binds, system=args.system, step_timeout=args.step_timeout,
        dry_run=args.dry_run, explain=args.explain, force_overlay=args.force_overlay, strict_net=args.strict_net,
        report=args.report, no_report=args.no_report, report_interval=args.report_interval, verbose=args.verbose,
    )


def _full_site() -> bool:
    """bin/envrun starts Python with -S: importing `site` (the venv's site-packages and its .pth files) costs
    every launch time, and the launch path needs nothing from there while the recipe and config caches are
    current. What does need it (pydantic to validate a changed recipe, the subcommands) turns it on here.
    True when this call added it."""
    if not sys.flags.no_site or _SITE["added"]:
        return False
    import site

    site.main()
    _SITE["added"] = True
    return True


_SITE = {"added": False}


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    subcommand = SUBCOMMANDS.get(argv[0]) if argv else None
    if subcommand is not None:  # nobody runs Slurm's sbatch (or a `doctor`) inside a container: envrun's own
        _full_site()
        imported(subcommand.run)(argv[1:])
        return

    from envbuild.launch.plancache import exec_cached

    exec_cached(argv)  # the plan kept for this command line here, when all it was made from still holds
    from envbuild.commands.launch import launch
    from envbuild.shared.errors import reporting_errors

    def parse_and_launch() -> None:
        request = parse_options(argv) or _parsed_request(build_parser().parse_args(argv))
        # a plan whose first word was looked up on PATH here is not kept: the lookup is no recorded fact
        cache_as = None if refuse_a_mistyped_subcommand(argv, request.command) else argv
        try:
            launch(request, cache_as)
        except ModuleNotFoundError:
            if not _full_site():  # started with -S (bin/envrun) and a cache was stale: again with site-packages
                raise
            launch(request, cache_as)

    # The launch execs the program, or stays srun's parent and forwards signals to it (envbuild.launch.supervise).
    reporting_errors(parse_and_launch, catch_signals=False)


# From this ratio of difflib's on, a word reads as a subcommand mistyped: "kernal", "sbtach", "shel" do;
# "docker" (against doctor) and "sleep" (against sweep, and on PATH anyway) do not.
NEAR_SUBCOMMAND = 0.75


def refuse_a_mistyped_subcommand(argv: list[str], command: list[str]) -> bool:
    """`envrun kernal install` would run `kernal` in the container (`exec: kernal: not found`, 127): a first word
    near a subcommand (or one after envrun's options, where subcommands are not read) that is no program on
    this host's PATH is refused, naming the subcommand. The image may have a program the host does not, and only
    starting it could tell, which every launch would pay for: after `--` the command runs as given, unchecked.
    A word near no subcommand is checked with string work only; PATH and difflib only for one that could be.
    True when PATH was looked at (and the word let through)."""
    if not command or (len(argv) > len(command) and argv[-len(command) - 1] == "--"):
        return False
    word = command[0]
    if "/" in word:
        return False
    maybe = [name for name in SUBCOMMANDS if _shared_letters_ratio(word, name) >= NEAR_SUBCOMMAND]
    if not maybe:
        return False
    if _on_path(word):
        return True
    import difflib

    near = difflib.get_close_matches(word, maybe, n=1, cutoff=NEAR_SUBCOMMAND)
    if not near:
        return True
    import shlex

    meant = shlex.join(["envrun", near[0], *command[1:]])
    anyway = shlex.join(["envrun", *argv[:len(argv) - len(command)], "--", *command])
    if near[0] == word:  # `envrun --image x.sif doctor`: after the options it is the program to run
        problem = f"{word!r} after envrun's options is the program to run, and none is on PATH here"
        meant = f"a subcommand is envrun's first word: `{meant}`."
    else:
        problem = f"{word!r} is neither an envrun subcommand nor a program on PATH here"
        meant = f"did you mean `{meant}`?"
    from envbuild.shared.errors import UsageError

    raise UsageError(problem, f"{meant} To run a program {word!r} that only the image has, put it after --: {anyway}")


def _shared_letters_ratio(word: str, name: str) -> float:
    """An upper bound of difflib's ratio from the letters the two share, as get_close_matches screens with
    (quick_ratio), without importing difflib (re, enum) on the way to every launch."""
    shared = sum(min(word.count(letter), name.count(letter)) for letter in set(word))
    return 2 * shared / (len(word) + len(name))


def _on_path(program: str) -> bool:
    """Whether `program` is an executable file in a directory of this host's PATH."""
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        candidate = os.path.join(directory or ".", program)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return True
    return False


def signal_ranks_main(argv: list[str]) -> None:
    """`envrun signal-ranks SIGNAL DIR`: what a --requeue batch script runs once per node (envbuild.commands.sbatch)."""
    from envbuild.shared.errors import EXIT_USAGE, reporting_errors

    if len(argv) != 2:
        print("usage: envrun signal-ranks SIGNAL DIR  (run by envrun sbatch --requeue scripts)", file=sys.stderr)
        sys.exit(EXIT_USAGE)
    from envbuild.commands.sbatch import forward_signal

    reporting_errors(lambda: forward_signal(argv[0], argv[1]))


if __name__ == "__main__":
    main()
