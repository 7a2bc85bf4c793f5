"""The image inventory on SIFs that apptainer builds here: the synthetic ML layout in every squashfs
compression, the --via-runtime path against the direct reader, and a real envbuild image whose
packages are checked against `pip list` and importlib.metadata run inside it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from envbuild.inventory.image import read_inventory
from envbuild.inventory.pyenvs import Inventory
from envbuild.inventory.via_runtime import read_inventory_via_runtime
from envbuild.shared.errors import ImageFormatError
from tests.conftest import REPO, run_cli
from tests.support.inventory_layout import build_sif, install_host_tools, lay_out

pytestmark = pytest.mark.apptainer
ENVBUILD = str(REPO / "bin" / "envbuild")
COMPRESSIONS = ("gzip", "zstd", "xz", "lz4")

PYTHON_SPEC = """\
name: inventory-python
system: local
base: debootstrap:bookworm
python:
  packages: [six==1.16.0]
labels:
  team: inventory-tests
"""


def as_set(inventory: Inventory) -> set[tuple[str, str, str, str]]:
    return {(p.environment, p.name, p.version, p.source) for p in inventory.packages}


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Path], set[tuple[str, str, str, str]]]:
    """Layout "a" (with a shell, find and sed from the host, so it can be started) in each compression."""
    work = tmp_path_factory.mktemp("synthetic")
    root = work / "root-a"
    expected = lay_out(root, "a")
    install_host_tools(root)
    images = {c: build_sif(root, work / f"a-{c}.sif", c) for c in COMPRESSIONS}
    return images, expected


@pytest.fixture(scope="module")
def python_image(tmp_path_factory: pytest.TempPathFactory, build_cache: Path) -> tuple[Path, Path]:
    """A real image with Debian's python3 and envbuild's venv, built by envbuild (base cached)."""
    work = tmp_path_factory.mktemp("pyimage")
    spec = work / "inventory-python.yaml"
    spec.write_text(PYTHON_SPEC)
    image = work / "inventory-python.sif"
    result = run_cli([ENVBUILD, "build", str(spec), "-o", str(image)], env_extra={"ENVBUILD_CACHE_DIR": str(build_cache)})
    assert result.returncode == 0, result.stdout + result.stderr
    return spec, image


def exec_json(image: Path, *command: str) -> object:
    result = subprocess.run(["apptainer", "exec", "--contain", str(image), *command], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_every_compression_lists_exactly_what_was_laid_out(synthetic, compression: str) -> None:
    images, expected = synthetic
    inventory = read_inventory(str(images[compression]))
    assert as_set(inventory) == expected
    result = run_cli([ENVBUILD, "inspect", "--json", "--no-cache", str(images[compression])])
    assert json.loads(result.stdout)["objects"][-1]["compression"] == compression


def test_via_runtime_gives_the_same_rows_on_the_conda_layout(synthetic) -> None:
    images, expected = synthetic
    assert as_set(read_inventory_via_runtime(str(images["gzip"]))) == expected
    direct = run_cli([ENVBUILD, "packages", "--no-cache", str(images["zstd"])])
    started = run_cli([ENVBUILD, "packages", "--via-runtime", str(images["zstd"])])
    assert started.returncode == 0, started.stderr
    assert started.stdout == direct.stdout


def test_an_embedded_overlay_is_pointed_out(synthetic, tmp_path: Path) -> None:
    images, expected = synthetic
    image = tmp_path / "with-overlay.sif"
    image.write_bytes(images["gzip"].read_bytes())
    created = subprocess.run(["apptainer", "overlay", "create", "--sparse", "--size", "64", str(image)], capture_output=True, text=True)
    assert created.returncode == 0, created.stderr
    inventory = read_inventory(str(image))
    assert as_set(inventory) == expected
    assert any("overlay" in p.path and "--via-runtime" in p.message for p in inventory.problems)


def test_via_runtime_on_an_image_without_a_shell(tmp_path: Path) -> None:
    root = tmp_path / "root"
    lay_out(root, "b")
    image = build_sif(root, tmp_path / "noshell.sif")
    with pytest.raises(ImageFormatError) as caught:
        read_inventory_via_runtime(str(image))
    assert "exec failed" in caught.value.message and str(image) in caught.value.message


def test_real_python_image_matches_pip_list_and_importlib(python_image) -> None:
    spec, image = python_image
    inventory = read_inventory(str(image))
    rows = as_set(inventory)
    # the venv, as its own pip sees it
    pip_list = exec_json(image, "/opt/envbuild/venv/bin/python", "-m", "pip", "list", "--format", "json")
    assert {(d["name"].lower(), d["version"]) for d in pip_list} == {
        (name.lower(), version) for env, name, version, _ in rows if env == "/opt/envbuild/venv"}
    assert ("/opt/envbuild/venv", "six", "1.16.0", "pip") in rows
    # Debian's python3: every distribution on its sys.path, from /usr and /usr/local
    script = "import importlib.metadata as m, json; print(json.dumps(sorted((d.metadata['Name'], d.version) for d in m.distributions())))"
    system = exec_json(image, "/usr/bin/python3", "-c", script)
    assert {tuple(d) for d in system} == {(name, version) for env, name, version, _ in rows if env in ("/usr", "/usr/local")}
    kinds = {e.prefix: e.kind for e in inventory.environments}
    assert kinds["/opt/envbuild/venv"] == "venv" and kinds["/usr"] == "system"
    # the runtime's view is the same
    assert as_set(read_inventory_via_runtime(str(image))) == rows
    # inspect finds what envbuild embedded
    shown = json.loads(run_cli([ENVBUILD, "inspect", "--json", str(image)]).stdout)
    assert shown["envbuild"]["spec"] == spec.read_text()
    assert shown["labels"]["team"] == "inventory-tests" and shown["labels"]["org.envbuild.spec-name"] == "inventory-python"
    assert "VIRTUAL_ENV" in shown["environment"] and "90-envbuild.sh" in shown["env_scripts"]
    assert shown["envbuild"]["build_record"]["venv"] == "/opt/envbuild/venv"


def test_diff_between_built_images(synthetic, tmp_path: Path) -> None:
    images, _ = synthetic
    root_b = tmp_path / "root-b"
    lay_out(root_b, "b")
    image_b = build_sif(root_b, tmp_path / "b.sif", "xz")
    result = run_cli([ENVBUILD, "diff", str(images["gzip"]), str(image_b)], env_extra={"ENVBUILD_CACHE_DIR": str(tmp_path / "c")})
    assert result.returncode == 0, result.stderr
    assert "  ~ torch (pip) 2.3.0+rocm5.7 -> 2.4.0+rocm5.7" in result.stdout
    assert "  + accelerate (pip) 0.31.0" in result.stdout
    assert "  ~ FOO bar -> baz" in result.stdout and "  ~ variant a -> b" in result.stdout


@pytest.mark.slow
def test_reference_image_matches_pip_list(reference_image: Path) -> None:
    """The session's reference image (tests/conftest.py builds it, or finds it up to date in the store)."""
    rows = as_set(read_inventory(str(reference_image)))
    pip_list = exec_json(reference_image, "/opt/envbuild/venv/bin/python", "-m", "pip", "list", "--format", "json")
    assert {(d["name"].lower(), d["version"]) for d in pip_list} == {
        (name.lower(), version) for env, name, version, _ in rows if env == "/opt/envbuild/venv"}
    assert {"torch", "transformers", "lightning"} <= {name for _, name, _, _ in rows}
