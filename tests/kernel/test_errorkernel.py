"""A kernel whose image is gone starts anyway and answers with the reason (envbuild.kernel.errorkernel), seen
through a real Jupyter client. No container starts: the image check comes first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envbuild.kernel.kernelspec import KernelEntry, kernelspec
from tests.conftest import REPO


@pytest.fixture
def gone_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> KernelEntry:
    """A kernelspec of envrun's (bin/envrun of this checkout) whose image does not exist."""
    data = tmp_path / "jupyter"
    entry = KernelEntry(name="envrun-gone", display_name="gone (envrun)", image=str(tmp_path / "moved-away.sif"),
                        overlays=(), ipykernel_overlay="", python="python", system="", binds=(),
                        log=str(tmp_path / "state" / "envrun" / "kernels" / "envrun-gone.log"), envrun=str(REPO / "bin/envrun"))
    kernel_dir = data / "kernels" / entry.name
    kernel_dir.mkdir(parents=True)
    (kernel_dir / "kernel.json").write_text(json.dumps(kernelspec(entry, str(kernel_dir), "test")))
    monkeypatch.setenv("JUPYTER_PATH", str(data))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    return entry


def test_a_moved_image_gives_every_cell_the_reason_and_the_fix(gone_kernel: KernelEntry) -> None:
    from jupyter_client.manager import KernelManager

    manager = KernelManager(kernel_name=gone_kernel.name)
    manager.start_kernel()
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)
        info = client.kernel_info(reply=True, timeout=30)["content"]
        assert "moved-away.sif" in info["banner"]
        streamed: list[str] = []

        def hook(message: dict) -> None:
            if message["msg_type"] == "stream":
                streamed.append(message["content"]["text"])

        reply = client.execute_interactive("print(1)", timeout=30, output_hook=hook)["content"]
        assert reply["status"] == "error" and reply["ename"] == "EnvrunKernelError"
        said = reply["evalue"]
        assert f"the image {gone_kernel.image} of the kernel envrun-gone does not exist" in said
        assert "envrun kernel install --force --name envrun-gone --image" in said, "the fix: point it at the new place"
        assert gone_kernel.log in said and said in "".join(streamed)
        assert client.comm_info(reply=True, timeout=30)["content"] == {"status": "ok", "comms": {}}
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=False)
    assert not manager.is_alive(), "it stops on shutdown_request, as a kernel does"
    log = Path(gone_kernel.log).read_text()
    assert "envrun kernel envrun-gone starting" in log and "does not exist" in log
