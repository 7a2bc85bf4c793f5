"""`envrun recipe draft`: its options; the work is in envbuild.commands.recipe."""

from __future__ import annotations

import argparse
import os
import sys

from envbuild.shared.errors import exit_status_help, reporting_errors

EPILOG = """examples:
  envrun recipe draft                             # print a recipe for this cluster, drafted from scontrol
  envrun recipe draft -o mysite.yaml              # write it (the recipe is named mysite)
  envrun --system ./mysite.yaml --dry-run srun torchrun train.py   # use it at once
  salloc -p gpu -N1 --gpus-per-node=4 srun envrun recipe draft -o mysite.yaml --force   # GPU-to-core map from nvidia-smi/rocm-smi

The draft holds what Slurm says: partitions (time and node limits, whole-node ones, CPU-only ones), the nodes
of one partition (GPUs, their vendor and type where the gres names them, cores, threads, memory, architecture),
the GPU-to-core map from gres.conf's Cores= or, run on a node of that partition, from nvidia-smi or rocm-smi,
the NUMA domains from lscpu there, and the cluster's name for detection. Each value's comment names the
command and the date it was read; binds, environment and network are the site's to add.
Which nodes `node:` describes: --partition, else the default partition when its nodes have GPUs, else the
partition with the most GPU nodes; where a partition's nodes differ, the shape most of them share.
To keep it for the site: docs/concepts/recipes.md, "Drafting a recipe".

"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="envrun recipe", formatter_class=argparse.RawDescriptionHelpFormatter,
                                     description="System recipes for envrun and envbuild.",
                                     epilog=EPILOG + exit_status_help("the draft could not be made"))
    commands = parser.add_subparsers(dest="action", metavar="{draft}", required=True)
    draft = commands.add_parser("draft", help="a starting recipe for this cluster, from what its Slurm says",
                                description="Draft a system recipe for the Slurm cluster this runs on, from scontrol "
                                            "(and gres.conf, lscpu and the GPU tools where they answer), every fact "
                                            "with its source and date. It loads at once with --system FILE.",
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG)
    draft.add_argument("-o", "--output", metavar="FILE.yaml",
                       help="write the recipe there (its name is the file's, without .yaml) instead of printing it "
                            "with the cluster's name")
    draft.add_argument("--force", action="store_true", help="replace FILE.yaml where it exists")
    draft.add_argument("--partition", metavar="NAME",
                       help="the partition whose nodes `node:` describes (default: see below)")
    return parser


def main(argv: list[str]) -> None:
    from envbuild.commands.recipe import run_recipe_draft

    args = build_parser().parse_args(argv)
    sys.exit(reporting_errors(lambda: run_recipe_draft(output=args.output, force=args.force, partition=args.partition,
                                                       environ=os.environ)))
