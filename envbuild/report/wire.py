"""How a node's sampler sends its records to envrun: framed lines in the task's stderr, each carrying the step's key.

srun carries every task's stderr back to envrun's step supervisor (envbuild.launch.supervise), over the
network from every node, so no shared file system is needed. A record is one line:

    MARKER + KEY + compact JSON + "\\n"

The program's own stderr goes the same way, so a line that starts with MARKER proves nothing: a program that
prints text from its data (a log line, a file name, a web page) could print one, and envrun would count fake
nodes and GPUs. KEY is what a program cannot print by chance: a per-step secret (new_key, 128 random bits)
that envrun puts in srun's environment for the host shim only. The shim takes it out of the environment
before anything else starts, hands it to the sampler on its stdin (not its argv, not its environment, not a
file) and execs the program without it (envbuild.launch.shims.sampler_start_lines). A line with MARKER and
another key, or none, is the program's: it passes through unchanged. (A program that goes looking for the key,
in the memory of the sampler or of srun, can find it: it runs as the same user. The key keeps out text, not
code.)

MARKER starts with an ASCII record separator (0x1e), a byte that programs do not print (progress bars
write "\\r" and text, never 0x1e), so the supervisor can pass everything else through as it comes, also a
partial progress-bar line that a record follows, and `srun --label` prefixes ("3: ") before it.

Each write is one line under PIPE_BUF (4096 bytes on Linux), which the kernel writes into the pipe as a
whole, so a record is never interleaved with the program's own output. A sample of a node with more
ranks than fit in one line is split into several lines with the same `seq` (`encode` does it); the
collector merges them.

Light: json and os only (the sampler runs with `python -S` beside the training processes).
"""

from __future__ import annotations

import json
import os

MARKER = "\x1eenvrun-sample\x1f"
MARKER_BYTES = MARKER.encode()
KEY_LENGTH = 32  # hex digits of a key: 128 random bits
MAX_LINE = 3800  # bytes per written line, marker, key and newline included: under PIPE_BUF (4096) with room to spare
SCHEMA = 1  # the "v" of every record

# Keys whose lists may be split over several lines of one sample.
_SPLIT_KEYS = ("ranks", "gpus")
_HEX = frozenset("0123456789abcdef")


def new_key() -> str:
    """A step's key: 32 lowercase hex digits from the kernel's random source."""
    return os.urandom(KEY_LENGTH // 2).hex()


def is_key(text: str) -> bool:
    """Whether `text` has a key's form (new_key's): what the sampler accepts on its stdin."""
    return len(text) == KEY_LENGTH and set(text) <= _HEX


def _prefix(key: str) -> bytes:
    if not is_key(key):
        raise ValueError(f"not a report key: {key!r} (expected {KEY_LENGTH} lowercase hex digits)")
    return MARKER_BYTES + key.encode()


def encode(record: dict[str, object], key: str) -> list[bytes]:
    """The lines (marker, key, JSON, newline) that carry `record`; more than one when it does not fit in
    MAX_LINE. Every line carries the record's other keys; the lists under "ranks" and "gpus" are shared out."""
    prefix = _prefix(key)
    line = _line(prefix, record)
    if len(line) <= MAX_LINE:
        return [line]
    head = {name: value for name, value in record.items() if name not in _SPLIT_KEYS}
    lines: list[bytes] = []
    for name in _SPLIT_KEYS:
        items = record.get(name)
        if not isinstance(items, list):
            continue
        chunk: list[object] = []
        for item in items:
            trial = _line(prefix, {**head, name: [*chunk, item]})
            if len(trial) > MAX_LINE and chunk:
                lines.append(_line(prefix, {**head, name: chunk}))
                chunk = []
            chunk.append(item)
        if chunk:
            lines.append(_line(prefix, {**head, name: chunk}))
    return lines or [_line(prefix, head)]


def _line(prefix: bytes, record: dict[str, object]) -> bytes:
    return prefix + json.dumps(record, separators=(",", ":")).encode() + b"\n"


def decode(payload: str) -> dict[str, object] | None:
    """The record in the text after MARKER and the key (newline stripped), None when it is not one (cut short,
    wrong schema): a record lost on the way costs one sample, never the step."""
    try:
        record = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("v") != SCHEMA:
        return None
    return record


class StreamSplitter:
    """Takes the records of the step's `key` out of a byte stream (srun's stderr) and passes everything else
    through unchanged: also a line that starts with MARKER and carries another key, or none (the program's).

    Bytes are passed on as soon as they cannot be part of a record, so a progress bar that never ends its line
    still flows; only a line that starts like MARKER + key is held back until its newline. With
    `srun --label`, srun writes "N: " before every line, records included: that prefix goes with the record.
    """

    _HOLD_LIMIT = 1 << 16  # a "record" longer than this is not one: let it through

    def __init__(self, key: str) -> None:
        self._prefix = _prefix(key)
        self._held = b""
        self._line_start = True  # whether what was passed on so far ends a line

    def feed(self, chunk: bytes) -> tuple[bytes, list[str]]:
        """(bytes to pass on, payloads of the records that ended in this chunk)."""
        data = self._held + chunk
        self._held = b""
        out = bytearray()
        payloads: list[str] = []
        prefix = self._prefix
        lead = prefix[:1]
        while data:
            index = data.find(lead)
            if index < 0:
                out += data
                break
            out += data[:index]
            rest = data[index:]
            if rest.startswith(prefix):
                end = rest.find(b"\n")
                if end >= 0:
                    payloads.append(rest[len(prefix) : end].decode("utf-8", "replace"))
                    _drop_label(out, self._line_start)
                    data = rest[end + 1 :]
                    continue
                if len(rest) < self._HOLD_LIMIT:
                    self._held = rest
                    break
            elif len(rest) < len(prefix) and prefix.startswith(rest):  # may still become MARKER + key
                self._held = rest
                break
            out += rest[:1]  # not a record of this step: the program's own byte
            data = rest[1:]
        if out:
            self._line_start = out.endswith(b"\n")
        return bytes(out), payloads

    def flush(self) -> bytes:
        """What is still held at the end of the stream (a cut record: passed on as it is)."""
        held, self._held = self._held, b""
        return held


def _drop_label(out: bytearray, line_start: bool) -> None:
    """Remove an `srun --label` prefix ("3: ", " 12: ") that srun wrote before a record, from the end of `out`."""
    start = out.rfind(b"\n") + 1
    if start == 0 and not line_start:
        return
    tail = bytes(out[start:])
    label = tail.strip(b" ")
    if tail.endswith(b": ") and label[:-1].isdigit():
        del out[start:]
