"""The network check before a cotainr build: real sockets on this machine (a local HTTP server, a closed
port, a name that cannot resolve), all within the short timeout."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from envbuild.builder.execute.reachable import probe, unreachable


class _NotFound(BaseHTTPRequestHandler):
    def do_HEAD(self) -> None:
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = HTTPServer(("127.0.0.1", 0), _NotFound)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_any_http_answer_is_reachable(server: str) -> None:
    assert probe(server + "channel/", 5) is None  # 404 still means the host is there


def test_unreachable_sources_are_named_with_the_reason_quickly(server: str) -> None:
    started = time.monotonic()
    missing = unreachable(((server, "a server"), (f"http://127.0.0.1:{closed_port()}/", "a closed port"),
                           ("https://conda-forge.invalid/x", "a name that cannot resolve"), ("file:///x", "not http")), 3)
    assert time.monotonic() - started < 10
    reasons = {what: why for _, what, why in missing}
    assert set(reasons) == {"a closed port", "a name that cannot resolve", "not http"}
    assert "refused" in reasons["a closed port"].lower()
    assert "not resolved" in reasons["a name that cannot resolve"]
