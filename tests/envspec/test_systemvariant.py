"""A spec without `python.pytorch.variant` builds its system's torch: the recipe's default_variant and its
index (envbuild.envspec.systemvariant); the dry run says where the variant came from, and `cpu` written for a
GPU system is a located warning."""

from __future__ import annotations

from pathlib import Path

import pytest

from envbuild.builder.plan.planrender import render_build_plan
from envbuild.builder.sessions.buildrequest import torch_index_for
from envbuild.envspec.loadspec import load_spec, load_spec_text
from envbuild.lock.fileformat import read_lock
from envbuild.lock.lockmodel import lock_inputs
from envbuild.recipes.loadrecipe import load_recipe
from tests.conftest import REPO, run_cli
from tests.support.plan_fixtures import fixed_plan


def spec_text(system: str, variant: str | None = None) -> str:
    variant_line = f"\n    variant: {variant}" if variant else ""
    return (f"name: torch-for-{system}\nsystem: {system}\nbase: docker://docker.io/library/python:3.12-slim-bookworm\n"
            f"python:\n  pytorch:\n    version: \"2.10.0\"{variant_line}\n")


def default_variant_line(system: str) -> str:
    return load_recipe(system).cite("pytorch.default_variant").split(" ")[0]  # recipes/lumi-g.yaml:LINE


@pytest.mark.parametrize(("system", "variant"), [("lumi-g", "rocm7.0"), ("roihu", "cuda130"), ("lumi-c", "cpu"),
                                                 ("local", "cpu")])
def test_without_a_variant_the_system_recipe_default_is_taken(system: str, variant: str) -> None:
    loaded = load_spec_text(spec_text(system))
    assert loaded.spec.python.pytorch is not None and loaded.spec.python.pytorch.variant == variant
    assert loaded.torch_variant_origin == f"the {system} recipe's default_variant ({default_variant_line(system)})"
    assert loaded.warnings == ()
    path, line = default_variant_line(system).split(":")
    assert f"default_variant: {variant}" in (REPO / path).read_text().splitlines()[int(line) - 1]


def test_a_lumi_g_spec_without_a_variant_plans_rocm_torch(tmp_path: Path) -> None:
    spec = tmp_path / "lumi.yaml"
    spec.write_text(spec_text("lumi-g"))
    plan = render_build_plan(fixed_plan(str(spec)))
    assert "--extra-index-url https://download.pytorch.org/whl/rocm7.0 " in plan and "torch==2.10.0" in plan
    assert "whl/cpu" not in plan


def test_the_spec_own_variant_is_kept_and_said_so() -> None:
    loaded = load_spec_text(spec_text("lumi-g", "rocm6.4"), "lumi.yaml")
    assert loaded.spec.python.pytorch is not None and loaded.spec.python.pytorch.variant == "rocm6.4"
    assert loaded.torch_variant_origin == "the spec (lumi.yaml:7)"
    assert loaded.torch_variant_note == "# torch variant rocm6.4: the spec (lumi.yaml:7)\n"
    assert loaded.warnings == ()


def test_cpu_on_a_gpu_system_is_a_located_warning_with_the_fix() -> None:
    loaded = load_spec_text(spec_text("lumi-g", "cpu"), "lumi.yaml")
    assert loaded.spec.python.pytorch is not None and loaded.spec.python.pytorch.variant == "cpu"
    (warning,) = loaded.warnings
    assert (warning.file, warning.line, warning.field) == ("lumi.yaml", 7, "python.pytorch.variant")
    assert "whose nodes have 8 amd GPUs" in warning.message and "training runs on the CPU" in warning.message
    assert f"default_variant rocm7.0 ({default_variant_line('lumi-g')})" in (warning.hint or "")


def test_cpu_on_a_cpu_system_is_no_warning() -> None:
    assert load_spec_text(spec_text("lumi-c", "cpu")).warnings == ()
    assert load_spec_text(spec_text("local", "cpu")).warnings == ()


def test_the_reference_lock_inputs_do_not_change() -> None:
    """The local recipe's default is cpu and the reference spec names it: its lock (and so every CI build
    key made from it) stays current."""
    loaded = load_spec(REPO / "envs/local-cpu-pytorch.yaml")
    lock = read_lock((REPO / "envs/local-cpu-pytorch.lock").read_text(), "envs/local-cpu-pytorch.lock")
    assert lock_inputs(loaded.spec, torch_index_for(loaded)) == lock.inputs
    assert loaded.warnings == ()


def test_the_dry_run_says_where_the_variant_came_from(tmp_path: Path) -> None:
    spec = tmp_path / "lumi.yaml"
    spec.write_text(spec_text("lumi-g"))
    result = run_cli([str(REPO / "bin/envbuild"), "build", "--dry-run", str(spec)],
                     env_extra={"ENVBUILD_CACHE_DIR": str(tmp_path / "store")}, timeout=300)
    assert result.returncode == 0, result.stderr
    assert (f"# torch variant rocm7.0: the lumi-g recipe's default_variant ({default_variant_line('lumi-g')})\n"
            in result.stdout)
    assert "whl/rocm7.0" in result.stdout
