"""Start an installed kernel with a real Jupyter client, run one cell, and return what it printed as JSON.

Also a script, so that a test can run it inside a Slurm allocation (srun ... python -m tests.support.jupyter_kernels
KERNELS_DIR NAME CODE): the kernel then starts where Jupyter would start it in a job."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

# What the tests ask the kernel: where it runs, what it imports from where, and envrun's environment.
SEEN_CELL = """\
import json, os, sys
import torch, ipykernel
print("SEEN " + json.dumps({
    "container": os.path.exists("/.singularity.d"), "executable": sys.executable,
    "torch": torch.__file__, "ipykernel": ipykernel.__file__,
    "omp": os.environ.get("OMP_NUM_THREADS"), "tokenizers": os.environ.get("TOKENIZERS_PARALLELISM"),
    "cpus": sorted(os.sched_getaffinity(0)), "slurm_job": os.environ.get("SLURM_JOB_ID"),
}))
"""


def run_cell(kernels_dir: str, name: str, code: str = SEEN_CELL, timeout: float = 120) -> dict[str, Any]:
    """Start kernel `name` from `kernels_dir`, run `code`, shut it down; the JSON after the "SEEN " it printed,
    with the reply's status and everything it printed under "_status" and "_output"."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    manager = KernelManager(kernel_name=name, kernel_spec_manager=KernelSpecManager(kernel_dirs=[kernels_dir]))
    manager.start_kernel()
    client = manager.client()
    client.start_channels()
    printed: list[str] = []

    def hook(message: dict[str, Any]) -> None:
        if message["msg_type"] == "stream":
            printed.append(message["content"]["text"])
        elif message["msg_type"] == "error":
            printed.append("\n".join(message["content"]["traceback"]))

    try:
        client.wait_for_ready(timeout=timeout)
        reply = client.execute_interactive(code, timeout=timeout, output_hook=hook)
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=False)  # a shutdown_request: the kernel and apptainer exit by themselves
    output = "".join(printed)
    seen = next((json.loads(line[5:]) for line in output.splitlines() if line.startswith("SEEN ")), {})
    return {**seen, "_status": reply["content"]["status"], "_output": output}


if __name__ == "__main__":
    print("RESULT " + json.dumps(run_cell(sys.argv[1], sys.argv[2], *sys.argv[3:4])))


def image_without_python(work: Path) -> Path:
    """A SIF that has a shell (this host's dash and the libraries it loads) and no Python: what a kernel
    install must refuse. Made without apptainer (tests/support/catalogue_images.make_sif)."""
    import shutil
    import subprocess

    from tests.support.catalogue_images import make_sif

    root = work / "no-python-root"
    dash = os.path.realpath(shutil.which("dash") or "/bin/dash")
    ldd = subprocess.run(["ldd", dash], capture_output=True, text=True, check=True).stdout
    libraries = [word for line in ldd.splitlines() for word in line.split() if word.startswith("/")]
    for source, name in [(dash, "/bin/sh"), (dash, "/usr/bin/sh"), *((lib, lib) for lib in libraries)]:
        target = root / name.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(os.path.realpath(source), target)
    for directory in ("tmp", "etc", "proc", "sys", "dev", "home", "root"):
        (root / directory).mkdir(exist_ok=True)
    return make_sif(root, work / "no-python.sif")
