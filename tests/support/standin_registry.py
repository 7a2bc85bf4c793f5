"""A stand-in OCI registry on 127.0.0.1, served by http.server in a thread: the anonymous Bearer token flow (401 with
WWW-Authenticate, then a token from its realm), a manifest list whose linux/amd64 and linux/arm64 entries name
image manifests, config blobs handed out through a redirect (as Docker Hub hands them to its CDN), OCI error
bodies for unknown images, and a listener that takes connections and never answers."""

from __future__ import annotations

import hashlib
import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple

INDEX_TYPE = "application/vnd.oci.image.index.v1+json"
MANIFEST_TYPE = "application/vnd.docker.distribution.manifest.v2+json"
CONFIG_TYPE = "application/vnd.docker.container.image.v1+json"
TOKEN = "standin-token"

# An NGC-like base: its tools under /usr/local, CUDA's variables, commands starting in /workspace.
AMD64_ENV = ["PATH=/usr/local/nvm/versions/node/v16/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:"
             "/usr/bin:/sbin:/bin", "CUDA_HOME=/usr/local/cuda", "PYTHON_VERSION=3.10.12",
             "LD_LIBRARY_PATH=/usr/local/cuda/lib64"]
ARM64_ENV = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "CUDA_HOME=/usr/local/cuda-arm"]


def _blob(data: Any) -> tuple[str, bytes]:
    body = json.dumps(data, indent=1).encode()
    return "sha256:" + hashlib.sha256(body).hexdigest(), body


class Image(NamedTuple):
    index_digest: str
    amd64_manifest: str
    config_digests: dict[str, str]  # platform -> config digest


class StandinRegistry:
    """The registry's content and what it was asked: `requests` holds (path, headers) of every request."""

    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}
        self.manifests: dict[str, tuple[str, bytes]] = {}  # digest -> (media type, body)
        self.tags: dict[tuple[str, str], str] = {}  # (repository, tag) -> digest
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.private: set[str] = set()  # repositories whose token needs credentials
        self.port = 0

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def add_image(self, repository: str, tag: str, configs: dict[str, dict[str, Any]]) -> Image:
        """A multi-platform image: one config per platform ("linux/amd64": {"Env": [...], "WorkingDir": ...})."""
        entries, config_digests, amd64 = [], {}, ""
        for platform, config in configs.items():
            config_digest, config_body = _blob({"architecture": platform.split("/")[1], "os": "linux",
                                                "config": config, "rootfs": {"type": "layers", "diff_ids": []}})
            self.blobs[config_digest] = config_body
            config_digests[platform] = config_digest
            manifest_digest, manifest_body = _blob({
                "schemaVersion": 2, "mediaType": MANIFEST_TYPE,
                "config": {"mediaType": CONFIG_TYPE, "digest": config_digest, "size": len(config_body)},
                "layers": []})
            self.manifests[manifest_digest] = (MANIFEST_TYPE, manifest_body)
            os_name, arch = platform.split("/")
            entries.append({"mediaType": MANIFEST_TYPE, "digest": manifest_digest, "size": len(manifest_body),
                            "platform": {"os": os_name, "architecture": arch}})
            amd64 = manifest_digest if platform == "linux/amd64" else amd64
        # a build attestation, as BuildKit pushes one beside the images: no platform of its own
        entries.append({"mediaType": MANIFEST_TYPE, "digest": "sha256:" + "0" * 64, "size": 2,
                        "platform": {"os": "unknown", "architecture": "unknown"}})
        index_digest, index_body = _blob({"schemaVersion": 2, "mediaType": INDEX_TYPE, "manifests": entries})
        self.manifests[index_digest] = (INDEX_TYPE, index_body)
        self.tags[(repository, tag)] = index_digest
        return Image(index_digest, amd64, config_digests)

    def handler(self) -> type[BaseHTTPRequestHandler]:
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # http.server calls it by this name
                registry.requests.append((self.path, {key.lower(): value for key, value in self.headers.items()}))
                path, _, query = self.path.partition("?")
                if path == "/token" and any(f"%3A{r.replace('/', '%2F')}%3A" in query for r in registry.private):
                    self._error(401, "UNAUTHORIZED", "authentication required")
                elif path == "/token":
                    self._answer(200, "application/json", json.dumps({"token": TOKEN, "query": query}).encode())
                elif path.startswith("/cdn/"):
                    if self.headers.get("Authorization"):  # a token must not follow the redirect
                        self._answer(400, "text/plain", b"credentials sent to the CDN")
                    else:
                        self._blob(path.removeprefix("/cdn/"), cdn=True)
                elif path.startswith("/v2/"):
                    self._registry(path.removeprefix("/v2/"))
                else:
                    self._answer(404, "text/plain", b"not found")

            def _registry(self, path: str) -> None:
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    repository = path.rsplit("/", 2)[0]
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", f'Bearer realm="http://{registry.host}/token",'
                                     f'service="standin",scope="repository:{repository}:pull"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                repository, kind, reference = path.rsplit("/", 2)
                if kind == "manifests":
                    digest = registry.tags.get((repository, reference), reference)
                    if digest in registry.manifests and any(r == repository for r, _ in registry.tags):
                        media_type, body = registry.manifests[digest]
                        self._answer(200, media_type, body, {"Docker-Content-Digest": digest})
                        return
                    self._error(404, "MANIFEST_UNKNOWN", "manifest unknown")
                elif kind == "blobs":
                    self._blob(reference, cdn=False)
                else:
                    self._error(404, "NAME_UNKNOWN", "repository name not known to registry")

            def _blob(self, digest: str, *, cdn: bool) -> None:
                if digest not in registry.blobs:
                    self._error(404, "BLOB_UNKNOWN", "blob unknown to registry")
                elif cdn:
                    self._answer(200, "application/octet-stream", registry.blobs[digest])
                else:
                    self.send_response(307)
                    self.send_header("Location", f"http://{registry.host}/cdn/{digest}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()

            def _error(self, status: int, code: str, message: str) -> None:
                body = json.dumps({"errors": [{"code": code, "message": message}]}).encode()
                self._answer(status, "application/json", body)

            def _answer(self, status: int, media_type: str, body: bytes, headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", media_type)
                self.send_header("Content-Length", str(len(body)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(body)

        return Handler


def ngc_like(registry: StandinRegistry, repository: str = "nvidia/pytorch", tag: str = "24.05-py3") -> Image:
    return registry.add_image(repository, tag, {
        "linux/amd64": {"Env": AMD64_ENV, "WorkingDir": "/workspace", "Cmd": ["/bin/bash"]},
        "linux/arm64": {"Env": ARM64_ENV, "WorkingDir": "/workspace-arm"},
    })


@contextmanager
def serving(registry: StandinRegistry) -> Iterator[StandinRegistry]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), registry.handler())
    registry.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield registry
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def silent_listener() -> Iterator[str]:
    """host:port of a socket that takes connections (the kernel's backlog) and never answers one."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()
