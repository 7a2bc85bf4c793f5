"""Synthetic image trees laid out like real ML images, for the inventory tests.

`lay_out(root, variant)` writes a root file system with
  /opt/miniconda3               conda base (conda-meta, lib/python3.12/site-packages, pkgs/ cache to ignore)
  /opt/miniconda3/envs/pytorch  conda env as in LUMI's images (conda packages and pip distributions)
  /opt/cotainr/conda            conda prefix as cotainr builds it
  /opt/venv                     a venv (pyvenv.cfg, lib64 -> lib), with a multi-block METADATA and a long header
  /usr, /usr/local              system python site directories
plus decoys that must not be listed (vendored dist-info, conda's package cache, documentation), a
dist-info without METADATA, /.singularity.d files and an embedded /.envbuild spec and lock.
It returns the packages it laid out: the ground truth the reader is checked against.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

Expected = set[tuple[str, str, str, str]]  # (environment, name, version, source)


def _write(path: Path, text: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)


def metadata(name: str, version: str, *, extra_header: str = "", body: str = "") -> str:
    return f"Metadata-Version: 2.1\n{extra_header}Name: {name}\nVersion: {version}\nSummary: test\n\n{body}"


def dist_info(site: Path, name: str, version: str, expected: Expected, env: str, **kwargs: str) -> None:
    directory = site / f"{name.replace('-', '_')}-{version}.dist-info"
    _write(directory / "METADATA", metadata(name, version, **kwargs))
    _write(directory / "RECORD", f"{name}/__init__.py,,\n")
    _write(directory / "INSTALLER", "pip\n")
    (site / name.replace("-", "_")).mkdir(parents=True, exist_ok=True)
    expected.add((env, name, version, "pip"))


def conda_record(prefix: Path, name: str, version: str, build: str, expected: Expected, env: str,
                 filename: str | None = None) -> None:
    record = {"name": name, "version": version, "build": build, "build_number": 0, "channel": "defaults",
              "files": [f"lib/{name}/file{i}" for i in range(50)], "depends": []}
    _write(prefix / "conda-meta" / (filename or f"{name}-{version}-{build}.json"), json.dumps(record, indent=1))
    expected.add((env, name, version, "conda"))


def lay_out(root: Path, variant: str = "a") -> Expected:
    """Write the tree under `root`; variant "b" upgrades torch, drops lightning, adds accelerate,
    changes a variable and a label (for diff)."""
    expected: Expected = set()
    conda = root / "opt/miniconda3"
    base = "/opt/miniconda3"
    conda_record(conda, "python", "3.12.4", "h5148396_1", expected, base)
    conda_record(conda, "conda", "24.5.0", "py312h06a4308_0", expected, base)
    conda_record(conda, "pip", "24.0", "py312h06a4308_0", expected, base)
    conda_record(conda, "ca-certificates", "2024.3.11", "h06a4308_0", expected, base, filename="ca_certificates.json")
    _write(conda / "conda-meta/history", "==> 2024-06-01 <==\n")
    site = conda / "lib/python3.12/site-packages"
    dist_info(site, "conda", "24.5.0", expected, base)
    dist_info(site, "pip", "24.0", expected, base)
    dist_info(site / "pip/_vendor", "packaging", "21.3", set(), base)  # vendored: not installed
    (site / "__pycache__").mkdir(parents=True, exist_ok=True)
    _write(conda / "lib/python3.12/encodings/__init__.py", "")
    # conda's package cache: unpacked, not installed
    cached = conda / "pkgs/pytorch-2.2.0-py3.10_0"
    _write(cached / "info/index.json", json.dumps({"name": "pytorch", "version": "2.2.0"}))
    dist_info(cached / "lib/python3.10/site-packages", "torch", "2.2.0", set(), base)
    _write(conda / "bin/conda", "#!/bin/sh\n")
    _write(conda / "share/doc/x/site-packages/decoy-1.0.dist-info/METADATA", metadata("decoy", "1.0"))

    env = conda / "envs/pytorch"
    env_name = "/opt/miniconda3/envs/pytorch"
    torch = "2.3.0" if variant == "a" else "2.4.0"
    conda_record(env, "python", "3.10.14", "h955ad1f_1", expected, env_name)
    conda_record(env, "numpy", "1.26.4", "py310h5f9d8c6_0", expected, env_name)
    conda_record(env, "pytorch", torch, "py3.10_rocm5.7_0", expected, env_name)
    site = env / "lib/python3.10/site-packages"
    dist_info(site, "numpy", "1.26.4", expected, env_name)
    dist_info(site, "torch", f"{torch}+rocm5.7", expected, env_name)
    if variant == "a":
        dist_info(site, "lightning", "2.2.5", expected, env_name)
    else:
        dist_info(site, "accelerate", "0.31.0", expected, env_name)
    _write(site / "Foo_Bar-1.0-py3.10.egg-info/PKG-INFO", metadata("Foo-Bar", "1.0"))
    expected.add((env_name, "Foo-Bar", "1.0", "pip"))
    _write(site / "legacy_pkg-0.3-py3.10.egg-info", metadata("legacy-pkg", "0.3"))
    expected.add((env_name, "legacy-pkg", "0.3", "pip"))
    (site / "broken-1.0.dist-info").mkdir(parents=True)  # no METADATA: reported as a problem, not listed
    _write(site / "broken-1.0.dist-info/RECORD", "")

    cotainr = root / "opt/cotainr/conda"
    conda_record(cotainr, "python", "3.11.9", "h955ad1f_0", expected, "/opt/cotainr/conda")
    dist_info(cotainr / "lib/python3.11/site-packages", "mpi4py", "3.1.6", expected, "/opt/cotainr/conda")

    venv = root / "opt/venv"
    _write(venv / "pyvenv.cfg", "home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.11.2\n")
    os.symlink("lib", venv / "lib64")
    _write(venv / "bin/python", "")
    site = venv / "lib/python3.11/site-packages"
    dist_info(site, "requests", "2.32.3", expected, "/opt/venv")
    # Bigger than two 128 KiB blocks, so it is stored in data blocks, not a fragment.
    dist_info(site, "big-meta", "1.0", expected, "/opt/venv", body="x" * 300_000 + "\n")
    # Version comes after 10 KiB of header: the reader must ask for more than its first 8 KiB.
    dist_info(site, "long-header", "2.0", expected, "/opt/venv",
              extra_header="".join(f"Classifier: Topic :: Number {i:05d}\n" for i in range(400)))

    system_site = root / "usr/lib/python3/dist-packages"
    dist_info(system_site, "six", "1.16.0", expected, "/usr")
    _write(root / "usr/lib/python3.11/os.py", "")
    _write(root / "usr/lib/python3.11/encodings/__init__.py", "")
    dist_info(root / "usr/local/lib/python3.11/dist-packages", "wheel", "0.43.0", expected, "/usr/local")
    _write(root / "usr/share/doc/python3/decoy-2.0.dist-info/METADATA", metadata("decoy", "2.0"))

    foo = "bar" if variant == "a" else "baz"
    _write(root / ".singularity.d/env/90-environment.sh",
           f"#!/bin/sh\nexport FOO={foo}\nexport WITH_CONDA='source /opt/miniconda3/bin/activate pytorch'\n"
           "export SPACED=\"two words\"\n")
    _write(root / ".singularity.d/labels.json", json.dumps({"team": "tests", "variant": variant}))
    _write(root / ".singularity.d/runscript", "#!/bin/sh\nexec python \"$@\"\n")
    _write(root / ".envbuild/spec.yaml", f"name: inventory-{variant}\nsystem: local\n")
    _write(root / ".envbuild/lock", "torch==2.3.0\n")
    return expected


HOST_TOOLS = ("sh", "find", "sed", "cat", "true")


def install_host_tools(root: Path, tools: tuple[str, ...] = HOST_TOOLS) -> None:
    """Copy host programs and the shared libraries they load into the tree, so that `apptainer exec`
    (whose action scripts need /bin/sh) and the --via-runtime listing script run inside it."""
    libraries: set[str] = set()
    for tool in tools:
        source = shutil.which(tool)
        assert source, f"{tool} not found on the host"
        source = os.path.realpath(source)
        target = root / "bin" / tool
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
        out = subprocess.run(["ldd", source], capture_output=True, text=True).stdout
        for line in out.splitlines():
            words = line.split()
            paths = [w for w in words if w.startswith("/")]
            libraries.update(paths[:1])
    for library in libraries:
        target = root / library.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(os.path.realpath(library), target)


def build_sif(root: Path, image: Path, compression: str = "gzip") -> Path:
    """`apptainer build` the tree into a SIF with the given squashfs compression."""
    command = ["apptainer", "build", "--force"]
    if compression != "gzip":
        command += ["--mksquashfs-args", f"-comp {compression}"]
    result = subprocess.run([*command, str(image), str(root)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    return image


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "inventory"


def cache_env(tmp_path: Path) -> dict[str, str]:
    """Variables that keep a command's caches in `tmp_path`: the store, and the user's own cache
    ($XDG_CACHE_HOME/envrun), where the inventory cache is."""
    return {"ENVBUILD_CACHE_DIR": str(tmp_path / "cache"), "XDG_CACHE_HOME": str(tmp_path / "xdg")}


def inventory_cache_entries(env: dict[str, str]) -> list[Path]:
    """The inventory cache's files under the XDG_CACHE_HOME of `env` (envbuild.inventory.inventorycache)."""
    return sorted((Path(env["XDG_CACHE_HOME"]) / "envrun").glob("inventory-*"))
FIXTURE_COMPRESSIONS = ("gzip", "zstd")


def fixture_image(compression: str) -> Path:
    """A committed SIF of `lay_out(root, "a")`, so the reader is tested where apptainer is not installed."""
    return FIXTURES / f"layout-a.{compression}.sif"


def regenerate_fixtures(work: Path) -> None:
    """Rebuild the committed fixtures after changing lay_out: `.venv/bin/python -m tests.support.inventory_layout`."""
    root = work / "layout-a"
    lay_out(root, "a")
    FIXTURES.mkdir(parents=True, exist_ok=True)
    for compression in FIXTURE_COMPRESSIONS:
        build_sif(root, fixture_image(compression), compression)


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        regenerate_fixtures(Path(scratch))
    for compression in FIXTURE_COMPRESSIONS:
        print(fixture_image(compression), fixture_image(compression).stat().st_size)
