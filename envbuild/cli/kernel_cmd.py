"""`envrun kernel install|list|remove|run` and `envrun shell`: their options; the work is in
envbuild.commands.kernel."""

from __future__ import annotations

import argparse
import os
import shutil
import sys

from envbuild.cli.options import BIND, DRY_RUN, FORCE_OVERLAY, IMAGE, OVERLAY, SYSTEM, add_option
from envbuild.shared.errors import UsageError, exit_status_help, reporting_errors

KERNEL_EPILOG = """examples:
  envrun kernel install                          # the image envrun finds here, as a kernel for Jupyter
  envrun kernel install --image env.sif --overlay extras.sqsh --name my-env --display-name "My env"
  envrun kernel install --prefix /project/jupyter  # for a group: JUPYTER_PATH=/project/jupyter/share/jupyter
  envrun kernel list                              # envrun's kernels, their images, whether these exist
  envrun kernel remove envrun-env                 # its directory, its log, its unused ipykernel overlay

The kernel runs through envrun's launch path, as `envrun python` does: the binds, $WITH_CONDA, the
overlays, the recipe's environment and thread counts for the CPUs the kernel's process may use (the job's,
when Jupyter runs inside an allocation). An image without ipykernel gets it from a small venv overlay built
for the image's Python (in the build store's kernels/ directory, reused for the image's next kernel).
The kernel's stderr goes to ~/.local/state/envrun/kernels/NAME.log ($XDG_STATE_HOME); a kernel whose
image is gone starts anyway and answers every cell with the reason and the fix.

"""

SHELL_EPILOG = """examples:
  envrun shell                                   # bash in the image envrun finds here
  envrun shell --image env.sif -c 'echo $OMP_NUM_THREADS'
  srun --pty -N1 -n1 -c8 envrun shell            # on a compute node (what an editor's remote terminal runs)

The shell has the environment `envrun python` has ($WITH_CONDA activated, the overlays' venvs on PATH,
the recipe's variables, thread counts), reads no ~/.bashrc (like `apptainer shell`), and its prompt
starts with [envrun IMAGE].

"""


def build_kernel_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="envrun kernel", formatter_class=argparse.RawDescriptionHelpFormatter,
                                     description="The image as a Jupyter kernel: install, list and remove "
                                                 "kernelspecs that run inside the image through envrun.",
                                     epilog=KERNEL_EPILOG + exit_status_help("the kernel's overlay could not be built"))
    commands = parser.add_subparsers(dest="action", metavar="{install,list,remove}", required=True)
    install = commands.add_parser("install", help="write a kernelspec for the image",
                                  description="Write a Jupyter kernelspec whose kernel runs inside the image through "
                                              "envrun.")
    add_option(install, IMAGE)
    add_option(install, OVERLAY, dest="overlays", action="append", default=[], default_help="$ENVRUN_OVERLAYS, envrun.yaml")
    add_option(install, BIND, dest="binds", action="append", default=[])
    add_option(install, SYSTEM, note="fixed in the kernel", default_help="detected at each start")
    install.add_argument("--name", help="the kernel's name, its directory (default: envrun-IMAGE)")
    install.add_argument("--display-name", metavar="TEXT", help="the name Jupyter shows (default: 'IMAGE (envrun)')")
    where = install.add_mutually_exclusive_group()
    where.add_argument("--user", action="store_true",
                       help="in your Jupyter data directory, where Jupyter finds it (the default)")
    where.add_argument("--prefix", metavar="DIR",
                       help="in DIR/share/jupyter/kernels (Jupyter finds it with JUPYTER_PATH=DIR/share/jupyter)")
    install.add_argument("--force", action="store_true", help="replace a kernel of the same name")
    install.add_argument("--no-ipykernel-overlay", dest="ipykernel_overlay", action="store_false",
                         help="refuse an image without ipykernel instead of adding an overlay with it")
    for name, text, description in (
            ("list", "envrun's kernels: name, image, whether it exists, directory, log",
             "List the kernels envrun installed: name, whether the image and overlays exist, image, directory, log."),
            ("remove", "remove an envrun kernel: its directory, its log and its unused ipykernel overlay",
             "Remove a kernel envrun installed: its directory, its log, and its image's ipykernel overlay when no "
             "other kernel uses it.")):
        sub = commands.add_parser(name, help=text, description=description)
        if name == "remove":
            sub.add_argument("name", help="the kernel's name (envrun kernel list)")
        sub.add_argument("--prefix", metavar="DIR", action="append", default=[],
                         help="also look in DIR/share/jupyter/kernels (repeatable)")
    # no help: left out of the list (argparse would print SUPPRESS for help=SUPPRESS); kernelspecs run it
    run = commands.add_parser("run", description="What an envrun kernelspec runs: the kernel inside the image.")
    run.add_argument("kernel_file", metavar="KERNEL.json")
    run.add_argument("connection_file", metavar="CONNECTION_FILE")
    return parser


def main(argv: list[str]) -> None:
    """`envrun kernel ...`."""
    from envbuild.commands.kernel import KernelInstall, install_kernel, list_kernels, remove_kernel, run_kernel

    args = build_kernel_parser().parse_args(argv)
    environ, cwd = dict(os.environ), os.getcwd()

    def act() -> None:
        if args.action == "run":
            run_kernel(args.kernel_file, args.connection_file, environ, cwd)
        elif args.action == "install":
            install_kernel(KernelInstall(
                envrun=this_envrun(), image=args.image, overlays=tuple(args.overlays), name=args.name,
                display_name=args.display_name, system=args.system, binds=tuple(args.binds), prefix=args.prefix,
                force=args.force, ipykernel_overlay=args.ipykernel_overlay), environ, cwd, sys.stdout)
        elif args.action == "list":
            list_kernels(args.prefix, sys.stdout)
        else:
            remove_kernel(args.name, args.prefix, sys.stdout, environ)

    reporting_errors(act, catch_signals=args.action != "run")  # `run` is a launch: its signals are the kernel's


def this_envrun() -> str:
    """The absolute path of the envrun running now (bin/envrun of a checkout, or the installed script), which
    the kernelspec runs; else the envrun on PATH."""
    program = sys.argv[0] if sys.argv else ""
    if os.path.basename(program) == "envrun" and os.access(program, os.X_OK):
        return os.path.abspath(program)
    found = shutil.which("envrun")
    if found:
        return os.path.abspath(found)
    raise UsageError("cannot tell where envrun is, for the kernelspec to run it",
                     "run `envrun kernel install` by envrun's path (e.g. /path/to/envbuild/bin/envrun), or put envrun "
                     "on PATH")


def build_shell_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="envrun shell", formatter_class=argparse.RawDescriptionHelpFormatter,
                                     description="An interactive shell in the image, with envrun's environment.",
                                     epilog=SHELL_EPILOG + exit_status_help("the launch failed; once the shell runs, "
                                                                            "envrun exits with its status"))
    add_option(parser, IMAGE)
    add_option(parser, OVERLAY, dest="overlays", action="append", default=[], default_help="$ENVRUN_OVERLAYS, envrun.yaml")
    add_option(parser, FORCE_OVERLAY)
    add_option(parser, BIND, dest="binds", action="append", default=[])
    add_option(parser, SYSTEM)
    add_option(parser, DRY_RUN, note="it prints the launch as a runnable shell script")
    parser.add_argument("-c", dest="command", metavar="COMMAND", help="run COMMAND with bash -c (sh -c without bash) "
                                                                      "instead of an interactive shell")
    return parser


def shell_main(argv: list[str]) -> None:
    """`envrun shell ...`."""
    from envbuild.commands.kernel import run_shell
    from envbuild.commands.launch import RunRequest

    args = build_shell_parser().parse_args(argv)
    request = RunRequest(command=[], image=args.image, overlays=args.overlays, binds=args.binds, system=args.system,
                         dry_run=args.dry_run, force_overlay=args.force_overlay)
    reporting_errors(lambda: run_shell(request, args.command, dict(os.environ), os.getcwd()), catch_signals=False)
