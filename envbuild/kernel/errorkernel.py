"""A stand-in kernel that answers every request with one error message, over the Jupyter protocol.

When a kernel cannot start (its image was moved or deleted, an overlay no longer matches the image, the
container runtime is missing), a kernel process that just exits shows the user "kernel died, restarting"
and nothing else: the reason is in a log they do not know of. `envrun kernel run` serves this instead: it
binds the ports of the connection file as a kernel does, so the notebook connects, and every cell run shows
the message and the fix as an error (the kernel_info reply's banner carries it too). It stops on
shutdown_request, as a kernel does.

Built on jupyter_client's Session (message signing and framing) and pyzmq, which jupyter_client brings; ipykernel
is not needed on the host. Protocol: Jupyter messaging 5.3 (jupyter-client.readthedocs.io/en/stable/messaging.html).
"""

from __future__ import annotations

import json
from typing import Any

PROTOCOL_VERSION = "5.3"
ERROR_NAME = "EnvrunKernelError"


def serve_error(connection_file: str, message: str) -> None:
    """Serve `message` on the connection file's sockets until a shutdown_request (or the process is killed)."""
    import zmq
    from jupyter_client.session import Session

    with open(connection_file, encoding="utf-8") as handle:
        info = json.load(handle)
    session = Session(key=str(info.get("key", "")).encode(), signature_scheme=info.get("signature_scheme", "hmac-sha256"),
                      username="envrun")
    context = zmq.Context()

    def bind(kind: int, port_key: str) -> zmq.Socket[Any]:
        socket = context.socket(kind)
        socket.linger = 1000
        transport, ip, port = info.get("transport", "tcp"), info.get("ip", "127.0.0.1"), info[port_key]
        socket.bind(f"{transport}://{ip}-{port}" if transport == "ipc" else f"{transport}://{ip}:{port}")
        return socket

    shell, control, stdin = (bind(zmq.ROUTER, key) for key in ("shell_port", "control_port", "stdin_port"))
    iopub, heartbeat = bind(zmq.PUB, "iopub_port"), bind(zmq.REP, "hb_port")
    poller = zmq.Poller()
    for socket in (shell, control, stdin, heartbeat):
        poller.register(socket, zmq.POLLIN)
    state = {"count": 0, "running": True}
    try:
        while state["running"]:
            for socket, _ in poller.poll(1000):
                if socket is heartbeat:
                    heartbeat.send(heartbeat.recv())
                    continue
                idents, request = session.recv(socket, mode=zmq.NOBLOCK)
                if request is not None:
                    _answer(session, socket, iopub, idents or [], request, message, state)
    finally:
        context.destroy(linger=1000)


def _answer(session: Any, socket: Any, iopub: Any, idents: list[bytes], request: dict[str, Any], message: str,
            state: dict[str, Any]) -> None:
    kind = request["header"]["msg_type"]
    if not kind.endswith("_request"):
        return
    session.send(iopub, "status", {"execution_state": "busy"}, parent=request)
    reply: dict[str, Any]
    if kind == "kernel_info_request":
        reply = {"status": "ok", "protocol_version": PROTOCOL_VERSION, "implementation": "envrun-error",
                 "implementation_version": "1", "banner": message, "help_links": [],
                 "language_info": {"name": "python", "mimetype": "text/x-python", "file_extension": ".py"}}
    elif kind == "execute_request":
        state["count"] += 1
        error = {"ename": ERROR_NAME, "evalue": message, "traceback": [message]}
        session.send(iopub, "stream", {"name": "stderr", "text": message + "\n"}, parent=request)
        session.send(iopub, "error", error, parent=request)
        reply = {"status": "error", "execution_count": state["count"], **error}
    elif kind == "shutdown_request":
        reply = {"status": "ok", "restart": bool(request["content"].get("restart", False))}
        state["running"] = False
    elif kind == "interrupt_request":
        reply = {"status": "ok"}
    elif kind == "is_complete_request":
        reply = {"status": "complete"}
    elif kind == "comm_info_request":
        reply = {"status": "ok", "comms": {}}
    else:
        reply = {"status": "error", "ename": ERROR_NAME, "evalue": message, "traceback": [message]}
    session.send(socket, kind[: -len("_request")] + "_reply", reply, parent=request, ident=idents)
    session.send(iopub, "status", {"execution_state": "idle"}, parent=request)
