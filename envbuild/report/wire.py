"""How a node's sampler sends its records to envrun: framed lines in the task's stderr.

srun carries every task's stderr back to envrun's step supervisor (envbuild.launch.supervise), over the
network from every node, so no shared file system is needed. A record is one line:

    MARKER + compact JSON + "\\n"

MARKER starts with an ASCII record separator (0x1e), a byte that programs do not print (progress bars
write "\\r" and text, never 0x1e), so the supervisor can pass everything else through unchanged, also a
partial progress-bar line that a record follows, and `srun --label` prefixes ("3: ") before it.

Each write is one line under PIPE_BUF (4096 bytes on Linux), which the kernel writes into the pipe as a
whole, so a record is never interleaved with the program's own output. A sample of a node with more
ranks than fit in one line is split into several lines with the same `seq` (`encode` does it); the
collector merges them.

Light: json and os only (the sampler runs with `python -S` beside the training processes).
"""

from __future__ import annotations

import json

MARKER = "\x1eenvrun-sample\x1f"
MARKER_BYTES = MARKER.encode()
MAX_LINE = 3800  # bytes per written line, marker and newline included: under PIPE_BUF (4096) with room to spare
SCHEMA = 1  # the "v" of every record

# Keys whose lists may be split over several lines of one sample.
_SPLIT_KEYS = ("ranks", "gpus")


def encode(record: dict[str, object]) -> list[bytes]:
    """The lines (marker, JSON, newline) that carry `record`; more than one when it does not fit in MAX_LINE.
    Every line carries the record's other keys; the lists under "ranks" and "gpus" are shared out."""
    line = _line(record)
    if len(line) <= MAX_LINE:
        return [line]
    head = {key: value for key, value in record.items() if key not in _SPLIT_KEYS}
    lines: list[bytes] = []
    for key in _SPLIT_KEYS:
        items = record.get(key)
        if not isinstance(items, list):
            continue
        chunk: list[object] = []
        for item in items:
            trial = _line({**head, key: [*chunk, item]})
            if len(trial) > MAX_LINE and chunk:
                lines.append(_line({**head, key: chunk}))
                chunk = []
            chunk.append(item)
        if chunk:
            lines.append(_line({**head, key: chunk}))
    return lines or [_line(head)]


def _line(record: dict[str, object]) -> bytes:
    return MARKER_BYTES + json.dumps(record, separators=(",", ":")).encode() + b"\n"


def decode(payload: str) -> dict[str, object] | None:
    """The record in the text after MARKER (newline stripped), None when it is not one (cut short, wrong
    schema): a record lost on the way costs one sample, never the step."""
    try:
        record = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("v") != SCHEMA:
        return None
    return record


class StreamSplitter:
    """Takes the records out of a byte stream (srun's stderr) and passes everything else through unchanged.

    Bytes are passed on as soon as they cannot be part of a record, so a progress bar that never ends its line
    still flows; only a line that starts with the marker's first byte is held back until its newline. With
    `srun --label`, srun writes "N: " before every line, records included: that prefix goes with the record.
    """

    _HOLD_LIMIT = 1 << 16  # a "record" longer than this is not one: let it through

    def __init__(self) -> None:
        self._held = b""
        self._line_start = True  # whether what was passed on so far ends a line

    def feed(self, chunk: bytes) -> tuple[bytes, list[str]]:
        """(bytes to pass on, payloads of the records that ended in this chunk)."""
        data = self._held + chunk
        self._held = b""
        out = bytearray()
        payloads: list[str] = []
        lead = MARKER_BYTES[:1]
        while data:
            index = data.find(lead)
            if index < 0:
                out += data
                break
            out += data[:index]
            rest = data[index:]
            end = rest.find(b"\n")
            if end < 0:
                possible = rest.startswith(MARKER_BYTES) or MARKER_BYTES.startswith(rest)
                if possible and len(rest) < self._HOLD_LIMIT:
                    self._held = rest
                    break
                out += rest[:1]
                data = rest[1:]
                continue
            if rest.startswith(MARKER_BYTES):
                payloads.append(rest[len(MARKER_BYTES) : end].decode("utf-8", "replace"))
                _drop_label(out, self._line_start)
                data = rest[end + 1 :]
                continue
            out += rest[:1]
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
