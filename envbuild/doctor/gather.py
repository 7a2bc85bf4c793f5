"""The doctor's executor: gathers the facts (recipe, image, this host or every node of the job, the launch
plan, the probe step) and hands them to the pure checks. The only module of envbuild.doctor that starts
processes (srun, envrun) or reads the machine."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from envbuild.doctor import gpuchecks, jobchecks, netchecks
from envbuild.doctor.checkresults import DoctorReport, Finding, fail, info, ok, warn
from envbuild.doctor.hostrecord import CACHE_VARIABLES, HostRecord, capture_host, join_record_lines
from envbuild.doctor.imagecomms import ImageFacts, image_facts
from envbuild.host.pythonstart import isolated_module
from envbuild.recipes.ops import system_argument
from envbuild.shared.errors import EnvbuildError

if TYPE_CHECKING:
    from envbuild.launch.trust import Ignored
    from envbuild.recipes.protocols import SystemRecipe

CONTAINER_MARK = "ENVRUN_DOCTOR_TORCH "
# Run inside the container by envrun on each node: what torch sees there. Never raises: an import error is the
# finding.
CONTAINER_PROBE = (
    "import json\nout = {}\ntry:\n    import torch\n    out['torch'] = torch.__version__\n"
    "    out['cuda_available'] = bool(torch.cuda.is_available())\n"
    "    out['device_count'] = torch.cuda.device_count() if out['cuda_available'] else 0\n"
    "    out['cuda'] = torch.version.cuda\n    out['hip'] = getattr(torch.version, 'hip', None)\n"
    "except Exception as exc:\n    out['error'] = f'{type(exc).__name__}: {exc}'\n"
    f"print({CONTAINER_MARK!r} + json.dumps(out), flush=True)\n"
)
# The --probe step: one all-reduce over every rank, NCCL/RCCL when torch sees GPUs, else gloo; each rank says
# which communication libraries its process really loaded (an image's plugin on disk is not proof: older LAIF
# images loaded torch's bundled RCCL instead, laifs-container-recipes #18).
ALLREDUCE_PROBE = (
    "import os, torch, torch.distributed as dist\n"
    "backend = 'nccl' if torch.cuda.is_available() else 'gloo'\n"
    "if backend == 'nccl':\n    torch.cuda.set_device(int(os.environ.get('LOCAL_RANK', '0')))\n"
    "dist.init_process_group(backend)\n"
    "t = torch.ones(1, device='cuda' if backend == 'nccl' else 'cpu')\ndist.all_reduce(t)\n"
    "libs = sorted({l.split()[-1] for l in open('/proc/self/maps') if any(k in l for k in "
    "('librccl', 'libnccl', 'libfabric'))})\n"
    "print(f'ENVRUN_PROBE rank={dist.get_rank()} world={dist.get_world_size()} backend={backend} '"
    "f'sum={t.item():.0f} libs={\",\".join(libs) or \"-\"}', flush=True)\n"
    "dist.destroy_process_group()\n"
)
NODE_TIMEOUT_S = 300


@dataclass
class DoctorRequest:
    image: str | None = None
    overlays: list[str] = field(default_factory=list)
    system: str | None = None
    command: tuple[str, ...] = ()
    strict_net: bool = False
    probe: bool = False
    host_records: list[str] = field(default_factory=list)  # recorded hosts instead of this machine/the nodes
    environ: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    cwd: str = field(default_factory=os.getcwd)


@dataclass
class Setting:
    """What doctor resolved before checking: the recipe, the environment to run, binds and variables."""

    recipe: SystemRecipe
    system_reason: str
    image: str | None
    overlays: tuple[tuple[str, str], ...]
    config_binds: tuple[str, ...]
    config_env: dict[str, str]  # the envrun config's and the project's env: envrun sets it in the container only
    notes: list[str]
    ignored: list[Finding] = field(default_factory=list)  # files envrun found and does not obey (launch.trust)


def resolve(request: DoctorRequest) -> Setting:
    from envbuild.launch.config import read_user_settings, settings_for
    from envbuild.launch.project import find_environment, image_and_overlays, project_settings
    from envbuild.recipes.detect import resolve_recipe

    recipe, why = resolve_recipe(request.system, request.environ)
    user_binds, user_env = settings_for(read_user_settings(request.environ), recipe.name)
    notes: list[str] = []
    image: str | None = None
    overlays: tuple[tuple[str, str], ...] = ()
    project_binds: tuple[str, ...] = ()
    project_env: dict[str, str] = {}
    ignored: list[Finding] = []

    def untrusted(found: Ignored) -> None:
        ignored.append(warn("project", f"ignoring {found.path}: {found.why}", "envrun ignores it too: a file it "
                            "finds but another user owns or may write would choose what runs as you", found.fix()))

    try:
        environment = find_environment(image=request.image, overlays=request.overlays, environ=request.environ,
                                       cwd=request.cwd, warn=untrusted)
        image, overlays, warnings, notes = image_and_overlays(environment, False)
        notes = [*warnings, *notes]
        project_binds, project_env = project_settings(environment, recipe.name)
    except EnvbuildError as exc:
        notes.append(f"no image: {exc.message}")
    return Setting(recipe, why, image, overlays, (*user_binds, *project_binds), {**user_env, **project_env}, notes,
                   ignored)


def wanted(setting: Setting, environ: dict[str, str]) -> tuple[list[str], list[str], list[str]]:
    """(paths, glob patterns, directories to test for writing) that the checks read on a host."""
    recipe = setting.recipe
    paths = [b.split(":", 1)[0] for b in (*recipe.binds, *recipe.multinode_binds, *setting.config_binds)]
    scratch = recipe.node.local_scratch if recipe.node else None
    if scratch and environ.get(scratch):
        paths.append(environ[scratch])
    patterns = list(recipe.network.host_libfabric)
    caches = [v for name in CACHE_VARIABLES if (v := environ.get(name) or setting.config_env.get(name))]
    return paths, patterns, caches


def envrun_argv(setting: Setting) -> list[str]:
    argv = [*isolated_module("envbuild.cli.envrun_main"), "--system", system_argument(setting.recipe)]
    if setting.image:
        argv += ["--image", setting.image]
    for path, _mount in setting.overlays:
        argv += ["--overlay", path]
    return argv


def container_answer(setting: Setting, environ: dict[str, str]) -> dict[str, Any] | None:
    """Run the torch probe in the container through envrun (its binds, flags, activation), on this host."""
    if not setting.image:
        return None
    try:
        done = subprocess.run([*envrun_argv(setting), "python", "-c", CONTAINER_PROBE], capture_output=True,
                              text=True, timeout=NODE_TIMEOUT_S, env=environ)
    except subprocess.TimeoutExpired:
        return {"error": f"no answer in {NODE_TIMEOUT_S} s"}
    for line in done.stdout.splitlines():
        if line.startswith(CONTAINER_MARK):
            answer: dict[str, Any] = json.loads(line[len(CONTAINER_MARK):])  # the probe prints one JSON object
            return answer
    return {"error": f"exit {done.returncode}: " + " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])}


def node_record(setting: Setting, environ: dict[str, str]) -> HostRecord:
    """This host's record, with the container's answer: what `envrun doctor --node-record` prints on a node."""
    paths, patterns, caches = wanted(setting, environ)
    return capture_host(paths, patterns, caches, environ, container_answer(setting, environ))


def job_node_records(request: DoctorRequest, nodes: int) -> tuple[list[HostRecord], list[Finding]]:
    """One record per node of the job, from a step of one task per node (srun --overlap: it runs next to
    whatever the job is already running)."""
    argv = ["srun", "--overlap", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1",
            *isolated_module("envbuild.cli.envrun_main"), "doctor", "--node-record"]
    if request.image:
        argv += ["--image", request.image]
    for overlay in request.overlays:
        argv += ["--overlay", overlay]
    if request.system:
        argv += ["--system", request.system]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=NODE_TIMEOUT_S, env=request.environ,
                              cwd=request.cwd)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [], [fail("nodes", f"the doctor step on the job's nodes did not finish: {exc}", "the checks per node "
                         "need it", "run `srun --overlap -N1 true` to see whether steps start in this job")]
    records = join_record_lines(done.stdout)
    findings = []
    if len(records) < nodes:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        findings.append(fail("nodes", f"{len(records)} of {nodes} nodes answered (srun exit {done.returncode}): {tail}",
                             "a node that cannot run the doctor step cannot run the training either",
                             "look at the node's state (sinfo -N) and the step's error above"))
    return sorted(records, key=lambda r: r.hostname), findings


def read_image(setting: Setting, requested: bool) -> tuple[ImageFacts | None, list[Finding]]:
    if not setting.image:
        make = fail if requested else warn  # an image named on the command line must be there
        return None, [make("image", "no image to check", "; ".join(setting.notes) or "none was found",
                           "give --image IMG (an existing file), or run in a project with envrun.yaml")]
    from envbuild.inventory.image import inventory_of, open_image

    try:
        with open_image(setting.image) as opened:
            facts = image_facts(setting.image, opened.tree, inventory_of(opened), setting.recipe.network.plugins)
        for path, _mount in setting.overlays:  # bottom first: a higher overlay's package is the one Python imports
            with open_image(path) as opened:
                over = image_facts(path, opened.tree, inventory_of(opened))
            merge_overlay(facts, over)
    except EnvbuildError as exc:
        return None, [fail("image", f"cannot read {setting.image}: {exc.message}", "", exc.hint or "")]
    return facts, [ok("image", f"{setting.image}" + "".join(f" + {p}" for p, _ in setting.overlays))]


def merge_overlay(facts: ImageFacts, over: ImageFacts) -> None:
    """The base's facts with one more overlay on top: its torch family members replace the base's of the same
    name (its venv comes first on the path), its libraries add to the base's."""
    if over.family:
        names = {build.canonical for build in over.family}
        facts.family = [*over.family, *(build for build in facts.family if build.canonical not in names)]
        facts.torch_env = over.torch_env if over.torch is not None else facts.torch_env
    for kind, found in over.libraries.items():
        facts.libraries.setdefault(kind, []).extend(found)


def launch_findings(setting: Setting, request: DoctorRequest, environ: dict[str, str]) -> list[Finding]:
    """The command as envrun would plan it here: its warnings and refusals, without running it."""
    if not request.command:
        return []
    from envbuild.host.node import read_host_node
    from envbuild.host.runtime import require_runtime
    from envbuild.launch.allocation import read_allocation
    from envbuild.launch.launchplan import LaunchRequest, plan_launch
    from envbuild.launch.visibility import HostPaths

    try:
        plan = plan_launch(LaunchRequest(
            command=request.command, image=setting.image or "IMAGE", recipe=setting.recipe,
            runtime=require_runtime(probe=False), cwd=request.cwd, binds=setting.config_binds,
            env=tuple(setting.config_env.items()), environ=environ, allocation=read_allocation(environ),
            host=read_host_node(environ), overlays=setting.overlays, strict_net=request.strict_net,
            host_paths=HostPaths()))
    except EnvbuildError as exc:
        return [fail("launch", f"envrun refuses `{' '.join(request.command)}`: {exc.message}", "", exc.hint or "")]
    bound = [info("launch", f"envrun binds {spec} for the program", "it is outside the container's binds; without "
                  "it every rank fails with \"can't open file\"") for spec in plan.program_binds]
    if plan.warnings:
        return [*bound, *(warn("launch", text, "envrun prints this warning before every such launch",
                               "change the command or the job as the warning says") for text in plan.warnings)]
    return [*bound, ok("launch", f"`{' '.join(request.command)}` plans cleanly")]


def probe_step(setting: Setting, request: DoctorRequest, nodes: int) -> list[Finding]:
    if not request.environ.get("SLURM_JOB_ID"):
        return [info("probe", "--probe runs an all-reduce step inside a job (salloc or a batch script)")]
    environ = {**request.environ, "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}
    argv = [*envrun_argv(setting), *(["--strict-net"] if request.strict_net else []), "srun", "--overlap",
            "python", "-c", ALLREDUCE_PROBE]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=NODE_TIMEOUT_S, env=environ,
                              cwd=request.cwd)
    except subprocess.TimeoutExpired:
        return [fail("probe", f"the all-reduce did not finish in {NODE_TIMEOUT_S} s", "a hang here is a hang in "
                     "training", "run it with NCCL_DEBUG=INFO and look where it stops")]
    output = done.stdout + done.stderr
    findings = netchecks.probe_findings(setting.recipe, output, done.returncode, nodes, request.strict_net)
    ranks = [line for line in done.stdout.splitlines() if line.startswith("ENVRUN_PROBE ")]
    if done.returncode == 0:
        findings.append(info("probe", f"{len(ranks)} ranks answered; rank 0: {ranks[0][13:] if ranks else '-'}"))
    return findings


def run_doctor(request: DoctorRequest) -> DoctorReport:
    from envbuild.doctor.hostrecord import load_record
    from envbuild.launch.allocation import read_allocation

    setting = resolve(request)
    environ = request.environ
    recorded = [load_record(path) for path in request.host_records]
    if recorded and recorded[0].env.get("SLURM_JOB_ID") and not environ.get("SLURM_JOB_ID"):
        environ = {**environ, **recorded[0].env}  # the recorded job is the one to check
    allocation = read_allocation(environ)
    in_job = allocation is not None
    nodes = allocation.nodes if allocation else 1
    job = f", job {allocation.job_id} ({nodes} node{'s' if nodes != 1 else ''})" if allocation else ", no job"
    report = DoctorReport(setting.recipe.name, f"system {setting.recipe.name} ({setting.system_reason}){job}")
    report.findings += setting.ignored
    image, found = read_image(setting, requested=bool(request.image or request.overlays))
    report.findings += found
    findings: list[Finding] = []
    if recorded:
        hosts = recorded
        report.headline += ", recorded host" + ("s " if len(hosts) > 1 else " ") + ", ".join(h.source for h in hosts)
    elif in_job and not (allocation and allocation.in_step):
        hosts, findings = job_node_records(request, nodes)
    else:
        hosts = [node_record(setting, environ)]
    report.findings += findings
    vendor = gpuchecks.gpu_vendor(setting.recipe, hosts)
    gpus = allocation.gpus_on_node if allocation else None
    report.findings += jobchecks.allocation_findings(environ, setting.recipe, request.command)
    report.findings += launch_findings(setting, request, environ)
    report.findings += gpuchecks.runtime_findings(setting.recipe, vendor, image)
    report.findings += gpuchecks.device_findings(vendor, hosts, in_job, gpus)
    report.findings += gpuchecks.torch_findings(setting.recipe, vendor, image)
    report.findings += gpuchecks.step_findings(vendor, hosts)
    strict = request.strict_net or setting.recipe.network.strict_net
    report.findings += netchecks.interconnect_findings(setting.recipe, image, hosts, nodes, strict, in_job)
    report.findings += jobchecks.bind_findings(setting.recipe, hosts, setting.config_binds, multinode=nodes > 1 or not in_job,
                                                in_job=in_job)
    report.findings += jobchecks.cache_findings(hosts, setting.config_env, site=setting.recipe.node is not None)
    report.findings += jobchecks.scratch_findings(setting.recipe, hosts, in_job)
    if request.probe:
        report.findings += probe_step(setting, request, nodes)
    return report
