"""An image's config read from its registry: references as Docker parses them, the anonymous token flow, a manifest
list narrowed to one platform, the config blob behind a redirect, and every way of not reading it (an unknown image,
a platform the image lacks, an answer changed on its way or too large, a registry that never answers, one that is
not there), each said in one line with a fix. Served by a stand-in registry on 127.0.0.1 (tests/support); the
requests are real HTTP through urllib."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from envbuild.inventory import registryconfig
from envbuild.inventory.registryconfig import (
    ConfigNotRead,
    ImageConfig,
    ImageReference,
    is_local_host,
    parse_reference,
    read_image_config,
)
from tests.support.standin_registry import AMD64_ENV, TOKEN, StandinRegistry, ngc_like, serving, silent_listener


@pytest.fixture
def registry() -> Iterator[StandinRegistry]:
    standin = StandinRegistry()
    with serving(standin) as served:
        yield served


@pytest.mark.parametrize(("written", "expected"), [
    ("python", ImageReference("docker.io", "library/python", "latest", "")),
    ("python:3.11-slim", ImageReference("docker.io", "library/python", "3.11-slim", "")),
    ("docker://rocm/dev-ubuntu-24.04:6.4", ImageReference("docker.io", "rocm/dev-ubuntu-24.04", "6.4", "")),
    ("index.docker.io/library/debian:12", ImageReference("docker.io", "library/debian", "12", "")),
    ("nvcr.io/nvidia/pytorch:24.05-py3", ImageReference("nvcr.io", "nvidia/pytorch", "24.05-py3", "")),
    ("localhost:5000/team/base", ImageReference("localhost:5000", "team/base", "latest", "")),
    ("localhost/base:1", ImageReference("localhost", "base", "1", "")),
    ("ghcr.io/org/sub/image:v1@sha256:" + "a" * 64,
     ImageReference("ghcr.io", "org/sub/image", "v1", "sha256:" + "a" * 64)),
    ("ubuntu@sha256:" + "b" * 64, ImageReference("docker.io", "library/ubuntu", "", "sha256:" + "b" * 64)),
])
def test_references_are_read_as_docker_reads_them(written: str, expected: ImageReference) -> None:
    assert parse_reference(written) == expected


@pytest.mark.parametrize("written", ["Python:3", "python:", "python@sha256:short", "a/:1", "ghcr.io/"])
def test_a_reference_docker_refuses_is_refused(written: str) -> None:
    with pytest.raises(ValueError, match="is not a"):
        parse_reference(written)
    assert isinstance(read_image_config(written), ConfigNotRead)


@pytest.mark.parametrize(("host", "local"), [("localhost", True), ("localhost:5000", True), ("127.0.0.1:5000", True),
                                             ("127.3.4.5", True), ("[::1]:5000", True), ("registry-1.docker.io", False),
                                             ("10.0.0.1:5000", False), ("localhost.example.org", False)])
def test_only_registries_on_this_machine_are_read_over_plain_http(host: str, local: bool) -> None:
    assert is_local_host(host) is local


def test_the_config_is_read_through_the_token_flow_and_the_manifest_list(registry: StandinRegistry) -> None:
    image = ngc_like(registry)
    config = read_image_config(f"{registry.host}/nvidia/pytorch:24.05-py3")
    assert isinstance(config, ImageConfig), config
    assert config.working_dir == "/workspace"
    assert config.env == tuple(tuple(item.split("=", 1)) for item in AMD64_ENV)
    assert (config.digest, config.platform) == (image.index_digest, "linux/amd64")
    paths = [path for path, _ in registry.requests]
    assert paths[0] == "/v2/nvidia/pytorch/manifests/24.05-py3"  # first without a token: answered 401
    assert paths[1] == "/token?service=standin&scope=repository%3Anvidia%2Fpytorch%3Apull"
    assert paths[2:] == ["/v2/nvidia/pytorch/manifests/24.05-py3", f"/v2/nvidia/pytorch/manifests/{image.amd64_manifest}",
                         f"/v2/nvidia/pytorch/blobs/{image.config_digests['linux/amd64']}",
                         f"/cdn/{image.config_digests['linux/amd64']}"]
    headers = [found for _, found in registry.requests]
    assert all(h.get("authorization") == f"Bearer {TOKEN}" for h in headers[2:5])
    assert "authorization" not in headers[5], "the token followed the redirect to another place"
    accepted = headers[0]["accept"]
    for media_type in ("application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json",
                       "application/vnd.oci.image.manifest.v1+json", "application/vnd.docker.distribution.manifest.v2+json"):
        assert media_type in accepted


def test_the_platform_the_spec_targets_is_read_and_a_digest_reference_is_checked(registry: StandinRegistry) -> None:
    image = ngc_like(registry)
    arm = read_image_config(f"{registry.host}/nvidia/pytorch:24.05-py3", platform="linux/arm64")
    assert isinstance(arm, ImageConfig)
    assert (arm.working_dir, arm.platform, dict(arm.env)["CUDA_HOME"]) == ("/workspace-arm", "linux/arm64",
                                                                           "/usr/local/cuda-arm")
    pinned = read_image_config(f"{registry.host}/nvidia/pytorch@{image.index_digest}")
    assert isinstance(pinned, ImageConfig) and pinned.working_dir == "/workspace"
    missing = read_image_config(f"{registry.host}/nvidia/pytorch:24.05-py3", platform="linux/s390x")
    assert missing == ConfigNotRead(f"{registry.host}/nvidia/pytorch:24.05-py3 has no linux/s390x image (it has: "
                                    "linux/amd64, linux/arm64)", "use an image built for the platform the spec's "
                                    "system runs on")


def test_an_unknown_image_says_so_with_the_registrys_error(registry: StandinRegistry) -> None:
    ngc_like(registry)
    for reference in ("nvidia/pytorch:99.99", "nvidia/missing:1"):
        result = read_image_config(f"{registry.host}/{reference}")
        assert result == ConfigNotRead(f"{registry.host} has no image {reference} (404: MANIFEST_UNKNOWN manifest "
                                       "unknown)", "check the image name and tag in FROM (import reads the config of "
                                       "the image the file names)")


def test_an_answer_changed_on_its_way_or_too_large_is_not_used(registry: StandinRegistry,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    image = ngc_like(registry)
    config_digest = image.config_digests["linux/amd64"]
    original = registry.blobs[config_digest]
    registry.blobs[config_digest] = original.replace(b"/workspace", b"/elsewhere")
    changed = read_image_config(f"{registry.host}/nvidia/pytorch:24.05-py3")
    assert isinstance(changed, ConfigNotRead)
    assert changed.why == f"the config {config_digest} of {registry.host}/nvidia/pytorch:24.05-py3 does not have its " \
                          "digest: the answer was changed on its way"
    registry.blobs[config_digest] = original
    monkeypatch.setattr(registryconfig, "MANIFEST_LIMIT", 64)
    large = read_image_config(f"{registry.host}/nvidia/pytorch:24.05-py3")
    assert isinstance(large, ConfigNotRead) and "is larger than" in large.why


def test_an_image_that_wants_a_login_is_not_read(registry: StandinRegistry) -> None:
    registry.add_image("private/image", "1", {"linux/amd64": {"Env": []}})
    registry.private.add("private/image")
    result = read_image_config(f"{registry.host}/private/image:1")
    assert result == ConfigNotRead(f"{registry.host} gave no anonymous token for private/image (401 Unauthorized): the "
                                   "image needs a login", "write the base's WORKDIR and ENV values into the file "
                                   "(import reads no credentials; envbuild import --offline skips the reading)")


def test_a_registry_that_never_answers_is_given_up_within_the_timeout() -> None:
    """The wait is idle, so the bound holds on a loaded machine too; the margin is for a slow thread start."""
    with silent_listener() as host:
        started = time.monotonic()
        result = read_image_config(f"{host}/team/base:1", timeout_s=1.0)
        elapsed = time.monotonic() - started
    assert result == ConfigNotRead(f"could not reach {host}: no answer within 1 s",
                                   f"import where {host} is reachable (a proxy: HTTPS_PROXY; a site's CA: "
                                   "SSL_CERT_FILE), or write the base's WORKDIR and ENV values into the file "
                                   "(envbuild import --offline skips the reading)")
    assert 0.9 <= elapsed < 6.0, elapsed


def test_the_proxy_of_the_environment_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """HTTPS_PROXY pointing at a port nothing listens on: docker.io is asked through it, and refused there."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    for name in ("HTTPS_PROXY", "https_proxy"):
        monkeypatch.setenv(name, f"http://user:secret@127.0.0.1:{closed}")
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    started = time.monotonic()
    result = read_image_config("python:3.11")
    assert time.monotonic() - started < 6.0
    assert isinstance(result, ConfigNotRead)
    assert result.why == f"could not reach registry-1.docker.io through the proxy http://127.0.0.1:{closed}: " \
                         "connection refused"
    monkeypatch.setenv("NO_PROXY", "docker.io")  # the proxy is not used for what NO_PROXY names
    bypassed = read_image_config("python:3.11")
    assert isinstance(bypassed, ConfigNotRead) and "through the proxy" not in bypassed.why


def test_the_ca_bundle_of_the_environment_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """REQUESTS_CA_BUNDLE is read before anything is asked: one that holds no certificate is reported as such."""
    bundle = tmp_path / "site-ca.pem"
    bundle.write_text("not a certificate\n")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(bundle))
    result = read_image_config("ghcr.io/org/image:1")
    assert isinstance(result, ConfigNotRead)
    assert result.why.startswith(f"the CA bundle {bundle} of REQUESTS_CA_BUNDLE cannot be used ("), result
    assert result.fix == "point REQUESTS_CA_BUNDLE at a PEM file of CA certificates, or unset it"


@pytest.mark.network
def test_docker_hub_is_read_or_its_absence_said_quickly() -> None:
    """Here (no Docker Hub) the answer is that it could not be reached, within the timeout; where Docker Hub
    answers, the official python image's config is read."""
    started = time.monotonic()
    result = read_image_config("python:3.11-slim")
    elapsed = time.monotonic() - started
    assert elapsed < registryconfig.TIMEOUT_S + 5.0, elapsed
    if isinstance(result, ConfigNotRead):
        assert result.why.startswith("could not reach registry-1.docker.io: "), result
        assert "import where registry-1.docker.io is reachable" in result.fix
    else:
        assert dict(result.env)["PYTHON_VERSION"].startswith("3.11"), json.dumps(result.env)
