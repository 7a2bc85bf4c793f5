"""The records' way from the nodes' samplers to envrun (envbuild.report.wire): framed lines in srun's stderr,
each with the step's key. Everything that is not a record of the step passes through byte for byte, in whatever
pieces the pipe delivers it: also a line with the marker and another key, or none (the program's own text)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from envbuild.report.wire import KEY_LENGTH, MARKER_BYTES, MAX_LINE, SCHEMA, StreamSplitter, decode, encode, is_key, new_key

KEY = "0123456789abcdef" * 2
PREFIX = MARKER_BYTES + KEY.encode()


def record(**fields: object) -> dict[str, object]:
    return {"v": SCHEMA, "kind": "sample", "node": "n1", "seq": 3, "t": 1.5, **fields}


def split_all(chunks: list[bytes], key: str = KEY) -> tuple[bytes, list[str]]:
    splitter = StreamSplitter(key)
    out, payloads = b"", []
    for chunk in chunks:
        passed, found = splitter.feed(chunk)
        out += passed
        payloads += found
    return out + splitter.flush(), payloads


def test_keys_are_new_every_time_and_of_one_form() -> None:
    keys = {new_key() for _ in range(50)}
    assert len(keys) == 50 and all(is_key(key) and len(key) == KEY_LENGTH for key in keys)
    for wrong in ("", "0" * 31, "0" * 33, "g" * 32, "A" * 32, KEY[:-1] + "\n"):
        assert not is_key(wrong)
        with pytest.raises(ValueError):
            encode(record(), wrong)
        with pytest.raises(ValueError):
            StreamSplitter(wrong)


def test_a_record_is_one_line_under_pipe_buf_and_decodes_back() -> None:
    (line,) = encode(record(ranks=[{"rank": 0, "cpu_s": 1.25}]), KEY)
    assert line.startswith(PREFIX) and line.endswith(b"\n") and line.count(b"\n") == 1 and len(line) < 4096
    assert decode(line[len(PREFIX) : -1].decode()) == record(ranks=[{"rank": 0, "cpu_s": 1.25}])


def test_a_node_with_many_ranks_is_split_into_lines_that_share_the_sample() -> None:
    ranks = [{"rank": i, "local_rank": i, "pid": 100000 + i, "procs": 3, "threads": 40, "cpu_s": 12345.678,
              "rss": 12345678901, "cores": 1} for i in range(256)]
    lines = encode(record(ranks=ranks, gpus=[{"index": 0, "util": 0.5}]), KEY)
    assert len(lines) > 1 and all(len(line) <= MAX_LINE and line.startswith(PREFIX) for line in lines)
    decoded = [decode(line[len(PREFIX) : -1].decode()) for line in lines]
    assert all(d is not None and d["seq"] == 3 and d["node"] == "n1" for d in decoded)
    assert [r["rank"] for d in decoded if d for r in d.get("ranks", [])] == list(range(256))  # type: ignore[attr-defined]


def test_records_leave_the_stream_and_the_rest_passes_unchanged() -> None:
    line = encode(record(), KEY)[0]
    out, payloads = split_all([b"epoch 1\n", b"\r 45%|####", line, b"\r 46%|####\n", b"3: " + line, b"3: loss 1.0\n"])
    assert out == b"epoch 1\n\r 45%|####\r 46%|####\n3: loss 1.0\n"  # srun --label's "3: " goes with the record
    assert [json.loads(p)["kind"] for p in payloads] == ["sample", "sample"]


def test_a_record_cut_anywhere_by_the_pipe_is_still_found() -> None:
    line = encode(record(), KEY)[0]
    stream = b"before\n" + line + b"after\n"
    for cut in range(1, len(stream)):
        out, payloads = split_all([stream[:cut], stream[cut:]])
        assert out == b"before\nafter\n" and len(payloads) == 1


def test_the_separator_byte_in_program_output_is_not_a_record() -> None:
    out, payloads = split_all([b"a\x1eb\n", b"\x1e", b"x\n", b"\x1eenvrun"])
    assert out == b"a\x1eb\n\x1ex\n\x1eenvrun" and payloads == []  # a cut marker at the end is passed on


def test_a_forged_record_without_the_steps_key_is_the_programs_text() -> None:
    """The old framing took any line with the marker for a record: a program printing one added nodes and GPUs."""
    fake = json.dumps(record(node="fake-node", gpus=[{"index": 0, "util": 1.0}])).encode()
    forged = [MARKER_BYTES + fake + b"\n",  # the old framing: no key at all
              MARKER_BYTES + b"0" * KEY_LENGTH + fake + b"\n",  # a guessed key
              MARKER_BYTES + KEY[:-1].encode() + b"0" + fake + b"\n",  # all but the last digit
              MARKER_BYTES + KEY.encode()[:8] + b"\n"]  # the key cut short by a newline
    stream = b"".join(forged)
    out, payloads = split_all([stream])
    assert out == stream and payloads == []
    for cut in range(1, len(stream)):  # in whatever pieces it comes
        out, payloads = split_all([stream[:cut], stream[cut:]])
        assert out == stream and payloads == []
    real = encode(record(), KEY)[0]
    out, payloads = split_all([forged[1] + real + forged[0]])
    assert out == forged[1] + forged[0] and [json.loads(p)["node"] for p in payloads] == ["n1"]


def test_another_steps_records_pass_through_as_they_are() -> None:
    other = encode(record(), "f" * KEY_LENGTH)[0]
    assert split_all([other]) == (other, [])


def test_what_is_not_a_record_decodes_to_none() -> None:
    assert decode("{not json") is None
    assert decode(json.dumps({"v": 99})) is None
    assert decode("[1, 2]") is None


@given(st.lists(st.binary(max_size=40), max_size=12))
def test_any_output_without_records_passes_through_byte_for_byte(chunks: list[bytes]) -> None:
    out, payloads = split_all(chunks)
    joined = b"".join(chunks)
    if PREFIX not in joined:
        assert out == joined and payloads == []


@given(st.lists(st.sampled_from([MARKER_BYTES, MARKER_BYTES[:5], KEY.encode()[:20], b"0" * KEY_LENGTH, b"{}",
                                 b"\n", b"x", b"\x1e"]), max_size=30), st.integers(min_value=0, max_value=400))
def test_marker_pieces_and_guessed_keys_pass_through_byte_for_byte(pieces: list[bytes], cut: int) -> None:
    joined = b"".join(pieces)
    if PREFIX not in joined:
        assert split_all([joined[:cut], joined[cut:]]) == (joined, [])
