"""The spec loader under hostile input (issue 15): mutated copies of the example specs, random YAML-ish text,
control and non-UTF-8 bytes, wrong types, huge values, deep nesting. Every case ends valid or in envbuild's own
error (file:line and a fix), never in another exception, and within a time bound. Over 1000 cases per run."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envbuild.envspec.loadspec import load_build_input
from envbuild.shared.errors import EnvbuildError, SpecError

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "envs").glob("*.yaml")) + sorted((REPO / "tests/fixtures/conda").glob("*.yml"))
SEEDS = [path.read_bytes() for path in EXAMPLES]
TIME_BOUND_S = 5.0
FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                          HealthCheck.too_slow])
# Bytes that break parsers: control characters, a NUL, invalid UTF-8, YAML's own syntax characters.
NASTY = [b"\x00", b"\x01", b"\x1b[31m", b"\xff\xfe", b"\xc3\x28", b"&a", b"*a", b"!!python/object:os.system",
         b"{", b"[", b"]", b"}", b":", b"- ", b"\t", b"'", b'"', b"#", b"%YAML 1.1\n", b"---\n", b"\n", b"9" * 400,
         b"x" * 20000, b"? ", b"<<: *a\n", b"!!binary ", b"\\u0000"]


def check(tmp_path: Path, content: bytes, name: str = "spec.yaml") -> None:
    path = tmp_path / name
    path.write_bytes(content)
    start = time.monotonic()
    try:
        load_build_input(path, system="local")
    except SpecError as exc:
        text = exc.render()
        assert f"{path}:" in text and "fix:" in text, text  # located, with a fix
    except EnvbuildError as exc:
        assert exc.render().strip(), "an empty error"
    assert time.monotonic() - start < TIME_BOUND_S


@given(seed=st.sampled_from(SEEDS), edits=st.lists(st.tuples(st.floats(0, 1), st.integers(0, 40),
                                                            st.sampled_from(NASTY)), min_size=1, max_size=4))
@settings(FUZZ)
def test_mutated_example_specs(tmp_path: Path, seed: bytes, edits: list[tuple[float, int, bytes]]) -> None:
    data = bytearray(seed)
    for where, cut, insert in edits:
        at = int(where * len(data))
        data[at:at + cut] = insert
    check(tmp_path, bytes(data))


@given(st.binary(max_size=2000))
@settings(FUZZ)
def test_random_bytes(tmp_path: Path, content: bytes) -> None:
    check(tmp_path, content)


YAML_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=50))
YAML_VALUES = st.recursive(YAML_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)), max_leaves=20)
TOP_KEYS = ["name", "system", "base", "python", "env", "labels", "tests", "files", "overlay", "conda", "post",
            "apt", "dependencies", "channels"]


@given(st.dictionaries(st.sampled_from(TOP_KEYS) | st.text(max_size=10), YAML_VALUES, max_size=6))
@settings(FUZZ)
def test_wrong_types_under_known_keys(tmp_path: Path, document: dict) -> None:
    import yaml

    check(tmp_path, yaml.safe_dump(document, allow_unicode=True).encode("utf-8", "surrogatepass"))


def _alias_bomb(levels: int = 6, width: int = 50) -> bytes:
    lines = ["a0: &a0 [" + ",".join(["x"] * width) + "]"]
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels + 1)]
    return ("\n".join(lines) + "\n").encode()


ALIAS_BOMB = _alias_bomb()


@pytest.mark.parametrize("content", [
    b"name: " + b"[" * 3000 + b"]" * 3000 + b"\n",
    b"name: a\n" * 2,
    b"name: " + b"x" * 1_000_000 + b"\n",
    ALIAS_BOMB,
    b"\xef\xbb\xbfname: bom\nsystem: local\n",
    b"",
    b"---\n---\n",
])
def test_named_hostile_documents(tmp_path: Path, content: bytes) -> None:
    check(tmp_path, content)
