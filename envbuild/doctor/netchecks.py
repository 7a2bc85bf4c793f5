"""Doctor checks of the interconnect: which transport NCCL/RCCL will use between nodes with this image on
this system, from the files (plugin, libfabric with CXI, libibverbs and a provider, /dev/infiniband), and,
with --probe, from what NCCL_DEBUG=INFO printed in a short all-reduce. Pure."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from envbuild.doctor.checkresults import Finding, fail, info, ok, warn

if TYPE_CHECKING:
    from envbuild.doctor.hostrecord import HostRecord
    from envbuild.doctor.imagecomms import ImageFacts
    from envbuild.recipes.protocols import SystemRecipe

SOCKETS = "TCP sockets"
SLOWER = "NCCL/RCCL then run over TCP without an error, often 10x slower between nodes"


def strict_fix(recipe: SystemRecipe) -> str:
    return (f"; envrun --strict-net (or network.strict_net in the recipe) sets NCCL_NET={recipe.network.nccl_net!r} "
            "so that such a job fails at start instead") if recipe.network.nccl_net else ""


def slingshot_transport(recipe: SystemRecipe, image: ImageFacts, host: HostRecord) -> tuple[str, list[str]]:
    """(transport, what is missing) for RCCL/NCCL over Slingshot: the OFI plugin in the image and libfabric
    with the CXI provider, from the image or the host's bound in."""
    missing: list[str] = []
    if not image.has("net_plugin"):
        missing.append(f"the OFI net plugin ({', '.join(recipe.network.plugins) or 'librccl-net*.so'}) in the image")
    host_fabric = [m for pattern in recipe.network.host_libfabric for m in host.matches(pattern)]
    bound = set(recipe.binds) | set(recipe.multinode_binds)
    host_bound = bool(host_fabric) and any(m.startswith(tuple(b.rstrip("/") + "/" for b in bound)) for m in host_fabric)
    if not image.libfabric_cxi and not host_bound:
        if image.has("libfabric"):
            missing.append("the CXI provider: the image's libfabric has none and the host's is not bound in")
        else:
            missing.append("libfabric with the CXI provider (in the image, or the host's /opt/cray bound in)")
    if missing:
        return SOCKETS, missing
    where = "the image's" if image.libfabric_cxi else "the host's (bound)"
    return f"AWS OFI plugin over {where} libfabric CXI (Slingshot)", []


def infiniband_transport(image: ImageFacts, host: HostRecord) -> tuple[str, list[str]]:
    missing: list[str] = []
    if not image.has("libibverbs"):
        missing.append("libibverbs in the image (rdma-core / libibverbs1)")
    if not image.has("ibverbs_provider"):
        missing.append("an ibverbs provider in the image (libmlx5 from rdma-core / ibverbs-providers)")
    if not host.exists("/dev/infiniband"):
        missing.append("/dev/infiniband on this node")
    return (SOCKETS, missing) if missing else ("NCCL's InfiniBand verbs transport", [])


def interconnect_findings(recipe: SystemRecipe, image: ImageFacts | None, hosts: list[HostRecord], nodes: int,
                          strict: bool, in_job: bool) -> list[Finding]:
    fabric = recipe.network.fabric
    has_gpus = recipe.node is not None and recipe.node.gpus > 0
    if not has_gpus or fabric in ("none", "ethernet"):
        return [info("interconnect", f"{recipe.name}: no NCCL/RCCL fabric to check "
                                     f"({'no GPUs' if not has_gpus else fabric}); gloo and NCCL use TCP sockets")]
    if image is None:
        return []
    findings: list[Finding] = []
    for host in hosts:
        node = host.hostname if len(hosts) > 1 else ""
        if fabric == "slingshot":
            transport, missing = slingshot_transport(recipe, image, host)
        else:
            transport, missing = infiniband_transport(image, host)
        if not missing:
            findings.append(ok("interconnect", f"between nodes NCCL/RCCL will use {transport}", node=node))
            continue
        what = f"between nodes NCCL/RCCL would use {SOCKETS}: missing {'; '.join(missing)}"
        why = f"{SLOWER} ({recipe.cite('network.fabric')})"
        fix = ("use an image with the plugin and libfabric (the LUMI AI Factory images carry both)" if fabric == "slingshot"
               else "install rdma-core's libibverbs1 and ibverbs-providers in the image (packages: in the spec)")
        if not in_job and "/dev/infiniband on this node" in missing and len(missing) == 1:
            findings.append(info("interconnect", "no /dev/infiniband on this host (a login node?): the compute "
                                                 "nodes are checked inside a job", node=node))
        elif nodes <= 1 and in_job:
            findings.append(info("interconnect", what + " (this job has one node: shared memory and P2P within it)",
                                 node=node))
        elif strict:
            findings.append(fail("interconnect", what, why, fix + strict_fix(recipe), node))
        else:
            findings.append(warn("interconnect", what, why, fix + strict_fix(recipe), node))
    if recipe.network.nccl_net:
        if strict:
            findings.append(ok("interconnect", f"NCCL_NET={recipe.network.nccl_net!r} is set for the launch: a "
                                               "missing transport fails the job instead of falling back"))
        else:
            findings.append(info("interconnect", f"--strict-net would set NCCL_NET={recipe.network.nccl_net!r} so "
                                                 "that a job fails instead of falling back to sockets"))
    return findings


# Lines NCCL/RCCL print with NCCL_DEBUG=INFO (NCCL_DEBUG_SUBSYS=INIT,NET) that name the network in use:
#   NCCL INFO NET/OFI Using aws-ofi-rccl 1.4.0          (the plugin loaded: aws-ofi-nccl/-rccl)
#   NCCL INFO Using network AWS Libfabric | Using network IB | Using network Socket
#   NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ...        NCCL INFO NET/Socket : Using [0]hsn0:10.0.0.1<0>
#   NCCL INFO NET/Plugin: Could not find: librccl-net.so ... Using internal network plugin.
_NETWORK = re.compile(r"NCCL INFO Using network (.+?)\s*$", re.M)
_PLUGIN_MISSING = re.compile(r"NET/Plugin\s*:?\s*(?:No plugin found|Could not find|Failed to find|dlopen failed)[^\n]*")
_OFI = re.compile(r"NET/OFI Using (aws-ofi-[a-z]+[^\n]*)")
_SOCKET = re.compile(r"NET/Socket : Using ([^\n]+)")
_PROVIDER = re.compile(r"NET/OFI Selected [Pp]rovider is (\S+)")


def parse_nccl_debug(text: str) -> dict[str, str]:
    """What NCCL_DEBUG=INFO output says about the network: network, plugin, provider, sockets, plugin_missing."""
    found: dict[str, str] = {}
    for key, pattern in (("network", _NETWORK), ("plugin", _OFI), ("provider", _PROVIDER), ("sockets", _SOCKET),
                         ("plugin_missing", _PLUGIN_MISSING)):
        match = pattern.search(text)
        if match:
            found[key] = (match.group(1) if match.groups() else match.group(0)).strip()
    return found


def probe_findings(recipe: SystemRecipe, output: str, returncode: int, nodes: int, strict: bool) -> list[Finding]:
    """Findings from the --probe all-reduce: did it run, and which network NCCL/RCCL said it used."""
    if returncode != 0:
        tail = " | ".join(output.strip().splitlines()[-3:])
        return [fail("probe", f"the all-reduce step failed (exit {returncode}): {tail}",
                     "a launch like this one fails the same way", "run the step with NCCL_DEBUG=INFO yourself: "
                     "`envrun srun python -c ...` (shown by --probe -v)")]
    said = parse_nccl_debug(output)
    if not said:
        backend = "gloo" if "backend=gloo" in output else "?"
        return [ok("probe", f"the all-reduce ran ({backend} backend, no NCCL/RCCL output to read: no GPUs)")]
    network = said.get("network", "")
    text = f"the all-reduce ran; NCCL/RCCL used network {network or '?'}" + \
        (f" through {said['plugin']}" if "plugin" in said else "") + \
        (f", provider {said['provider']}" if "provider" in said else "")
    if network.lower().startswith("socket") and nodes > 1 and recipe.network.fabric in ("slingshot", "infiniband"):
        make = fail if strict else warn
        return [make("probe", text, f"{SLOWER}" + (f"; {said['plugin_missing']}" if "plugin_missing" in said else ""),
                     "see the interconnect findings" + strict_fix(recipe))]
    return [ok("probe", text)]
