"""`envbuild import Dockerfile` with the FROM image's config read from its registry, as Docker uses it: the RUN, COPY
and ADD before the file's own WORKDIR start in the base's WorkingDir, `$NAME` of the base's Env takes the base's
value (an ENV that adds to PATH keeps the base's PATH), the base's ENV wins over an ARG of the same name, and the
spec's notes say what was read, from where and at which digest; where it cannot be read, why and the fix.
The registry is a stand-in on 127.0.0.1 (tests/support/standin_registry.py), read over real HTTP."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from envbuild.cli.envbuild_main import main
from envbuild.convert.dockerfile import import_dockerfile
from envbuild.inventory.registryconfig import TIMEOUT_S, ConfigReader, ImageConfig, parse_reference
from tests.support.standin_registry import StandinRegistry, ngc_like, serving

TRAINING = """\
ARG PYTHON_VERSION=3.11
FROM {host}/nvidia/pytorch:24.05-py3
ARG PYTHON_VERSION
ENV PATH=/opt/conda/bin:$PATH
ENV CUDA_LIB=$CUDA_HOME/lib64 LD_LIBRARY_PATH=/opt/x/lib:$LD_LIBRARY_PATH
RUN git clone https://github.com/huggingface/transformers
COPY train.py .
RUN echo python${{PYTHON_VERSION}}
WORKDIR $CUDA_HOME/samples
RUN make
"""


@pytest.fixture
def registry() -> Iterator[StandinRegistry]:
    standin = StandinRegistry()
    with serving(standin) as served:
        yield served


def _import(tmp_path: Path, text: str, *options: str) -> tuple[dict[str, object], list[str]]:
    """The spec `envbuild import` writes for the Dockerfile `text`, and its notes (the comment lines at its top)."""
    (tmp_path / "Dockerfile").write_text(text)
    (tmp_path / "train.py").write_text("print('train')\n")
    spec = tmp_path / "spec.yaml"
    result = CliRunner().invoke(main, ["import", str(tmp_path / "Dockerfile"), "-o", str(spec), *options])
    assert result.exit_code == 0, result.output
    written = spec.read_text()
    notes = [line.removeprefix("#   ") for line in written.splitlines() if line.startswith("#   ")]
    return yaml.safe_load(written), notes


def test_the_bases_workdir_and_env_are_used_as_docker_uses_them(tmp_path: Path, registry: StandinRegistry) -> None:
    image = ngc_like(registry)
    spec, notes = _import(tmp_path, TRAINING.format(host=registry.host))
    assert spec["post"] == ["cd /workspace\ngit clone https://github.com/huggingface/transformers",
                            "cd /workspace\necho python3.10.12",  # the base's ENV PYTHON_VERSION wins over the ARG
                            "mkdir -p /usr/local/cuda/samples", "cd /usr/local/cuda/samples\nmake"]
    assert [(entry["src"], entry["dest"]) for entry in spec["files"]] == [("train.py", "/workspace/train.py")]
    assert spec["env"] == {"PATH": {"prepend": "/opt/conda/bin"},  # the image keeps the base's PATH behind it
                           "CUDA_LIB": "/usr/local/cuda/lib64", "LD_LIBRARY_PATH": {"prepend": "/opt/x/lib"}}
    assert notes[0] == (f"line 2: FROM {registry.host}/nvidia/pytorch:24.05-py3: the base's config was read from "
                        f"{registry.host}/nvidia/pytorch@{image.index_digest} (linux/amd64): WORKDIR /workspace, ENV "
                        "PATH, CUDA_HOME, PYTHON_VERSION, LD_LIBRARY_PATH; RUN, COPY and ADD before the file's own "
                        "WORKDIR run in /workspace and $NAME of the base's ENV reads its value, as in Docker")
    assert not any("were not read" in note for note in notes)


def test_the_platform_of_the_specs_system_is_read(tmp_path: Path, registry: StandinRegistry) -> None:
    ngc_like(registry)
    spec, notes = _import(tmp_path, f"FROM {registry.host}/nvidia/pytorch:24.05-py3\nRUN nvcc --version\n",
                          "--system", "jupiter")
    assert spec["post"] == ["cd /workspace-arm\nnvcc --version"]
    assert "(linux/arm64): WORKDIR /workspace-arm" in notes[0]


def test_offline_reads_nothing_and_says_so(tmp_path: Path, registry: StandinRegistry) -> None:
    ngc_like(registry)
    spec, notes = _import(tmp_path, TRAINING.format(host=registry.host).replace("WORKDIR $CUDA_HOME/samples\n", ""),
                          "--offline")
    assert registry.requests == []
    assert spec["post"][0] == "export PYTHON_VERSION=3.11\ngit clone https://github.com/huggingface/transformers"
    assert notes[0].startswith(f"line 2: FROM {registry.host}/nvidia/pytorch:24.05-py3: the base's WORKDIR and ENV "
                               "were not read (not asked for: envbuild import --offline): RUN, COPY and ADD before the "
                               "file's own WORKDIR run in /, where Docker runs them in the base's WORKDIR")
    assert "fix: import without --offline where the registry is reachable" in notes[0]
    assert any(note.startswith("line 5: ENV CUDA_LIB=$CUDA_HOME/lib64") and "not read: see the note at FROM" in note
               for note in notes)


def test_an_unknown_image_is_noted_with_the_registrys_answer_and_the_fix(tmp_path: Path,
                                                                          registry: StandinRegistry) -> None:
    ngc_like(registry)
    spec, notes = _import(tmp_path, f"FROM {registry.host}/nvidia/pytorch:99.99\nRUN make\n")
    assert spec["post"] == ["make"]
    assert notes == [f"line 1: FROM {registry.host}/nvidia/pytorch:99.99: the base's WORKDIR and ENV were not read "
                     f"({registry.host} has no image nvidia/pytorch:99.99 (404: MANIFEST_UNKNOWN manifest unknown)): "
                     "RUN, COPY and ADD before the file's own WORKDIR run in /, where Docker runs them in the base's "
                     "WORKDIR, and $NAME of the base's ENV has no value here; fix: check the image name and tag in "
                     "FROM (import reads the config of the image the file names), or add WORKDIR <the base's "
                     "directory> before them if the base sets one"]


def test_docker_hub_behind_a_proxy_that_refuses_is_noted_quickly(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Docker Hub asked through HTTPS_PROXY, a port nothing listens on: the note says it could not be reached."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    for name in ("HTTPS_PROXY", "https_proxy"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{closed}")
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    started = time.monotonic()
    _, notes = _import(tmp_path, "FROM python:3.11-slim\nRUN pip --version\n")
    assert time.monotonic() - started < TIMEOUT_S + 5
    assert notes[0].startswith("line 1: FROM python:3.11-slim: the base's WORKDIR and ENV were not read (could not "
                               f"reach registry-1.docker.io through the proxy http://127.0.0.1:{closed}: connection "
                               "refused): "), notes
    assert "fix: import where registry-1.docker.io is reachable (a proxy: HTTPS_PROXY; a site's CA: SSL_CERT_FILE)" \
        in notes[0]


@pytest.mark.network
def test_docker_hub_is_read_or_noted_as_unreachable_quickly(tmp_path: Path) -> None:
    """As a user's import runs here (no Docker Hub): it could not reach it, said within the timeout. Where
    Docker Hub answers, the official python image's config is read instead."""
    started = time.monotonic()
    _, notes = _import(tmp_path, "FROM python:3.11-slim\nRUN pip --version\n")
    assert time.monotonic() - started < TIMEOUT_S + 5
    read = notes[0].startswith("line 1: FROM python:3.11-slim: the base's config was read from "
                               "docker.io/library/python@sha256:")
    assert read or notes[0].startswith("line 1: FROM python:3.11-slim: the base's WORKDIR and ENV were not read "
                                       "(could not reach registry-1.docker.io: "), notes


def _reader(env: dict[str, str], workdir: str = "/app") -> ConfigReader:
    """A reader that answers `env` and `workdir` for every image: the importer's side alone, without a registry."""
    return lambda reference: ImageConfig(parse_reference(reference), "sha256:" + "1" * 64, "linux/amd64",
                                         tuple(env.items()), workdir)


def test_env_lines_read_the_bases_values_where_docker_does() -> None:
    base = {"PATH": "/usr/bin:/bin", "HOME": "/root", "CUDA_VERSION": "12.4"}
    text = ("FROM debian\nENV PATH=/a:$PATH\nENV SEEN=$PATH SUFFIX=${HOME}x\nENV HOME=${HOME}2\n"
            "LABEL cuda=$CUDA_VERSION\nENV A=1 B=$A\n")
    result = import_dockerfile(text, "e", read_base=_reader(base))
    assert result.spec["env"] == {"PATH": {"prepend": "/a"}, "SEEN": "/a:/usr/bin:/bin", "SUFFIX": "/rootx",
                                  "HOME": "/root2", "A": "1"}
    assert result.spec["labels"] == {"cuda": "12.4"}
    assert result.notes[-1] == ("line 6: ENV A=1 B=$A: B not imported ($A is read from before this line, as Docker "
                                "reads it, not from the A= beside it: the base's value (it sets none: empty); write "
                                "the value in its place); the line's other assignments are")


def test_a_base_without_a_workdir_leaves_commands_in_the_root() -> None:
    result = import_dockerfile("FROM debian\nRUN make\nCOPY a.txt b/\n", "r", read_base=_reader({}, ""))
    assert result.spec["post"] == ["make"]
    assert [(entry["src"], entry["dest"]) for entry in result.spec["files"]] == [("a.txt", "/b/a.txt")]
    assert "WORKDIR (none: /), ENV none;" in result.notes[0]
