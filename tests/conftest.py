"""Shared fixtures. Markers (pyproject.toml): apptainer, slurm, slow, network, browser. CI provisions every
tool and runs them all; a missing tool makes the marked tests fail, not skip, unless
ENVBUILD_ALLOW_SKIP=1 is set (for a quick unit-only run on a laptop)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _missing(tool: str) -> bool:
    return shutil.which(tool) is None


# Node states that say the node is gone or refuses jobs. Anything else (idle, mixed, allocated, completing,
# planned, with or without Slurm's suffix flags) takes jobs now or as soon as the running ones end. A list of
# the good states was used before: "completing" had to be added once (seen in 1 of 10 runs of the examples),
# and a CI run on a fresh machine under load failed all 26 later Slurm tests within seconds after the
# crashing-rank test cancelled a step, with slurmctld logging nothing wrong — a transient answer the list did
# not know, or a slurmctld too busy to answer. Hence: reject only the broken states, and wait for a bounded
# time before failing, printing what sinfo said.
_SLURM_BROKEN = ("down", "drained", "draining", "drain", "fail", "failing", "future", "inval", "unknown",
                 "maint", "powered_down", "powering_down", "power_down", "reboot_issued", "reboot_requested")
_SLURM_WAIT_S = float(os.environ.get("ENVBUILD_TEST_SLURM_WAIT", "60"))
_slurm_failed_once = False  # after one full wait in vain, later tests look once more, not for a minute each


def _slurm_answer() -> tuple[bool, str]:
    """(usable, what sinfo said). Usable: sinfo answers and a node is responding and not broken."""
    if _missing("sinfo"):
        return False, "sinfo is not installed"
    try:
        result = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return False, "sinfo did not answer in 20 s"
    said = f"sinfo exit {result.returncode}: {(result.stdout + result.stderr).strip()!r}"
    states = [s.strip().lower() for s in result.stdout.split()]
    usable = [s for s in states if not s.endswith("*") and s.rstrip("~#%$@^!-").split("+")[0] not in _SLURM_BROKEN]
    return result.returncode == 0 and bool(usable), said


def _slurm_up() -> tuple[bool, str]:
    """Wait up to ENVBUILD_TEST_SLURM_WAIT s (60) for a usable node: a node not responding ("*") right after
    a start, or a controller busy saving state, answers within that."""
    global _slurm_failed_once
    wait = 0.0 if _missing("sinfo") or _slurm_failed_once else _SLURM_WAIT_S
    deadline = time.monotonic() + wait
    while True:
        up, said = _slurm_answer()
        if up:
            _slurm_failed_once = False
            return True, said
        if time.monotonic() >= deadline:
            _slurm_failed_once = True
            return False, said
        time.sleep(1)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that really builds (apptainer, in the shared build_cache store) reaches the network: its lock
    resolves from PyPI through the host's pip configuration, and a base the store lacks is debootstrapped from
    the Debian mirror. Marked here from the fixture, so that no such test can forget the marker (the real-uv
    lock tests use the store's uv cache only, offline against the local index: not marked)."""
    for item in items:
        if "build_cache" in getattr(item, "fixturenames", ()) and item.get_closest_marker("apptainer"):
            item.add_marker(pytest.mark.network)


def pytest_runtest_setup(item: pytest.Item) -> None:
    problems = []
    if item.get_closest_marker("apptainer") and _missing("apptainer") and _missing("singularity"):
        problems.append("apptainer is not installed (run provision/install.sh)")
    if item.get_closest_marker("slurm"):
        up, said = _slurm_up()
        if not up:
            problems.append(f"the local Slurm is not up ({said}; waited up to {_SLURM_WAIT_S:.0f} s); "
                            "run provision/cluster.sh start")
    if problems:
        message = "; ".join(problems)
        if os.environ.get("ENVBUILD_ALLOW_SKIP") == "1":
            pytest.skip(message)
        pytest.fail(message, pytrace=False)


@pytest.fixture
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def build_cache() -> Path:
    """A cache shared by the tests that really build (base rootfs, uv cache). Kept between runs
    on purpose: the second CI run on a machine also exercises cache reuse."""
    path = Path(os.environ.get("ENVBUILD_TEST_CACHE", "/var/tmp/envbuild-test-cache"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def seeded_store(root: Path, build_cache: Path, *, uv_cache: bool = True) -> Path:
    """A fresh build store at `root` holding the shared cache's complete debootstrap bases, hard-linked (nothing
    is debootstrapped twice), and with `uv_cache` the shared uv download cache, linked."""
    from envbuild.store.layout import kind_dir

    kind_dir(root, "base").mkdir(parents=True)
    shared = kind_dir(build_cache, "base")
    for entry in sorted(shared.glob("debootstrap-bookworm-*")) if shared.is_dir() else []:
        if (entry / "complete").exists():
            subprocess.run(["cp", "-al", str(entry), str(kind_dir(root, "base") / entry.name)], check=True)
    if uv_cache:
        (build_cache / "uv").mkdir(exist_ok=True)
        (root / "uv").symlink_to(build_cache / "uv")
    return root


def run_cli(args: list[str], *, env_extra: dict[str, str] | None = None, timeout: int = 1800,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run bin/envbuild or bin/envrun as a user would, capturing output."""
    env = dict(os.environ)
    env.update(env_extra or {})
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd or REPO)


@pytest.fixture(scope="session")
def reference_image(tmp_path_factory: pytest.TempPathFactory, build_cache: Path) -> Path:
    """The reference image built from envs/local-cpu-pytorch.yaml, once per test session: --full, so that it is
    one squashfs whatever images the shared store already holds (a default build may layer over one)."""
    image = tmp_path_factory.mktemp("reference") / "local-cpu-pytorch.sif"
    result = run_cli([str(REPO / "bin/envbuild"), "build", str(REPO / "envs/local-cpu-pytorch.yaml"), "-o", str(image), "--full"],
                     env_extra={"ENVBUILD_CACHE_DIR": str(build_cache)}, timeout=2400)
    assert result.returncode == 0, result.stdout + result.stderr[-5000:]
    return image


@pytest.fixture(scope="session")
def debootstrap_base(tmp_path_factory: pytest.TempPathFactory, build_cache: Path) -> Path:
    """The root filesystem of the debootstrap:bookworm base in the shared test store, made by envbuild's
    own base steps when it is not there yet (the same entry the reference build uses; a complete one
    is reused as is). Needs apptainer and debootstrap like any build: a missing tool fails the test."""
    import io

    from envbuild.builder.execute.executor import BuildExecutor
    from envbuild.builder.plan.imageplan import plan_base
    from envbuild.builder.sessions.buildrequest import BuildOptions, make_request
    from envbuild.envspec.loadspec import load_spec
    from envbuild.host.buildhost import gather_host_facts

    loaded = load_spec(REPO / "envs/local-cpu-pytorch.yaml")
    facts = gather_host_facts(cache_dir=build_cache)
    work = tmp_path_factory.mktemp("debootstrap-base")
    base = plan_base(make_request(loaded, BuildOptions(output=work / "unused.sif"), facts, lock=None))
    out = io.StringIO()
    try:
        BuildExecutor(work / "base.log", store_root=build_cache, out=out).execute_base(base)
    except Exception as exc:
        log = (work / "base.log").read_text(errors="replace")[-4000:] if (work / "base.log").exists() else ""
        pytest.fail(f"could not make the debootstrap base in {build_cache}: {exc}\n{out.getvalue()}{log}", pytrace=False)
    rootfs = Path(base.rootfs)
    assert (Path(base.entry) / "complete").exists() and (rootfs / "usr/bin/python3").exists(), out.getvalue()
    return rootfs


def reports(output: str, tag: str = "DDP_REPORT") -> list[dict]:
    """The per-rank JSON reports an example printed, sorted by rank."""
    import json
    import re

    found = [json.loads(m.group(1)) for m in re.finditer(tag + r" (\{.*\})$", output, re.M)]
    return sorted(found, key=lambda r: r["rank"])


# The three kinds of base an overlay is built on in the tests (no site image is on this machine; see
# tests/support/standin_bases.py): the reference image itself (envbuild's venv), a LUMI-like image (conda-style env
# activated by $WITH_CONDA) and a LUMI-AI-Factory-like image (/opt/venv).
OVERLAY_BASES = ("envbuild", "lumi", "aif")
OVERLAY_PACKAGE = "tabulate"  # small, pure Python, in none of the bases, on the local package index
OVERLAY_SPEC = f"""\
name: extras
base: localimage:base.sif
overlay: {{}}
python:
  packages: [{OVERLAY_PACKAGE}, torch]
tests:
  - python -c "import {OVERLAY_PACKAGE}, torch, sys; assert sys.prefix == '/user-software', sys.prefix"
"""


@pytest.fixture(scope="session")
def overlay_projects(tmp_path_factory: pytest.TempPathFactory, reference_image: Path, build_cache: Path) -> dict[str, Path]:
    """Per base kind, a project directory holding base.sif, extras.yaml (OVERLAY_SPEC), the overlay
    extras.sqsh built by `envbuild build`, its bin/ wrappers and the envrun.yaml it wrote."""
    from tests.support.standin_bases import standin_image

    projects = {}
    for kind in OVERLAY_BASES:
        project = tmp_path_factory.mktemp(f"overlay-{kind}")
        base = reference_image if kind == "envbuild" else standin_image(kind, reference_image, build_cache)
        os.link(base, project / "base.sif") if os.stat(base).st_dev == os.stat(project).st_dev else shutil.copy(base, project / "base.sif")
        (project / "extras.yaml").write_text(OVERLAY_SPEC)
        result = run_cli([str(REPO / "bin/envbuild"), "build", "extras.yaml"], cwd=project,
                         env_extra={"ENVBUILD_CACHE_DIR": str(build_cache)}, timeout=900)
        assert result.returncode == 0, f"{kind}: {result.stdout}{result.stderr[-4000:]}"
        (project / "build-output.txt").write_text(result.stderr)
        projects[kind] = project
    return projects


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[None]:
    """The two-node test cluster (provision/cluster.sh start --nodes 2: two slurmd in network and UTS
    namespaces on this machine) for one test module, then back to the single node the other tests use."""
    cluster = str(REPO / "provision/cluster.sh")
    subprocess.run(["bash", cluster, "start", "--nodes", "2"], check=True, capture_output=True, text=True, timeout=180)
    try:
        yield
    finally:
        subprocess.run(["bash", cluster, "start", "--nodes", "1"], check=True, capture_output=True, text=True, timeout=180)
