"""Doctor checks of the job around the launch: the allocation against the recipe (through the very rules
`envrun sbatch --check` applies to a batch script), the binds, the caches and node-local scratch. Pure."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from envbuild.doctor.checkresults import Finding, fail, info, ok, warn
from envbuild.doctor.hostrecord import CACHE_VARIABLES
from envbuild.slurm.check import jobrules as checkjob
from envbuild.slurm.check import steprules as checksteps
from envbuild.slurm.check.parse import parse_script
from envbuild.slurm.check.rulebase import Context

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from envbuild.doctor.hostrecord import HostRecord
    from envbuild.recipes.protocols import SystemRecipe
    from envbuild.slurm.check.rulebase import Finding as ScriptFinding

# The batch rules that say something about a running job. The account, the time syntax and late directives
# were settled when Slurm accepted the job. A forbidden option breaks the job (fail); the rest are warnings.
ALLOCATION_RULES: tuple[tuple[Callable[[Context], list[ScriptFinding]], str], ...] = (
    (checkjob.numbers, "warn"), (checkjob.partition_exists, "warn"), (checkjob.partition_limits, "warn"),
    (checkjob.gpus_per_node, "warn"), (checkjob.cpus_per_node, "warn"), (checkjob.memory_per_node, "warn"),
    (checksteps.forbidden_options, "fail"), (checksteps.srun_inherits, "warn"), (checksteps.launcher_tasks, "warn"),
    (checksteps.per_task_launch, "warn"), (checksteps.core_masks_on_shared_nodes, "warn"),
)


def job_as_script(environ: Mapping[str, str], recipe: SystemRecipe, command: tuple[str, ...]) -> str:
    """The running job written as the batch script that would have asked for it, from its SLURM_* variables,
    with the command to check as its srun line."""
    lines = ["#!/bin/bash"]

    def directive(option: str, name: str, suffix: str = "") -> None:
        value = environ.get(name, "").split("(")[0].split(",")[0]
        if value:
            lines.append(f"#SBATCH {option}={value}{suffix}")

    directive("--partition", "SLURM_JOB_PARTITION")
    directive("--nodes", "SLURM_JOB_NUM_NODES") if environ.get("SLURM_JOB_NUM_NODES") else directive("--nodes", "SLURM_NNODES")
    directive("--ntasks-per-node", "SLURM_NTASKS_PER_NODE")
    directive("--cpus-per-task", "SLURM_CPUS_PER_TASK")
    directive("--mem", "SLURM_MEM_PER_NODE", "M")
    gpus = environ.get("SLURM_GPUS_ON_NODE", "")
    if gpus.isdigit() and int(gpus) > 0:
        lines.append("#SBATCH " + (recipe.launch.gpu_request or "--gpus-per-node={gpus}").replace("{gpus}", gpus))
    if command:  # as envrun runs it: the rules know what envrun sets itself (tasks per node for launchers)
        lines.append(shlex.join(("envrun", *command)))
    return "\n".join(lines) + "\n"


def allocation_findings(environ: Mapping[str, str], recipe: SystemRecipe, command: tuple[str, ...]) -> list[Finding]:
    if not (environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID")):
        return [info("allocation", "not inside a job: the allocation is checked when doctor runs in salloc or "
                                   "a batch script (`envrun sbatch --check` checks a script before submitting)")]
    script = job_as_script(environ, recipe, command)
    ctx = Context(parse_script(script), recipe, environ)
    findings: list[Finding] = []
    for rule, level in ALLOCATION_RULES:
        for found in rule(ctx):
            make = fail if level == "fail" else warn
            findings.append(make("allocation", f"job {environ.get('SLURM_JOB_ID', '?')}: {found.what}",
                                 f"{found.why} ({found.source})", found.fix))
    if not findings:
        shape = "; ".join(line.removeprefix("#SBATCH ") for line in script.splitlines() if line.startswith("#SBATCH"))
        findings.append(ok("allocation", f"job {environ.get('SLURM_JOB_ID', '?')} ({shape or 'defaults'}) fits "
                                         f"{recipe.name}" + (f" and `{shlex.join(command)}`" if command else "")))
    return findings


def bind_findings(recipe: SystemRecipe, hosts: list[HostRecord], config_binds: tuple[str, ...],
                  multinode: bool, in_job: bool) -> list[Finding]:
    """Recipe binds that are missing are skipped by envrun with a note (warn in a job, where they matter; a
    note on a login node, which lacks some by design); the user's own binds that are missing make envrun
    refuse to start (fail)."""
    findings: list[Finding] = []
    recipe_binds = [*recipe.binds, *(recipe.multinode_binds if multinode else ())]
    for host in hosts:
        node = host.hostname if len(hosts) > 1 else ""
        missing = [b for b in recipe_binds if not host.exists(b.split(":", 1)[0])]
        if missing and not in_job:
            findings.append(info("binds", f"recipe binds missing on this host (envrun skips them here): "
                                          f"{', '.join(missing)}", node=node))
        elif missing:
            findings.append(warn("binds", f"recipe binds missing here: {', '.join(missing)}",
                                 f"{recipe.cite('binds')}; envrun skips them with a note, so data or libraries "
                                 "under them are not seen in the container",
                                 "run on the system's compute nodes, or check the system detection (--system)", node))
        mine = [b for b in config_binds if not host.exists(b.split(":", 1)[0])]
        if mine:
            findings.append(fail("binds", f"binds from the envrun config missing here: {', '.join(mine)}",
                                 "envrun refuses to start when a bind you asked for does not exist",
                                 "create the directories, or fix binds: in ~/.config/envbuild/envrun.yaml", node))
        if not missing and not mine:
            count = len(recipe_binds) + len(config_binds)
            findings.append(ok("binds", f"all {count} bind sources exist", node=node))
    return findings




# Home quotas that a model download fills: LUMI 20 GB (https://docs.lumi-supercomputer.eu/storage/), CSC
# Puhti/Mahti 10 GB (https://docs.csc.fi/computing/disk/).
HOME_QUOTAS = "LUMI 20 GB, CSC 10 GB"


def cache_findings(hosts: list[HostRecord], cache_env: Mapping[str, str], site: bool) -> list[Finding]:
    """HF_HOME/TORCH_HOME: set (by the environment or the envrun config) and writable on every node. Unset is a
    warning on a site (small home quotas), a note on a workstation."""
    findings: list[Finding] = []
    for host in hosts:
        node = host.hostname if len(hosts) > 1 else ""
        for name in CACHE_VARIABLES:
            value = host.env.get(name) or cache_env.get(name)
            if not value and not site:
                findings.append(info("caches", f"{name} is not set: caches go to ~/.cache", node=node))
            elif not value:
                findings.append(warn("caches", f"{name} is not set: caches go to ~/.cache in the home directory",
                                     f"home directories on clusters are small ({HOME_QUOTAS}) and models and "
                                     "datasets fill them; a full home fails the job at download time",
                                     f"set {name} in the envrun config (env: {{{name}: /scratch/<project>/...}})", node))
            elif not host.writable.get(value, False):
                findings.append(fail("caches", f"{name}={value} is not writable here",
                                     "downloads and compiled kernels are written there at run time",
                                     f"create it (mkdir -p {value}) or point {name} at a writable directory", node))
            else:
                findings.append(ok("caches", f"{name}={value} is writable", node=node))
    return findings


def scratch_findings(recipe: SystemRecipe, hosts: list[HostRecord], in_job: bool) -> list[Finding]:
    variable = recipe.node.local_scratch if recipe.node else None
    if not variable:
        return []
    if not in_job:
        return [info("scratch", f"node-local scratch (${variable}) is checked inside a job")]
    findings: list[Finding] = []
    for host in hosts:
        node = host.hostname if len(hosts) > 1 else ""
        value = host.env.get(variable)
        if not value:
            gres = recipe.batch.staging.gres if recipe.batch.staging else None
            findings.append(warn("scratch", f"${variable} is not set: the job has no node-local disk",
                                 f"{recipe.cite('node.local_scratch')}; datasets read from the shared file system "
                                 "slow every epoch",
                                 f"request it: --gres=...,{(gres or 'nvme:{gb}').replace('{gb}', '<GB>')} "
                                 "(envrun sbatch --stage does this)", node))
        elif not host.exists(value):
            findings.append(fail("scratch", f"${variable}={value} does not exist on this node", "staged data has "
                                 "nowhere to go", "check the job's --gres request", node))
        else:
            findings.append(ok("scratch", f"${variable}={value} is present", node=node))
    return findings
