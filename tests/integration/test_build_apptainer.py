"""Real builds with apptainer: a small image end to end, failures that lose nothing, the cache."""

from __future__ import annotations

import json
import os
import re
import subprocess
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from envbuild.store.layout import kind_dir
from tests.conftest import REPO, run_cli

pytestmark = pytest.mark.apptainer
ENVBUILD = str(REPO / "bin" / "envbuild")

SMALL_SPEC = """\
name: small
system: local
base: debootstrap:bookworm
python:
  packages: [six==1.16.0]
env:
  GREETING: "hello; $HOME stays literal"
labels:
  team: tests
  run: "{run}"   # unique per test run: the shared store must not already hold this image
files:
  - {src: data/hello.txt, dest: /opt/data/hello.txt, mode: '0600'}
post:
  - echo built > /opt/data/post-marker
tests:
  - python -c "import six; assert six.__version__ == '1.16.0'"
  - test -f /opt/data/hello.txt
"""


USERS_OWN_PIP = "#!/bin/sh\necho my own pip\n"


def exec_in(image: Path, *command: str) -> str:
    result = subprocess.run(["apptainer", "exec", str(image), *command], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def small_image(tmp_path_factory: pytest.TempPathFactory, build_cache: Path
                ) -> Iterator[tuple[Path, Path, subprocess.CompletedProcess[str]]]:
    work = tmp_path_factory.mktemp("small")
    (work / "data").mkdir()
    (work / "data" / "hello.txt").write_text("hello from the host\n")
    spec = work / "small.yaml"
    spec.write_text(SMALL_SPEC.replace("{run}", uuid.uuid4().hex))
    image = work / "out" / "small.sif"
    # a script of the user's own where the wrappers go: the build must leave it alone
    (work / "out" / "bin").mkdir(parents=True)
    (work / "out" / "bin" / "pip").write_text(USERS_OWN_PIP)
    started = time.time()
    # --full: a whole squash, whatever image of the same env layer an interrupted earlier run left in the store
    result = run_cli([ENVBUILD, "build", str(spec), "-o", str(image), "--full"],
                     env_extra={"ENVBUILD_CACHE_DIR": str(build_cache)})
    assert result.returncode == 0, result.stdout + result.stderr
    yield spec, image, result
    # Each run's spec is new (the {run} id), so its image entry would pile up in the shared test cache
    # (one per CI run): remove what this run made.
    for entry in kind_dir(build_cache, "image").glob("small-*"):
        if (entry / "complete").exists() and (entry / "complete").stat().st_mtime >= started:
            run_cli([ENVBUILD, "cache", "rm", f"image/{entry.name}"], env_extra={"ENVBUILD_CACHE_DIR": str(build_cache)})


def test_small_image_contents(small_image) -> None:
    spec, image, result = small_image
    assert image.is_file()
    assert re.search(r"\[build \d+/\d+\] write the image \(gzip:6\) into the store: done in", result.stderr)
    assert exec_in(image, "python", "-c", "import six, sys; print(six.__version__, sys.prefix)").split() == [
        "1.16.0", "/opt/envbuild/venv"]
    assert exec_in(image, "sh", "-c", 'printf %s "$GREETING"') == "hello; $HOME stays literal"
    assert exec_in(image, "sh", "-c", "echo $PATH").strip().split(":")[:2] == ["/opt/envbuild/venv/bin", "/usr/local/sbin"]
    assert exec_in(image, "cat", "/opt/data/hello.txt") == "hello from the host\n"
    assert exec_in(image, "stat", "-c", "%a", "/opt/data/hello.txt").strip() == "600"
    assert exec_in(image, "cat", "/opt/data/post-marker") == "built\n"
    assert exec_in(image, "cat", "/.envbuild/spec.yaml") == spec.read_text()
    assert "six==1.16.0" in exec_in(image, "cat", "/.envbuild/pip-freeze.txt").split()
    # build-time mounts are gone from the image
    assert exec_in(image, "sh", "-c", "test -e /.envbuild-host && echo present || echo absent").strip() == "absent"


def test_small_image_labels(small_image) -> None:
    _, image, _ = small_image
    out = subprocess.run(["apptainer", "inspect", "--json", "--labels", str(image)], capture_output=True, text=True, check=True)
    labels = json.loads(out.stdout)["data"]["attributes"]["labels"]
    assert labels["org.envbuild.spec-name"] == "small"
    assert len(labels["org.envbuild.spec-sha256"]) == 64
    assert labels["team"] == "tests"


def test_log_file_kept(small_image) -> None:
    _, image, _ = small_image
    log = image.with_name("small.sif.build.log")
    assert re.search(r"=== \[base 1/\d+\] debootstrap bookworm", log.read_text())


def test_rebuild_of_an_unchanged_spec_is_a_no_op(small_image, build_cache: Path) -> None:
    spec, image, _ = small_image
    before = image.stat().st_mtime_ns
    result = run_cli([ENVBUILD, "build", str(spec), "-o", str(image)], env_extra={"ENVBUILD_CACHE_DIR": str(build_cache)})
    assert result.returncode == 0, result.stderr
    assert "is up to date" in result.stderr
    assert image.stat().st_mtime_ns == before


def test_failing_spec_test_loses_nothing(small_image, build_cache: Path) -> None:
    spec, image, _ = small_image
    failing = spec.with_name("failing.yaml")
    failing.write_text(SMALL_SPEC.replace("{run}", uuid.uuid4().hex).replace("name: small", "name: failing")
                       + "  - python -c 'raise SystemExit(3)'\n")
    target = image  # an existing, good image at the output path must survive a failed build
    before = target.read_bytes()[:4096], target.stat().st_size
    result = run_cli([ENVBUILD, "build", str(failing), "-o", str(target)], env_extra={"ENVBUILD_CACHE_DIR": str(build_cache)})
    assert result.returncode == 1
    assert "error: step 'test' failed: apptainer exited with status 3" in result.stderr
    assert "Traceback" not in result.stderr
    assert (target.read_bytes()[:4096], target.stat().st_size) == before
    assert not list(target.parent.glob("*.partial-*"))
    assert not list(kind_dir(build_cache, "work").glob("failing-*")), "work directory left behind"
    assert not [p for p in kind_dir(build_cache, "image").glob("failing-*") if (p / "complete").exists()], "a failed image was stored"


def test_dry_run_runs_nothing(tmp_path: Path) -> None:
    out = tmp_path / "never.sif"
    result = run_cli([ENVBUILD, "build", str(REPO / "envs/lumi-pytorch.yaml"), "--dry-run", "-o", str(out)])
    assert result.returncode == 0, result.stderr
    assert "apptainer build --force --sandbox" in result.stdout
    assert "docker://lumiaifactory/lumi-multitorch:torch-u24r70f21m50t210-" in result.stdout
    assert not out.exists()
    wheels = run_cli([ENVBUILD, "build", str(REPO / "envs/lumi-pytorch-rocm-wheels.yaml"), "--dry-run", "-o", str(out)])
    assert wheels.returncode == 0, wheels.stderr
    assert "--extra-index-url https://download.pytorch.org/whl/rocm7.0" in wheels.stdout
    assert not out.exists()


def test_bad_spec_exit_code_2_without_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(textwrap.dedent("""\
        name: bad
        base: debootstrap:bookworm
        python:
          pytorch: {version: '2.13.0', variant: cuda}
        """))
    result = run_cli([ENVBUILD, "build", str(bad)])
    assert result.returncode == 2
    assert f"{bad}:4:" in result.stderr and "python.pytorch.variant" in result.stderr
    assert "Traceback" not in result.stderr


def test_local_sif_base_layers_on_top(small_image, build_cache: Path, tmp_path: Path) -> None:
    """A .sif base (how LUMI users start from the site's images) is unpacked to a cached sandbox."""
    _, base_image, _ = small_image
    spec = tmp_path / "derived.yaml"
    spec.write_text(textwrap.dedent(f"""\
        name: derived
        base: localimage:{base_image}
        python:
          packages: [idna==3.10]
        tests:
          - python -c "import idna"
        """))
    image = tmp_path / "derived.sif"
    # A store of its own: the base is this run's small image, so its unpacked base, env layer and image
    # (about 800 MB) are new every run and must not pile up in the shared test cache.
    store = tmp_path / "store"
    store.mkdir()
    (store / "uv").symlink_to(build_cache / "uv")
    result = run_cli([ENVBUILD, "build", str(spec), "-o", str(image)], env_extra={"ENVBUILD_CACHE_DIR": str(store)})
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"unpack base localimage:{base_image}" in result.stderr
    assert "reusing the venv /opt/envbuild/venv" in image.with_name("derived.sif.build.log").read_text()
    # the base's files and the new package are both there
    assert exec_in(image, "cat", "/opt/data/post-marker") == "built\n"
    assert exec_in(image, "python", "-c", "import idna, six; print('ok')").strip() == "ok"
    labels = json.loads(subprocess.run(["apptainer", "inspect", "--json", "--labels", str(image)],
                                       capture_output=True, text=True, check=True).stdout)["data"]["attributes"]["labels"]
    assert labels["org.envbuild.spec-name"] == "derived"
    assert labels["team"] == "tests"  # merged from the base image's labels


def test_run_wrappers_exec_into_the_image(small_image, tmp_path: Path) -> None:
    _, image, _ = small_image
    bindir = image.parent / "bin"
    names = set(os.listdir(bindir))
    assert {"python", "python3", "pip"} <= names
    assert (bindir / "pip").read_text() == USERS_OWN_PIP, "a file envbuild did not write was replaced"
    assert "kept existing files" in small_image[2].stderr and "pip" in small_image[2].stderr
    assert not any(n.startswith("activate") for n in names)
    (tmp_path / "here.txt").write_text("x")
    result = subprocess.run(
        [str(bindir / "python"), "-c", "import os, six, sys; print(six.__version__, os.getcwd(), os.listdir('.'), sys.argv[1:])",
         "a b", "$HOME", "it's"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"1.16.0 {tmp_path} ['here.txt'] ['a b', '$HOME', \"it's\"]"
    code = "import os; print(os.environ['TOKENIZERS_PARALLELISM'], os.environ['OMP_NUM_THREADS'])"
    env = subprocess.run([str(bindir / "python"), "-c", code],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "3"})
    assert env.stdout.split() == ["false", "3"]
