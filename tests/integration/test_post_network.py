"""A real build whose post commands run `python3 -m pip download` and `pip install` of a small PyPI package
(six) with nothing but the host's pip configuration to find it: `no-index` and a find-links directory of the
host (which the sandbox sees only when it is bound in), a CA bundle of the host's and a proxy with a password.
They succeed only when the build hands them the settings its own installs get; then the image, its SIF
metadata (labels, definition) and the build log are searched for the settings' values: none is there."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.conftest import REPO, seeded_store

pytestmark = [pytest.mark.apptainer, pytest.mark.slow, pytest.mark.network]
ENVBUILD = str(REPO / "bin/envbuild")

SPEC = """\
name: post-network
system: local
base: debootstrap:bookworm
post:
  - test "$PIP_NO_INDEX" = 1 && python3 -m pip download --no-deps -d /tmp/post-dl six && ls /tmp/post-dl | grep -q '^six-'
  - python3 -m pip install --no-deps six && rm -rf /tmp/post-dl
tests:
  - python3 -c 'import six'
"""

# The host's own package settings, replaced by the test's (a variable wins over pip.conf).
HOST_SETTINGS = ("PIP_", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE", "CURL_CA_BUNDLE", "http_proxy", "https_proxy", "no_proxy",
                 "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "all_proxy")


def test_post_pip_reaches_the_hosts_sources_and_leaves_nothing_of_them_in_the_image(tmp_path: Path, build_cache: Path) -> None:
    canary = f"canary{uuid.uuid4().hex[:12]}"
    wheels = tmp_path / f"wheels-{canary}"
    downloaded = subprocess.run(["python3", "-m", "pip", "download", "--no-deps", "-d", str(wheels), "six"],
                                capture_output=True, text=True, timeout=300)
    assert downloaded.returncode == 0, downloaded.stderr  # the host's own pip, with the host's own configuration
    bundle = tmp_path / f"ca-{canary}.pem"
    bundle.write_bytes(Path("/etc/ssl/certs/ca-certificates.crt").read_bytes())
    pip_conf = tmp_path / "pip.conf"
    pip_conf.write_text(f"[global]\nno-index = true\nfind-links = {wheels}\ncert = {bundle}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(HOST_SETTINGS)}
    # Nothing here reaches the network: the proxy (refusing on port 9) is there to be carried, never used.
    env.update(PIP_CONFIG_FILE=str(pip_conf), https_proxy=f"http://user:{canary}pw@127.0.0.1:9", no_proxy="*",
               ENVBUILD_CACHE_DIR=str(seeded_store(tmp_path / "store", build_cache, uv_cache=False)))
    spec = tmp_path / "post-network.yaml"
    spec.write_text(SPEC)
    image = tmp_path / "out" / "post-network.sif"
    result = subprocess.run([ENVBUILD, "build", str(spec), "-o", str(image), "--compression", "lz4"],
                            capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]

    found = subprocess.run(["apptainer", "exec", "--contain", "--cleanenv", str(image), "grep", "-rlI", "-e", canary,
                            "--exclude-dir=proc", "--exclude-dir=sys", "--exclude-dir=dev", "/"],
                           capture_output=True, text=True, timeout=300)
    assert found.returncode == 1 and not found.stdout, found.stdout + found.stderr  # 1: grep found nothing
    listing = subprocess.run(["apptainer", "exec", "--contain", str(image), "ls", "-a", "/"], capture_output=True, text=True,
                             timeout=60)
    assert ".envbuild-host" not in listing.stdout.split()
    # The SIF's own metadata (labels, definition, environment) is stored uncompressed: searched as bytes.
    assert canary.encode() not in image.read_bytes()
    inspected = subprocess.run(["apptainer", "inspect", "--all", str(image)], capture_output=True, text=True, timeout=60)
    assert inspected.returncode == 0 and canary not in inspected.stdout
    log = image.with_name(image.name + ".build.log").read_text()
    assert f"{canary}pw" not in log and f"{canary}pw" not in result.stdout + result.stderr
