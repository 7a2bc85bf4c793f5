"""Reading NCCL_DEBUG=INFO output for the network NCCL/RCCL chose (lines in the form NCCL 2.2x and RCCL
print them; the OFI lines are aws-ofi-nccl/-rccl's)."""

from __future__ import annotations

from envbuild.doctor.netchecks import parse_nccl_debug, probe_findings
from envbuild.recipes.loadrecipe import load_recipe

OFI = """nid005001:12:12 [0] NCCL INFO NET/OFI Using aws-ofi-rccl 1.4.0
nid005001:12:12 [0] NCCL INFO NET/OFI Selected Provider is cxi (found 4 nics)
nid005001:12:12 [0] NCCL INFO Using network AWS Libfabric
ENVRUN_PROBE rank=0 world=16 backend=nccl sum=16 libs=/opt/aws-ofi-rccl/lib/librccl-net.so
"""
SOCKETS = """nid005001:12:12 [0] NCCL INFO NET/Plugin: Could not find: librccl-net.so. Using internal network plugin.
nid005001:12:12 [0] NCCL INFO NET/Socket : Using [0]hsn0:10.253.1.5<0> [1]hsn1:10.253.1.6<0>
nid005001:12:12 [0] NCCL INFO Using network Socket
"""
IB = """r01g01:7:7 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.1.1.1<0>
r01g01:7:7 [0] NCCL INFO Using network IB
"""


def test_parse_ofi_plugin() -> None:
    assert parse_nccl_debug(OFI) == {"network": "AWS Libfabric", "plugin": "aws-ofi-rccl 1.4.0", "provider": "cxi"}


def test_parse_socket_fallback() -> None:
    said = parse_nccl_debug(SOCKETS)
    assert said["network"] == "Socket" and "hsn0" in said["sockets"]
    assert "Could not find: librccl-net.so" in said["plugin_missing"]


def test_parse_ib() -> None:
    assert parse_nccl_debug(IB)["network"] == "IB"


def test_probe_findings_levels() -> None:
    lumi = load_recipe("lumi-g")
    assert probe_findings(lumi, OFI, 0, nodes=2, strict=False)[0].level == "ok"
    fallback = probe_findings(lumi, SOCKETS, 0, nodes=2, strict=False)[0]
    assert fallback.level == "warn" and "Could not find" in fallback.why
    assert probe_findings(lumi, SOCKETS, 0, nodes=2, strict=True)[0].level == "fail"
    assert probe_findings(lumi, SOCKETS, 0, nodes=1, strict=False)[0].level == "ok"  # one node: sockets unused
    failed = probe_findings(lumi, "Traceback\nRuntimeError: NCCL error", 1, nodes=2, strict=False)[0]
    assert failed.level == "fail" and "exit 1" in failed.what
    assert "gloo" in probe_findings(lumi, "ENVRUN_PROBE rank=0 world=2 backend=gloo", 0, 1, False)[0].what
