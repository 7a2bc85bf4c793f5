"""A shared store against the real tools: a build records its image's and its env layer's digests, a tampered
image and env layer in a group-writable store are not used but built again, and the store then verifies clean."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from envbuild.store.layout import kind_dir

# the fixture `store` (a fresh store seeded from the shared test cache) and how envbuild is run against it
from tests.integration.test_build_store import envbuild, store  # noqa: F401
from tests.store.test_integrity import share

pytestmark = [pytest.mark.apptainer]
SPEC = """\
name: tiny
system: local
base: debootstrap:bookworm
python:
  packages:
    - six
tests:
  - python -c "import six"
"""


def test_a_tampered_image_in_a_group_writable_store_is_built_again(tmp_path: Path, store: Path) -> None:  # noqa: F811
    spec, output = tmp_path / "tiny.yaml", tmp_path / "out" / "tiny.sif"
    spec.write_text(SPEC)
    first = envbuild(["build", str(spec), "-o", str(output), "--compression", "zstd"], store)
    assert first.returncode == 0, first.stderr[-4000:]
    (entry,) = kind_dir(store, "image").iterdir()
    record = json.loads((entry / "content.json").read_text())
    assert record["files"]["image.sif"]["size"] == (entry / "image.sif").stat().st_size == output.stat().st_size

    for directory in (store, *store.glob("*"), *store.glob("*/*")):
        if directory.is_dir() and not directory.is_symlink():
            share(directory)  # as a project's group shares it
    data = bytearray((entry / "image.sif").read_bytes())
    data[-1] ^= 0xFF  # same size: only the hash tells
    (entry / "image.sif").write_bytes(bytes(data))
    # And a file of the env layer the image was made from: the installer's copy of six, replaced (renamed
    # over, never written through: the layer's other files are hard links into the shared test cache).
    (env,) = kind_dir(store, "env").iterdir()
    (six,) = env.glob("rootfs/opt/envbuild/venv/lib/python3*/site-packages/six.py")
    text = six.read_text()
    (six.parent / "six.py.new").write_text(text.replace("import", "imp0rt", 1))
    (six.parent / "six.py.new").replace(six)
    verify = envbuild(["cache", "verify"], store)
    assert verify.returncode == 1 and f"MISMATCH    image/{entry.name}" in verify.stdout, verify.stdout
    assert f"MISMATCH    env/{env.name}  rootfs has sha256:" in verify.stdout, verify.stdout

    output.unlink()
    again = envbuild(["build", str(spec), "-o", str(output), "--compression", "zstd"], store)
    assert again.returncode == 0, again.stderr[-4000:]
    assert f"warning: image entry {entry.name} in the store {store} does not match its content record" in again.stderr
    assert f"warning: env entry {env.name} in the store {store} does not match its content record" in again.stderr
    env_lines = [line for line in again.stderr.splitlines() if "Python env layer" in line]
    assert env_lines and not any(line.endswith(": cached") for line in env_lines), "the env layer is built again"
    assert six.read_text() == text
    assert "taken from the store" not in again.stderr and "[build" in again.stderr
    assert output.read_bytes() == (entry / "image.sif").read_bytes() != bytes(data)
    run = subprocess.run(["apptainer", "exec", str(output), "python", "-c", "import six"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    verify = envbuild(["cache", "verify"], store)
    assert verify.returncode == 0, verify.stdout + verify.stderr
