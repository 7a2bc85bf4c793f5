"""The conda (cotainr) build plan is pure: golden for the example spec, plus the parts that vary
(network sources, licenses, a base-image-only build). Regenerate the golden file after an intended change
with ENVBUILD_UPDATE_GOLDEN=1 pytest tests/builder/test_condaplan.py and review the diff."""

from __future__ import annotations

from pathlib import Path

from envbuild.builder.plan.actions import CheckReachable, Run, WriteFile
from envbuild.builder.plan.condaplan import CotainrTool, plan_conda_build, reachability_checks
from envbuild.builder.plan.plandata import BuildRequest, ImageOptions, SpecSource
from envbuild.builder.plan.planrender import render_build_plan
from envbuild.envspec.loadspec import load_build_input, load_spec_text
from envbuild.recipes.loadrecipe import load_recipe
from tests.support.golden import check_golden
from tests.support.plan_fixtures import FIXED_FACTS, REPO, with_overrides

TOOL = CotainrTool(argv=("/opt/envbuild-venv/bin/python", "-m", "cotainr"), version="2025.7.1")
GOLDEN_CASES = ("lumi-conda-pytorch",)


def golden_names() -> set[str]:
    return {f"{name}.plan.txt" for name in GOLDEN_CASES}


def request_for(loaded_text: str | None = None, path: Path | None = None, **overrides: object) -> BuildRequest:
    loaded = load_spec_text(loaded_text) if loaded_text is not None else load_build_input(path or REPO / "envs/lumi-conda-pytorch.yaml")
    request = BuildRequest(
        source=SpecSource(spec=loaded.spec, text=loaded.text, sha256=loaded.sha256, directory="/specs"),
        recipe=load_recipe(loaded.spec.system), facts=FIXED_FACTS,
        options=ImageOptions(output=f"/out/{loaded.spec.name}.sif", build_id="test", built_at="2026-11-22T00:00:00Z"),
    )
    return with_overrides(request, **overrides)


def test_plan_matches_golden() -> None:
    check_golden("lumi-conda-pytorch.plan.txt", render_build_plan(plan_conda_build(request_for(), TOOL)))


def test_the_cotainr_step_is_the_exact_command_with_the_env_file_next_to_the_image() -> None:
    plan = plan_conda_build(request_for(), TOOL)
    steps = {step.name: step for step in plan.steps}
    assert [s.name for s in plan.steps][:3] == ["env-file", "network", "cotainr"]
    written = steps["env-file"].actions[0]
    assert isinstance(written, WriteFile) and written.path == "/out/lumi-conda-pytorch.conda-env.yml"
    run = next(a for a in steps["cotainr"].actions if isinstance(a, Run))
    assert run.argv == (*TOOL.argv, "build", f"{plan.work_dir}/cotainr.sif", "--base-image",
                        "docker://rocm/dev-ubuntu-22.04:6.2.4-complete", "--conda-env", written.path,
                        "--accept-licenses", "--no-color")
    assert ("TMPDIR", f"{plan.work_dir}/tmp") in run.env


def test_licenses_are_accepted_only_when_the_spec_says_so() -> None:
    text = "name: c\nbase: docker://ubuntu:22.04\nconda:\n  dependencies: [python=3.12]\n"
    run = next(a for s in plan_conda_build(request_for(text), TOOL).steps for a in s.actions if isinstance(a, Run))
    assert "--accept-licenses" not in run.argv


def test_network_sources_follow_the_base_the_channels_and_the_indexes() -> None:
    text = ("name: c\nbase: docker://ghcr.io/org/img:1\nconda:\n  channels: [conda-forge, 'file:///site/channel', "
            "'https://mirror.invalid/bioconda']\n  dependencies: [python]\n  pip: ['--index-url https://pypi.invalid/simple', six]\n")
    checks = [url for url, _ in reachability_checks(request_for(text), "aarch64", "https://alias.invalid/conda")]
    assert checks == ["https://ghcr.io/v2/",
                      "https://github.com/conda-forge/miniforge/releases/latest/download/Miniforge3-Linux-aarch64.sh",
                      "https://alias.invalid/conda/conda-forge/", "https://mirror.invalid/bioconda",
                      "https://pypi.invalid/simple"]


def test_a_base_image_only_build_needs_no_network_no_env_file_and_no_wrappers() -> None:
    text = "name: b\nbase: localimage:/images/base.sif\nconda: {}\n"
    plan = plan_conda_build(request_for(text, base_path="/images/base.sif"), TOOL)
    names = [s.name for s in plan.steps]
    assert "network" not in names and "env-file" not in names and "wrappers" not in names
    run = next(a for s in plan.steps for a in s.actions if isinstance(a, Run))
    assert "--conda-env" not in run.argv and run.argv[run.argv.index("--base-image") + 1] == "/images/base.sif"
    assert not any(isinstance(a, CheckReachable) for s in plan.steps for a in s.actions)
