"""The build plan is pure: fixed inputs give the same plan, compared with files in tests/golden/.

Regenerate after an intended change with: ENVBUILD_UPDATE_GOLDEN=1 pytest tests/builder/test_plan.py
and review the diff. A golden file that no case here or in tests/launch/test_plan.py produces fails
tests/test_golden_files.py (delete it, or add its case)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from envbuild.builder.plan.actions import MergeJson, Run, WriteFile
from envbuild.builder.plan.planrender import redact, render_build_plan, render_steps
from envbuild.builder.plan.record import env_script
from envbuild.host.pip import PipSettings
from tests.support.golden import check_golden
from tests.support.plan_fixtures import FIXED_FACTS, fixed_base_plan, fixed_plan


def render_both(spec_file: str, **overrides: object) -> str:
    """The base plan (into the store) and the build plan, as `envbuild build --dry-run` shows them."""
    base = fixed_base_plan(spec_file, **overrides)
    return render_steps("base", base.steps) + "\n" + render_build_plan(fixed_plan(spec_file, **overrides))


# The golden files of this module, from the case tables the tests are parametrized with
# (tests/test_golden_files.py checks that tests/golden/ holds exactly the files some test compares with).
PLAN_SPECS = ("local-cpu-pytorch", "lumi-pytorch", "lumi-pytorch-rocm-wheels")
PIP_PLAN_GOLDEN = "local-cpu-pytorch.pip.plan.txt"


def plan_golden_name(spec: str) -> str:
    return f"{spec}.plan.txt"


def golden_names() -> set[str]:
    return {*(plan_golden_name(spec) for spec in PLAN_SPECS), PIP_PLAN_GOLDEN,
            *(target_golden_name(target) for target in TARGET_SPECS)}


# One spec per python.target other than envbuild's own venv, on an NGC-style base whose torch the packages join.
TARGET_SPEC = """\
name: ngc-extras
system: local
base: docker://nvcr.io/nvidia/pytorch:25.01-py3
python:
  target: {target}
  packages: [einops, "timm>=1.0"]
post: ["python -c 'import torch, timm'"]
tests: ["python -c 'import torch, einops'"]
"""
TARGET_SPECS = ("venv-over-base", "base")


def target_golden_name(target: str) -> str:
    return f"ngc-extras.target-{target}.plan.txt"


def target_spec_file(tmp_path, target: str) -> str:
    path = tmp_path / "ngc-extras.yaml"
    path.write_text(TARGET_SPEC.format(target=target))
    return str(path)


@pytest.mark.parametrize("target", TARGET_SPECS)
def test_python_target_plan_matches_golden(tmp_path, target: str) -> None:
    """tests/golden/ngc-extras.target-TARGET.plan.txt: where the packages go decides the venv step, the Python
    pip runs with, the record step and the run-time PATH. Update: ENVBUILD_UPDATE_GOLDEN=1 pytest THIS_FILE."""
    check_golden(target_golden_name(target), render_both(target_spec_file(tmp_path, target)))


def test_base_target_makes_no_venv_and_leaves_path_alone(tmp_path) -> None:
    """python.target: base: no venv is made, pip is the base's Python's (found on the base's PATH inside the
    sandbox), and neither the env script nor the labels name envbuild's venv."""
    plan = fixed_plan(target_spec_file(tmp_path, "base"))
    runs = [" ".join(a.argv) for a in all_actions(plan) if isinstance(a, Run)]
    assert not any("-m venv" in run for run in runs)
    assert any("command -v python3 || command -v python" in run and '"$py" -m pip install' in run for run in runs)
    assert all(a.argv[-3:-1] != ("-c",) or "/opt/envbuild/venv/bin/python" not in a.argv for a in all_actions(plan)
               if isinstance(a, Run))
    script = next(a.content for a in all_actions(plan) if isinstance(a, WriteFile) and a.path.endswith("90-envbuild.sh"))
    assert "/opt/envbuild/venv" not in script and "VIRTUAL_ENV" not in script
    assert plan.installer == "pip"


def test_base_target_checks_the_torch_family_of_the_bases_python_and_wraps_its_commands(tmp_path) -> None:
    """python.target: base: after installing, the base's Python lists its sys.path (inside the container, where it
    is known) and the torch family check reads the family from there; the wrappers step names what it wraps, the
    base's own Python's commands, not a venv's bin/ the image does not have."""
    from envbuild.builder.plan.actions import CheckTorchFamily, WriteRunWrappers
    from envbuild.builder.plan.install import BASE_SYS_PATH

    plan = fixed_plan(target_spec_file(tmp_path, "base"))
    actions = all_actions(plan)
    install = next(index for index, a in enumerate(actions) if isinstance(a, Run) and '"$py" -m pip install' in " ".join(a.argv))
    assert BASE_SYS_PATH in " ".join(actions[install].argv) and "sys.path" in " ".join(actions[install].argv)
    check = next(a for a in actions[install:] if isinstance(a, CheckTorchFamily))
    assert (check.sys_path_file, check.where) == (BASE_SYS_PATH, "the base's own Python in ngc-extras (just installed into)")
    wrappers = next(a for a in actions if isinstance(a, WriteRunWrappers))
    assert wrappers.venv_bin is None and wrappers.extra_commands == ("python", "python3", "pip", "torchrun")
    assert wrappers.describe() == ("write run wrappers for python python3 pip torchrun (the base's own Python, first on "
                                   "its PATH in the image) to /out/bin/ (system local)")
    from dataclasses import replace

    from envbuild.builder.execute.wrapperfiles import write_run_wrappers

    written, kept = write_run_wrappers(replace(wrappers, dest=str(tmp_path / "out/bin")))
    assert sorted(written) == ["pip", "python", "python3", "torchrun"] and kept == []


def test_venv_over_base_sees_the_base_packages(tmp_path) -> None:
    """python.target: venv-over-base: the venv is made with --system-site-packages from the base's Python, first
    on PATH at run time, and installed into with pip (uv would not count the base's packages)."""
    plan = fixed_plan(target_spec_file(tmp_path, "venv-over-base"))
    runs = [" ".join(a.argv) for a in all_actions(plan) if isinstance(a, Run)]
    assert any('"$py" -m venv --system-site-packages /opt/envbuild/venv' in run for run in runs)
    assert plan.installer == "pip"
    script = next(a.content for a in all_actions(plan) if isinstance(a, WriteFile) and a.path.endswith("90-envbuild.sh"))
    assert 'PATH="/opt/envbuild/venv/bin:$PATH"' in script


def test_the_target_is_part_of_the_env_layer_key(tmp_path) -> None:
    from envbuild.builder.plan.layers import plan_layers
    from tests.support.plan_fixtures import fixed_request

    keys = set()
    for target in ("envbuild-venv", *TARGET_SPECS):
        folder = tmp_path / target
        folder.mkdir()
        keys.add(plan_layers(fixed_request(target_spec_file(folder, target))).env_key)
    assert len(keys) == 3


@pytest.mark.parametrize("spec", PLAN_SPECS)
def test_plan_matches_golden(spec: str) -> None:
    """tests/golden/SPEC.plan.txt; update after an intended change: ENVBUILD_UPDATE_GOLDEN=1 pytest THIS_FILE."""
    check_golden(plan_golden_name(spec), render_both(f"envs/{spec}.yaml"))


def test_plan_with_pip_installer_golden() -> None:
    """tests/golden/local-cpu-pytorch.pip.plan.txt; update: ENVBUILD_UPDATE_GOLDEN=1 pytest THIS_FILE."""
    facts = replace(FIXED_FACTS, uv=None)
    check_golden(PIP_PLAN_GOLDEN, render_both("envs/local-cpu-pytorch.yaml", facts=facts))


def all_actions(plan):
    return [a for step in plan.steps for a in step.actions]


def test_plan_is_deterministic() -> None:
    assert fixed_plan("envs/local-cpu-pytorch.yaml") == fixed_plan("envs/local-cpu-pytorch.yaml")


def test_local_recipe_adds_no_torch_index_but_lumi_gets_rocm_index() -> None:
    local = render_build_plan(fixed_plan("envs/local-cpu-pytorch.yaml"))
    lumi = render_build_plan(fixed_plan("envs/lumi-pytorch-rocm-wheels.yaml"))
    assert "download.pytorch.org" not in local
    assert "--extra-index-url https://download.pytorch.org/whl/rocm7.0 --extra-index-url file:///.envbuild-host/src0/simple" in lumi


def test_lumi_ai_factory_spec_keeps_the_base_torch() -> None:
    """envs/lumi-pytorch.yaml builds on a LUMI AI Factory image: no torch requirement, no PyTorch index,
    pip (uv would reinstall what a base venv provides), and a test that the torch in use is the base's."""
    plan = fixed_plan("envs/lumi-pytorch.yaml")
    text = render_build_plan(plan)
    base = render_steps("base", fixed_base_plan("envs/lumi-pytorch.yaml").steps)
    assert "docker://lumiaifactory/lumi-multitorch:torch-u24r70f21m50t210-" in base
    assert "download.pytorch.org" not in text
    assert "# installer:    pip" in text
    assert "# requirements: transformers>=4.50 lightning>=2.5 accelerate datasets" in text
    record = json.loads(next(a for a in all_actions(plan) if isinstance(a, WriteFile) and a.path.endswith("/build.json")).content)
    assert not any(req.startswith("torch") for req in record["requirements"])
    assert any("torch.__file__.startswith('/opt/venv/')" in test for test in plan_request_spec("envs/lumi-pytorch.yaml").tests)


def plan_request_spec(spec_file: str):
    from tests.support.plan_fixtures import fixed_request

    return fixed_request(spec_file).spec


def test_host_sources_are_bound_and_rewritten() -> None:
    env = next(s for s in fixed_plan("envs/local-cpu-pytorch.yaml").steps if s.name == "env")
    run = next(a for a in env.actions if isinstance(a, Run) and " pip install " in a.argv[-1])
    argv = list(run.argv)
    # The installer, then the package list in the same container (one start less).
    install, freeze = argv[-1].split("\n")
    assert install.startswith("/.envbuild-host/uv pip install ") and freeze.startswith("/opt/envbuild/venv/bin/python -I -c ")
    # the index's parent is bound, so ../../files links resolve inside
    assert "/opt/pypi:/.envbuild-host/src0:ro" in argv
    assert "/opt/wheels:/.envbuild-host/src1:ro" in argv
    assert "/etc/ssl/certs/ca-certificates.crt:/.envbuild-host/ca-bundle.pem:ro" in argv
    assert ("APPTAINERENV_SSL_CERT_FILE", "/.envbuild-host/ca-bundle.pem") in run.env
    assert ("APPTAINERENV_https_proxy", "http://proxy.invalid:3128") in run.env
    assert install.endswith(" torch==2.13.0 transformers lightning accelerate")
    assert "--cleanenv" in argv and "--writable" in argv


def test_remote_index_is_passed_unchanged_and_credentials_redacted() -> None:
    facts = replace(FIXED_FACTS, pip=PipSettings(index_url="https://user:s3cret@pypi.site/simple"))
    plan = fixed_plan("envs/local-cpu-pytorch.yaml", facts=facts)
    text = render_build_plan(plan)
    assert "s3cret" not in text and "https://***@pypi.site/simple" in text
    assert redact("see https://a:b@h/x and http://h2/y") == "see https://***@h/x and http://h2/y"


def test_image_configuration_files() -> None:
    plan = fixed_plan("envs/local-cpu-pytorch.yaml")
    writes = {a.path: a for a in all_actions(plan) if isinstance(a, WriteFile)}
    sandbox = plan.sandbox
    script = writes[f"{sandbox}/.singularity.d/env/90-envbuild.sh"].content
    assert "export VIRTUAL_ENV=/opt/envbuild/venv" in script
    assert "export TOKENIZERS_PARALLELISM=false" in script
    record = json.loads(writes[f"{sandbox}/.envbuild/build.json"].content)
    assert record["requirements"] == ["torch==2.13.0", "transformers", "lightning", "accelerate"]
    labels = dict(next(a for a in all_actions(plan) if isinstance(a, MergeJson)).values)
    assert labels["org.envbuild.spec-name"] == "local-cpu-pytorch"
    assert labels["maintainer"] == "envbuild"


def test_env_values_are_literal_in_the_script() -> None:
    from envbuild.envspec.loadspec import load_spec_text

    spec = load_spec_text("name: x\nbase: debootstrap:bookworm\nenv:\n  A: \"$HOME; rm -rf /\"\n  B: \"it's\"\n").spec
    script = env_script(spec, "1", "0" * 64)
    assert "export A='$HOME; rm -rf /'" in script
    assert "export B='it'\"'\"'s'" in script


def test_keep_work_drops_the_clean_step() -> None:
    names = [s.name for s in fixed_plan("envs/local-cpu-pytorch.yaml", keep_work=True).steps]
    assert "clean" not in names and names[-3:] == ["squash", "output", "wrappers"]


def test_debootstrap_base_is_cached_per_reference() -> None:
    plan = fixed_base_plan("envs/local-cpu-pytorch.yaml")
    assert plan.steps[0].skip_if_exists and plan.steps[0].skip_if_exists.startswith("/cache/envbuild/bases/debootstrap-bookworm-")
    assert plan.steps[0].lock == ("base", plan.entry.rsplit("/", 1)[1])


def test_lock_resolves_with_the_host_sources_as_they_are_torch_index_first() -> None:
    from envbuild.builder.plan.install import host_index_args
    from tests.support.plan_fixtures import fixed_request

    assert host_index_args(fixed_request("envs/lumi-pytorch-rocm-wheels.yaml")) == [
        "--extra-index-url", "https://download.pytorch.org/whl/rocm7.0", "--extra-index-url", "file:///opt/pypi/simple",
        "--find-links", "/opt/wheels", "--index-strategy", "unsafe-best-match",
    ]
