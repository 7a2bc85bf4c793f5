"""The records' way from the nodes' samplers to envrun (envbuild.report.wire): framed lines in srun's stderr.
Everything that is not a record passes through byte for byte, in whatever pieces the pipe delivers it."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from envbuild.report.wire import MARKER_BYTES, MAX_LINE, SCHEMA, StreamSplitter, decode, encode


def record(**fields: object) -> dict[str, object]:
    return {"v": SCHEMA, "kind": "sample", "node": "n1", "seq": 3, "t": 1.5, **fields}


def split_all(chunks: list[bytes]) -> tuple[bytes, list[str]]:
    splitter = StreamSplitter()
    out, payloads = b"", []
    for chunk in chunks:
        passed, found = splitter.feed(chunk)
        out += passed
        payloads += found
    return out + splitter.flush(), payloads


def test_a_record_is_one_line_under_pipe_buf_and_decodes_back() -> None:
    (line,) = encode(record(ranks=[{"rank": 0, "cpu_s": 1.25}]))
    assert line.startswith(MARKER_BYTES) and line.endswith(b"\n") and line.count(b"\n") == 1 and len(line) < 4096
    assert decode(line[len(MARKER_BYTES) : -1].decode()) == record(ranks=[{"rank": 0, "cpu_s": 1.25}])


def test_a_node_with_many_ranks_is_split_into_lines_that_share_the_sample() -> None:
    ranks = [{"rank": i, "local_rank": i, "pid": 100000 + i, "procs": 3, "threads": 40, "cpu_s": 12345.678,
              "rss": 12345678901, "cores": 1} for i in range(256)]
    lines = encode(record(ranks=ranks, gpus=[{"index": 0, "util": 0.5}]))
    assert len(lines) > 1 and all(len(line) <= MAX_LINE for line in lines)
    decoded = [decode(line[len(MARKER_BYTES) : -1].decode()) for line in lines]
    assert all(d is not None and d["seq"] == 3 and d["node"] == "n1" for d in decoded)
    assert [r["rank"] for d in decoded if d for r in d.get("ranks", [])] == list(range(256))  # type: ignore[attr-defined]


def test_records_leave_the_stream_and_the_rest_passes_unchanged() -> None:
    line = encode(record())[0]
    out, payloads = split_all([b"epoch 1\n", b"\r 45%|####", line, b"\r 46%|####\n", b"3: " + line, b"3: loss 1.0\n"])
    assert out == b"epoch 1\n\r 45%|####\r 46%|####\n3: loss 1.0\n"  # srun --label's "3: " goes with the record
    assert [json.loads(p)["kind"] for p in payloads] == ["sample", "sample"]


def test_a_record_cut_anywhere_by_the_pipe_is_still_found() -> None:
    line = encode(record())[0]
    stream = b"before\n" + line + b"after\n"
    for cut in range(1, len(stream)):
        out, payloads = split_all([stream[:cut], stream[cut:]])
        assert out == b"before\nafter\n" and len(payloads) == 1


def test_the_separator_byte_in_program_output_is_not_a_record() -> None:
    out, payloads = split_all([b"a\x1eb\n", b"\x1e", b"x\n", b"\x1eenvrun"])
    assert out == b"a\x1eb\n\x1ex\n\x1eenvrun" and payloads == []  # a cut marker at the end is passed on


def test_what_is_not_a_record_decodes_to_none() -> None:
    assert decode("{not json") is None
    assert decode(json.dumps({"v": 99})) is None
    assert decode("[1, 2]") is None


@given(st.lists(st.binary(max_size=40), max_size=12))
def test_any_output_without_records_passes_through_byte_for_byte(chunks: list[bytes]) -> None:
    out, payloads = split_all(chunks)
    joined = b"".join(chunks)
    if MARKER_BYTES not in joined:
        assert out == joined and payloads == []
