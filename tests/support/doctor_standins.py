"""Stand-in images for the doctor's tests: sandbox directories with the layout of the real images (no site
image is reachable here). Each holds only the files the checks read: a venv with torch's dist-info and
version.py, and the communication libraries (empty files, or with the marker a CXI-capable libfabric has).

- laif: a LUMI AI Factory image (ROCm 7.0 torch in /opt/venv, aws-ofi-rccl, libfabric 2.1 with CXI built in)
- lumi-noplugin: a ROCm torch image without the plugin or libfabric (a pip-only build: RCCL uses sockets)
- lumi-plugin-only: the plugin but no libfabric (relies on the host's /opt/cray bound in)
- cuda-ib / cuda-noib: a CUDA torch image with and without libibverbs + mlx5 provider
- cpu: a CPU torch image (torch 2.13.0+cpu)
"""

from __future__ import annotations

from pathlib import Path

SITE = "opt/venv/lib/python3.12/site-packages"
TORCH = {
    "laif": ("2.10.0+rocm7.0", None, "7.0.51831"),
    "lumi-noplugin": ("2.9.1+rocm6.4", None, "6.4.43482"),
    "lumi-plugin-only": ("2.9.1+rocm6.4", None, "6.4.43482"),
    "cuda-ib": ("2.7.1+cu126", "12.6", None),
    "cuda-noib": ("2.7.1+cu126", "12.6", None),
    "cpu": ("2.13.0+cpu", None, None),
}
LIBS = {
    "laif": {"opt/aws-ofi-rccl/lib/librccl-net.so": b"", "opt/libfabric/lib/libfabric.so.1": b"\0fi_getinfo\0cxip_domain\0",
             "opt/rocm-7.0.0/lib/libamdhip64.so.7": b""},
    "lumi-noplugin": {"opt/rocm-6.4.0/lib/libamdhip64.so.6": b""},
    "lumi-plugin-only": {"opt/aws-ofi-rccl/lib/librccl-net.so": b"", "opt/rocm-6.4.0/lib/libamdhip64.so.6": b""},
    "cuda-ib": {"usr/lib/x86_64-linux-gnu/libibverbs.so.1": b"",
                "usr/lib/x86_64-linux-gnu/libibverbs/libmlx5-rdmav34.so": b""},
    "cuda-noib": {},
    "cpu": {},
}


def make_image(root: Path, kind: str) -> Path:
    """A sandbox directory standing in for image `kind`; returns its path."""
    image = root / f"{kind}-image"
    version, cuda, hip = TORCH[kind]
    site = image / SITE
    (site / "torch").mkdir(parents=True)
    (image / "opt/venv/pyvenv.cfg").write_text("home = /usr/bin\n")
    (image / "opt/venv/bin").mkdir()
    dist = site / f"torch-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")
    (site / "torch/version.py").write_text(
        f"__version__ = '{version}'\ndebug = False\ncuda: Optional[str] = {cuda!r}\nhip: Optional[str] = {hip!r}\n")
    for path, content in LIBS[kind].items():
        (image / path).parent.mkdir(parents=True, exist_ok=True)
        (image / path).write_bytes(content)
    return image
