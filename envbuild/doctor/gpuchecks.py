"""Doctor checks of the GPUs as the container will see them: the runtime flag, the devices on each node,
torch's build against the system's GPUs, and what torch said inside a step on each node. Pure."""

from __future__ import annotations

from typing import TYPE_CHECKING

from envbuild.doctor.checkresults import Finding, fail, info, ok, warn
from envbuild.envspec.torchfamily import describe_variant, family_mismatches
from envbuild.envspec.torchfamily import gpu_vendor as torch_gpu_vendor
from envbuild.host.node import GPU_RUNTIME_FLAGS
from envbuild.shared.visibledevices import VISIBLE_DEVICE_VARIABLES

if TYPE_CHECKING:
    from envbuild.doctor.hostrecord import HostRecord
    from envbuild.doctor.imagecomms import ImageFacts
    from envbuild.recipes.protocols import SystemRecipe

# The spec's variant prefix for a GPU maker (a spec says cuda126 / rocm6.4; torch's label says cu126 / rocm6.4).
SPEC_VARIANT_PREFIX = {"nvidia": "cuda", "amd": "rocm"}
INSTALL_DOC = "https://pytorch.org/get-started/locally/"


def gpu_vendor(recipe: SystemRecipe, hosts: list[HostRecord]) -> str:
    """The system's GPU maker: the recipe's, else what the hosts' devices show (recipes with `node: host`)."""
    if recipe.node is not None:
        return recipe.node.gpu_vendor
    for host in hosts:
        if host.matches("/dev/nvidia[0-9]*"):
            return "nvidia"
        if host.exists("/dev/kfd"):
            return "amd"
    return "none"


def runtime_findings(recipe: SystemRecipe, vendor: str, image: ImageFacts | None) -> list[Finding]:
    if vendor == "none":
        return [ok("gpu", f"{recipe.name} has no GPUs: nothing to pass into the container")]
    flag = GPU_RUNTIME_FLAGS[vendor]
    flags = recipe.runtime.flags if recipe.node is not None else (flag,)  # envrun adds it for `node: host`
    if flag in flags:
        return [ok("gpu", f"{flag} is passed to the runtime ({recipe.cite('runtime.flags')})")]
    if vendor == "amd" and image is not None and image.has("hip"):
        return [ok("gpu", "the image carries its own ROCm user space (libamdhip64) and runs without --rocm, "
                          f"as {recipe.cite('runtime.flags')} says")]
    return [fail("gpu", f"no {flag} for the runtime and no {'ROCm' if vendor == 'amd' else 'CUDA'} user space "
                        "found in the image", f"without it torch inside the container sees no {vendor} GPU",
                 f"add {flag} to runtime.flags in the recipe, or use an image that carries the GPU libraries")]


def device_findings(vendor: str, hosts: list[HostRecord], in_job: bool, gpus_expected: int | None) -> list[Finding]:
    if vendor == "none":
        return []
    findings: list[Finding] = []
    for host in hosts:
        node = host.hostname if len(hosts) > 1 else ""
        if vendor == "amd":
            count = len(host.matches("/dev/dri/renderD*")) if host.exists("/dev/kfd") else 0
        else:
            count = len(host.matches("/dev/nvidia[0-9]*"))
        if count == 0:
            if in_job:
                findings.append(fail("gpu", f"no {vendor} GPU devices on this node", "the job runs where it "
                                     "cannot see a GPU", "request GPUs (envrun sbatch writes the request), or run on "
                                     "a GPU partition", node))
            else:
                findings.append(info("gpu", f"no {vendor} GPU devices on this host (a login node): the GPUs are "
                                            "checked inside a job", node=node))
            continue
        visible = next((f"{name}={host.env[name]}" for name in VISIBLE_DEVICE_VARIABLES if host.env.get(name)), "")
        text = f"{count} {vendor} GPU device{'s' if count != 1 else ''}" + (f", {visible}" if visible else "")
        if in_job and gpus_expected is not None and gpus_expected > count:
            findings.append(warn("gpu", f"{text}; the job holds {gpus_expected}", "fewer devices than the job's GPUs",
                                 "check the job's GPU request and the node's state", node))
        else:
            findings.append(ok("gpu", text, node=node))
    return findings


def torch_findings(recipe: SystemRecipe, vendor: str, image: ImageFacts | None) -> list[Finding]:
    """torch's build in the image against the system's GPUs, and the torch family against torch."""
    if image is None:
        return []
    torch = image.torch
    if torch is None:
        return [warn("torch", "no torch in the image", "envrun launches torchrun and torch.distributed programs",
                     "add pytorch: to the spec, or use an image with torch")]
    built = f"torch {torch.version} in {image.torch_env}, {describe_variant(torch.variant)}"
    findings: list[Finding] = []
    builds_for = torch_gpu_vendor(torch.variant)
    if vendor == "none":
        findings.append(ok("torch", f"{built}, on a system without GPUs"))
    elif builds_for != vendor:
        default = recipe.pytorch.default_variant
        # the recipe's own default where it fits these GPUs, else the form of a variant for them
        tag = default if default.startswith(SPEC_VARIANT_PREFIX[vendor]) else f"{SPEC_VARIANT_PREFIX[vendor]}<version>"
        findings.append(fail("torch", f"{built}; {recipe.name}'s GPUs are {vendor}",
                             f"a torch built for {builds_for or 'no GPU'} sees no {vendor} GPU: torch.cuda.is_available() "
                             "is False and training runs on the CPU, or stops at the first .cuda()",
                             f"build the image with pytorch: {{variant: {tag}}}, see {INSTALL_DOC}"))
    else:
        findings.append(ok("torch", f"{built}, for {vendor} GPUs"))
    for mismatch in family_mismatches(image.family):
        findings.append(fail("torch", mismatch.message(), "its compiled operators fail to load "
                             "(\"operator torchvision::nms does not exist\")", mismatch.fix))
    return findings


def step_findings(vendor: str, hosts: list[HostRecord]) -> list[Finding]:
    """What torch answered inside the container on each node (a step of the job)."""
    findings: list[Finding] = []
    for host in hosts:
        answer = host.container
        if answer is None:
            continue
        node = host.hostname if len(hosts) > 1 else ""
        if answer.get("error"):
            findings.append(fail("torch", f"torch did not start in the container: {answer['error']}",
                                 "the launch itself fails this way", "run `envrun python -c 'import torch'` "
                                 "to see the whole message", node))
            continue
        seen = int(answer.get("device_count") or 0)
        text = f"in the container: torch {answer.get('torch')}, cuda available: {answer.get('cuda_available')}, " \
               f"{seen} device{'s' if seen != 1 else ''}"
        if vendor != "none" and host.env.get("SLURM_JOB_ID") and not answer.get("cuda_available"):
            findings.append(fail("torch", text, "torch.cuda.is_available() is False inside the job: training "
                                 "would run on the CPU", "see the gpu and torch findings above (runtime flag, "
                                 "torch build, devices)", node))
        else:
            findings.append(ok("torch", text, node=node))
    return findings

