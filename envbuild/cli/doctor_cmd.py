"""`envrun doctor`: check the image, the job, the GPUs, the interconnect, the binds and the caches before a
run, on a login node or inside an allocation (then on every node of the job, in one short step).

Exit status: 0 clean (warnings allowed), 1 a failure or, with --strict, a warning, 2 a usage error
(envbuild.shared.errors: the contract of every command). --json prints the findings as JSON. `--node-record` is
what doctor runs on each node: it prints this host's record as one JSON line.
"""

from __future__ import annotations

import argparse
import os
import sys

from envbuild.cli.options import IMAGE, JSON, OVERLAY, SYSTEM, add_option
from envbuild.shared.errors import exit_status_help, reporting_errors

EPILOG = """examples:
  envrun doctor                                   # login node: image, recipe, binds, caches, network files
  envrun doctor --image env.sif srun torchrun train.py   # also plan this launch against the job
  salloc -N2 --gpus-per-node=8 ... ; envrun doctor --probe   # every node, plus an all-reduce step
  envrun doctor --host-record lumi-node.json      # check against a recorded host (see --node-record)

""" + exit_status_help("a failure, or with --strict a warning")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="envrun doctor", formatter_class=argparse.RawDescriptionHelpFormatter,
                                     description="Find what would make a containerised training job fail or run "
                                                 "slowly, before it runs.", epilog=EPILOG)
    add_option(parser, IMAGE)
    add_option(parser, OVERLAY, dest="overlays", action="append", default=[], default_help="$ENVRUN_OVERLAYS, envrun.yaml")
    add_option(parser, SYSTEM)
    parser.add_argument("--strict", action="store_true", help="exit 1 on warnings too (problems found)")
    parser.add_argument("--strict-net", action="store_true",
                        help="a missing fast transport is a failure; checks the launch with NCCL_NET set as "
                             "`envrun --strict-net` sets it")
    parser.add_argument("--probe", action="store_true",
                        help="inside a job: run a short all-reduce with NCCL_DEBUG=INFO and read the transport used")
    parser.add_argument("--host-record", dest="host_records", action="append", default=[], metavar="FILE.json",
                        help="check against a recorded host instead of this machine (repeatable: one per node)")
    parser.add_argument("--node-record", action="store_true",
                        help="print this host's record as JSON (what doctor runs on each node) and exit")
    add_option(parser, JSON, note='{"system", "headline", "findings": [{"level": ok|info|warn|fail, "area", "what", '
               '"why", "fix", "node"}]}')
    parser.add_argument("command", nargs=argparse.REMAINDER, help="optional: the launch to check, e.g. srun torchrun train.py")
    return parser


def main(argv: list[str]) -> None:
    from envbuild.commands.doctor import run_doctor_command

    args = build_parser().parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    sys.exit(reporting_errors(lambda: run_doctor_command(
        image=args.image, overlays=args.overlays, system=args.system, command=command, strict_net=args.strict_net,
        probe=args.probe, host_records=args.host_records, strict=args.strict, as_json=args.json,
        node_record=args.node_record, environ=os.environ, cwd=os.getcwd())))
