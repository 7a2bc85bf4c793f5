"""The pure overlay planner (envbuild.builder.plan.overlayplan): which requirements the base already meets, the torch
guard, the overlay's key and record, the mount check, and the whole plan against golden files.

The goldens (tests/golden/overlay-*.plan.txt) are the base steps and the overlay steps as
`envbuild build --dry-run` shows them, after a summary and the record the build writes. Regenerate after an
intended change with: ENVBUILD_UPDATE_GOLDEN=1 pytest tests/builder/test_overlayplan.py, and review the diff."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import replace

import pytest

from envbuild.builder.plan.actions import Run, Step, WriteFile, WriteRunWrappers
from envbuild.builder.plan.overlayplan import (
    OverlayPlan,
    _check_mount,
    check_torch,
    overlay_installer,
    overlay_key,
    overlay_record,
    overlay_wrappers_step,
    plan_overlay,
    plan_overlay_base,
    split_requirements,
    torch_constraints,
)
from envbuild.builder.plan.overlayprobe import PROBE_PYTHON, PROBE_SHELL, BaseProbe
from envbuild.builder.plan.plandata import BuildRequest
from envbuild.builder.plan.planrender import render_steps
from envbuild.host.pip import PipSettings
from envbuild.inventory.pkgmeta import parse_pin
from envbuild.shared.errors import EnvbuildError
from envbuild.shared.overlayformat import RECORD_FILE, RECORD_KEYS, check_record
from tests.support.golden import check_golden
from tests.support.plan_fixtures import FIXED_BASE_DIGEST, FIXED_FACTS, fixed_request, with_overrides

BASE_SIF = "/appl/local/containers/sif-images/x.sif"
BASE_SIF_ID = "5d1e3a4c-2b8f-4e6a-9c71-0f3b2a1d9e88"
BASE_SIZE = 21_474_836_480

# A LUMI lumi-pytorch-rocm-* image: Python in the conda env that $WITH_CONDA activates.
LUMI_CONDA_PROBE = BaseProbe(
    python="/opt/miniconda3/envs/pytorch/bin/python",
    why="the conda env that $WITH_CONDA activates (source /opt/miniconda3/bin/activate pytorch)",
    activation="WITH_CONDA", version="3.12.9", abi="cpython-312-x86_64-linux-gnu",
    prefix="/opt/miniconda3/envs/pytorch",
    site_dirs=("/opt/miniconda3/envs/pytorch/lib/python3.12/site-packages",),
    packages=("accelerate==1.6.0", "numpy==1.26.4", "pytorch-triton-rocm==3.2.0", "torch==2.6.0+rocm6.2.4",
              "torchvision==0.21.0+rocm6.2.4", "transformers==4.51.3", "typing_extensions==4.12.2"),
    machine="x86_64",
)
# A LUMI AI Factory image: Python in the venv /opt/venv, made from the system's /usr/bin/python3.12.
LUMI_VENV_PROBE = BaseProbe(
    python="/opt/venv/bin/python", why="/opt/venv, the LUMI AI Factory layout", activation="", version="3.12.3",
    abi="cpython-312-x86_64-linux-gnu", prefix="/opt/venv",
    site_dirs=("/opt/venv/lib/python3.12/site-packages", "/usr/local/lib/python3.12/dist-packages",
               "/usr/lib/python3/dist-packages"),
    packages=("certifi==2025.1.31", "requests==2.32.3", "torch==2.7.1+rocm6.4.1", "triton==3.3.1", "urllib3==2.4.0"),
    machine="x86_64",
)

# golden file -> (spec under tests/fixtures/overlay/, the base's probe)
GOLDEN_CASES = {
    "overlay-lumi-conda.plan.txt": ("lumi-conda-overlay", LUMI_CONDA_PROBE),
    "overlay-lumi-venv.plan.txt": ("lumi-venv-overlay", LUMI_VENV_PROBE),
}


def golden_names() -> set[str]:
    """This module's golden files (tests/test_golden_files.py checks tests/golden/ against them)."""
    return set(GOLDEN_CASES)


def overlay_request(spec: str = "lumi-conda-overlay", **overrides: object) -> BuildRequest:
    """tests/fixtures/overlay/SPEC.yaml with fixed facts, on the base BASE_SIF (not on this machine), once the
    base's digest is known; flat overrides as in tests/support/plan_fixtures.py (with_overrides)."""
    fields: dict[str, object] = {"output": "/out/x.sqsh", "base_path": BASE_SIF, "base_fingerprint": "21474836480-1700000000",
                                 "base_sif_id": BASE_SIF_ID, "base_size": BASE_SIZE}
    fields.update(overrides)
    return fixed_request(f"tests/fixtures/overlay/{spec}.yaml", check_host=False, **fields)


def written_record(plan: OverlayPlan) -> dict[str, object]:
    """overlay.json as the record step writes it (before the overlay's Python adds packages.added)."""
    writes = [a for step in plan.steps for a in step.actions if isinstance(a, WriteFile) and a.path.endswith(RECORD_FILE)]
    (write,) = writes
    return json.loads(write.content)


def step_named(plan: OverlayPlan, name: str) -> Step:
    (step,) = [s for s in plan.steps if s.name == name]
    return step


def render_overlay(request: BuildRequest, probe: BaseProbe) -> str:
    """A summary, the record, then the base and overlay steps as `envbuild build --dry-run` shows them."""
    base = plan_overlay_base(request)
    plan = plan_overlay(request, probe, spec_path="spec.yaml")
    summary = [
        f"# envbuild overlay plan for {plan.name}",
        f"# output:      {plan.output}",
        f"# mount:       {plan.mount}",
        f"# store entry: {plan.entry}",
        f"# base Python: {probe.python} (Python {probe.version}): {probe.why}",
        f"# kept:        {' '.join(plan.kept) or '(none)'}",
        f"# added:       {' '.join(plan.added) or '(none)'}",
        f"# constraints: {' '.join(plan.constraints) or '(none)'}",
        f"# sources:     {' '.join(plan.package_sources) or '(installer defaults)'}",
        f"# {RECORD_FILE} before the overlay's Python adds packages.added:",
        *(f"#   {line}" for line in json.dumps(written_record(plan), indent=2, sort_keys=True).splitlines()),
    ]
    return "\n".join(summary) + "\n" + render_steps("base", base.steps) + "\n" + render_steps("overlay", plan.steps)


# --- the goldens -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("golden", sorted(GOLDEN_CASES))
def test_overlay_plan_matches_golden(golden: str) -> None:
    """tests/golden/overlay-*.plan.txt; update after an intended change: ENVBUILD_UPDATE_GOLDEN=1 pytest THIS_FILE."""
    spec, probe = GOLDEN_CASES[golden]
    check_golden(golden, render_overlay(overlay_request(spec), probe))


def test_plan_is_deterministic() -> None:
    assert plan_overlay(overlay_request(), LUMI_CONDA_PROBE) == plan_overlay(overlay_request(), LUMI_CONDA_PROBE)


def test_conda_base_runs_every_command_after_with_conda() -> None:
    plan = plan_overlay(overlay_request(), LUMI_CONDA_PROBE)
    runs = [a for s in plan.steps if s.name in ("work", "install", "record", "test") for a in s.actions if isinstance(a, Run)]
    assert len(runs) == 2  # the venv, its .pth, the installer and the record in one start; the test
    for run in runs:
        image_at = run.argv.index(BASE_SIF)
        assert run.argv[image_at + 1:image_at + 5] == ("bash", "-c", 'eval "$WITH_CONDA" >&2 || exit 3; exec "$@"',
                                                       "envbuild-activate")


def test_venv_base_runs_commands_directly() -> None:
    plan = plan_overlay(overlay_request("lumi-venv-overlay"), LUMI_VENV_PROBE)
    assert not [a for a in step_named(plan, "work").actions if isinstance(a, Run)]
    (install,) = [a for a in step_named(plan, "install").actions if isinstance(a, Run)]
    shell, flags, script = install.argv[install.argv.index(BASE_SIF) + 1:]
    assert (shell, flags) == ("/bin/sh", "-ec")
    make_venv, write_pth = script.split("\n/opt/my-project/bin/python -m pip")[0].split("\n", 1)
    assert shlex.split(make_venv) == ["/opt/venv/bin/python", "-m", "venv", "--system-site-packages", "--without-pip",
                                      "/opt/my-project"]
    # the base venv's site directories go into the overlay's .pth file, in the same container start as pip
    words = shlex.split(write_pth)
    assert words[:2] == ["/opt/my-project/bin/python", "-c"]
    assert tuple(words[-3:]) == LUMI_VENV_PROBE.site_dirs


def test_plan_summary() -> None:
    plan = plan_overlay(overlay_request(), LUMI_CONDA_PROBE)
    assert plan.mount == "/user-software" and plan.output == "/out/x.sqsh"
    assert plan.kept == ("torch==2.6.0+rocm6.2.4", "transformers==4.51.3", "numpy==1.26.4")
    assert plan.added == ("accelerate[testing]", "peft==0.15.2")
    assert plan.constraints == ("torch==2.6.0+rocm6.2.4", "torchvision==0.21.0+rocm6.2.4", "pytorch-triton-rocm==3.2.0")
    assert plan.entry == f"lumi-conda-overlay-{plan.key[:16]}"
    assert plan.store_overlay == f"/cache/envbuild/overlays/{plan.entry}/overlay.sqsh"
    assert [s.name for s in plan.steps] == ["work", "install", "test", "squash", "output", "wrappers", "clean"]


def test_constraints_file_holds_the_base_torch() -> None:
    plan = plan_overlay(overlay_request(), LUMI_CONDA_PROBE)
    (constraints,) = [a for a in step_named(plan, "install").actions
                      if isinstance(a, WriteFile) and a.path.endswith("/constraints.txt")]
    assert constraints.content == "torch==2.6.0+rocm6.2.4\ntorchvision==0.21.0+rocm6.2.4\npytorch-triton-rocm==3.2.0\n"


def test_nothing_to_install_leaves_out_the_install_step() -> None:
    probe = replace(LUMI_VENV_PROBE, packages=(*LUMI_VENV_PROBE.packages, "rich==14.0.0"))
    plan = plan_overlay(overlay_request("lumi-venv-overlay"), probe)
    assert plan.added == ()
    assert plan.kept == ("requests==2.32.3", "rich==14.0.0")
    assert "install" not in [s.name for s in plan.steps]


def test_pip_and_the_record_of_what_it_added_share_one_container_start() -> None:
    plan = plan_overlay(overlay_request("lumi-venv-overlay"), LUMI_VENV_PROBE)
    (run,) = [a for a in step_named(plan, "install").actions if isinstance(a, Run)]
    after_venv = run.argv[-1].index(f"\n{plan.mount}/bin/python -m pip install ") + 1  # after the venv and its .pth
    words = shlex.split(run.argv[-1][after_venv:])
    assert words[1:4] == ["-m", "pip", "install"]
    assert words[words.index("exec") + 1:words.index("exec") + 3] == [f"{plan.mount}/bin/python", "-c"]
    assert words[-1] == f"{plan.mount}/{RECORD_FILE}"
    writes = [a for a in step_named(plan, "install").actions if isinstance(a, (WriteFile, Run))]
    assert writes.index(run) > max(i for i, a in enumerate(writes) if isinstance(a, WriteFile))  # the record before pip


def test_uv_installs_what_a_dry_run_against_the_base_says_it_lacks_in_one_container_start() -> None:
    plan = plan_overlay(overlay_request(), LUMI_CONDA_PROBE)
    install = step_named(plan, "install")
    (run,) = [a for a in install.actions if isinstance(a, Run)]
    assert run.argv[run.argv.index(BASE_SIF) + 1] == "bash"  # after $WITH_CONDA, as every command in this base
    lines = run.argv[-1].splitlines()
    assert shlex.split(lines[0])[1:4] == ["-m", "venv", "--system-site-packages"]  # the venv first, in the same start
    (dry_run_line,) = [line for line in lines if line.startswith("/.envbuild-host/uv pip install --dry-run")]
    dry_run = shlex.split(dry_run_line.split(" 2>")[0])
    # the base's own environment, read-only, decides what is missing (uv ignores a venv's system site packages)
    assert dry_run[:6] == ["/.envbuild-host/uv", "pip", "install", "--dry-run", "--break-system-packages", "--python"]
    assert dry_run[6] == LUMI_CONDA_PROBE.python
    assert dry_run[-2:] == ["accelerate[testing]", "peft==0.15.2"]
    assert dry_run[dry_run.index("--constraint") + 1] == "/.envbuild-host/constraints.txt"
    install_line = next(line for line in lines if line.startswith("if [ -s /.envbuild-host/added.txt ]"))
    words = shlex.split(install_line.removeprefix("if [ -s /.envbuild-host/added.txt ]; then ").removesuffix("; fi"))
    assert words[words.index("--python") + 1] == f"{plan.mount}/bin/python"
    assert {"--no-deps", "--compile-bytecode", "--link-mode=copy"} <= set(words)
    assert words[-2:] == ["-r", "/.envbuild-host/added.txt"]
    record = "\n".join(lines[lines.index(install_line) + 1:])
    assert shlex.split(record)[:3] == ["exec", f"{plan.mount}/bin/python", "-c"]
    assert "uv install" in install.title
    assert written_record(plan)["installer"] == {"name": "uv", "version": FIXED_FACTS.uv_version}


def test_uv_leaves_out_what_the_base_has_at_that_version_where_uv_did_not_look() -> None:
    plan = plan_overlay(overlay_request(), LUMI_CONDA_PROBE)
    install = step_named(plan, "install")
    (base_list,) = [a for a in install.actions if isinstance(a, WriteFile) and a.path.endswith("/base-packages.txt")]
    # canonical names, as uv prints them, and the versions the base has
    assert "typing-extensions==4.12.2\n" in base_list.content and "torch==2.6.0+rocm6.2.4\n" in base_list.content
    (run,) = [a for a in install.actions if isinstance(a, Run)]
    assert ("{ grep -vixF -f /.envbuild-host/base-packages.txt /.envbuild-host/uv-wanted.txt || true; } "
            ">/.envbuild-host/added.txt" in run.argv[-1])


def test_uv_output_that_lists_nothing_in_a_known_form_stops_the_build() -> None:
    plan = plan_overlay(overlay_request(), LUMI_CONDA_PROBE)
    (run,) = [a for a in step_named(plan, "install").actions if isinstance(a, Run)]
    (guard,) = [line for line in run.argv[-1].splitlines() if line.startswith("[ -s /.envbuild-host/uv-wanted.txt ]")]
    assert "grep -q '^Would make no changes' /.envbuild-host/uv-plan.txt" in guard and guard.endswith("exit 3; }")
    assert "fix:" in shlex.split(guard.split("|| { ", 1)[1])[1]


@pytest.mark.parametrize(("why", "probe", "overrides"), [
    ("no uv beside envbuild", LUMI_CONDA_PROBE, {"facts": replace(FIXED_FACTS, uv=None)}),
    ("a lock", LUMI_CONDA_PROBE, {"locked_requirements": "peft==0.15.2 --hash=sha256:" + "e" * 64 + "\n",
                                  "lock_text": "peft==0.15.2\n", "lock_sha256": "d" * 64, "lock_python": "3.12"}),
    ("site directories outside the base's environment", LUMI_VENV_PROBE, {"spec": "lumi-venv-overlay"}),
    ("a distribution's own Python", replace(LUMI_CONDA_PROBE, python="/usr/bin/python3", prefix="/usr",
                                            site_dirs=("/usr/lib/python3/dist-packages",), activation=""), {}),
])
def test_pip_installs_where_uv_cannot_see_what_the_base_has(why: str, probe: BaseProbe,
                                                             overrides: dict[str, object]) -> None:
    request = overlay_request(**overrides)  # type: ignore[arg-type]
    assert overlay_installer(request, probe) == "pip", why
    assert written_record(plan_overlay(request, probe))["installer"]["name"] == "pip"  # type: ignore[index]


def test_with_nothing_to_install_the_record_has_its_own_step() -> None:
    probe = replace(LUMI_VENV_PROBE, packages=(*LUMI_VENV_PROBE.packages, "rich==14.0.0"))
    plan = plan_overlay(overlay_request("lumi-venv-overlay"), probe)
    (run,) = [a for a in step_named(plan, "record").actions if isinstance(a, Run)]
    script = run.argv[-1]
    assert shlex.split(script.split("\n", 1)[0])[1:3] == ["-m", "venv"]  # the venv in the same start
    assert script.endswith(f" {plan.mount}/{RECORD_FILE}")


def test_keep_work_leaves_out_the_clean_step() -> None:
    plan = plan_overlay(overlay_request(keep_work=True), LUMI_CONDA_PROBE)
    assert [s.name for s in plan.steps][-3:] == ["squash", "output", "wrappers"]


def test_squash_uses_the_spec_processors_and_is_reused_from_the_store() -> None:
    plan = plan_overlay(overlay_request(), LUMI_CONDA_PROBE)
    squash = step_named(plan, "squash")
    (mksquashfs,) = [a for a in squash.actions if isinstance(a, Run)]
    argv = list(mksquashfs.argv)
    assert argv[argv.index("-processors") + 1] == "4"
    assert {"-all-root", "-no-xattrs"} <= set(argv)
    assert squash.skip_if_exists == f"/cache/envbuild/overlays/{plan.entry}/complete"


def test_installing_needs_envbuilds_own_pip() -> None:
    request = overlay_request(facts=replace(FIXED_FACTS, pip_module=None, uv=None))
    with pytest.raises(EnvbuildError, match="envbuild's own environment has no pip") as info:
        plan_overlay(request, LUMI_CONDA_PROBE)
    assert info.value.hint is not None and "ensurepip" in info.value.hint


def test_wrappers_run_the_base_with_the_overlay_and_wrap_the_base_torchrun() -> None:
    request = overlay_request()
    (wrappers,) = overlay_wrappers_step(request, LUMI_CONDA_PROBE, "/work/venv/bin").actions
    assert wrappers == WriteRunWrappers("/work/venv/bin", "/out/bin", BASE_SIF, "lumi-g", "apptainer",
                                        overlays=(("/out/x.sqsh", "/user-software"),), extra_commands=("torchrun",))
    no_torch = replace(LUMI_CONDA_PROBE, packages=("numpy==1.26.4",))
    (wrappers,) = overlay_wrappers_step(request, no_torch, "/work/venv/bin").actions
    assert isinstance(wrappers, WriteRunWrappers) and wrappers.extra_commands == ()


# --- the base steps --------------------------------------------------------------------------------------


def test_base_steps_are_cached_per_base_file_and_interpreter_choice() -> None:
    detected = plan_overlay_base(overlay_request())
    digest, probe = detected.steps
    assert detected.entry.startswith("/cache/envbuild/overlays/base-localimage-x.sif-")
    assert digest.skip_if_exists == detected.digest_file == f"{detected.entry}/digest"
    assert probe.skip_if_exists == detected.probe_file and detected.probe_file.startswith(f"{detected.entry}/probe-")
    assert digest.lock == probe.lock == ("overlay", detected.entry.rsplit("/", 1)[1])
    (run,) = [a for a in probe.actions if isinstance(a, Run)]
    image_at = run.argv.index(BASE_SIF)
    assert run.argv[image_at + 1:] == ("/bin/sh", "-c", PROBE_SHELL, "envbuild-probe", "",
                                       f"/.envbuild-host/{detected.probe_file.rsplit('/', 1)[1]}.partial", PROBE_PYTHON)
    chosen = plan_overlay_base(overlay_request("lumi-venv-overlay"))
    # the same base file: the same entry; overlay.python would give another probe file, here both detect
    assert chosen.entry == detected.entry and chosen.probe_file == detected.probe_file


def test_an_interpreter_named_in_the_spec_gets_its_own_probe() -> None:
    from envbuild.envspec.loadspec import load_spec_text

    request = overlay_request("lumi-venv-overlay")
    text = request.source.text.replace("  mount: /opt/my-project\n", "  mount: /opt/my-project\n  python: /usr/bin/python3\n")
    named = with_overrides(request, spec=load_spec_text(text).spec, spec_text=text)
    base = plan_overlay_base(named)
    assert base.probe_file != plan_overlay_base(request).probe_file
    (run,) = [a for a in base.steps[1].actions if isinstance(a, Run)]
    assert "/usr/bin/python3" in run.argv


# --- split_requirements ----------------------------------------------------------------------------------


def test_split_keeps_what_the_base_satisfies_as_name_version_pins() -> None:
    split = split_requirements(["numpy<3", "transformers>=4.50", "accelerate"], LUMI_CONDA_PROBE)
    assert split.kept == ("numpy==1.26.4", "transformers==4.51.3", "accelerate==1.6.0")
    assert split.added == ()


def test_kept_pins_are_what_verify_and_the_inventory_read() -> None:
    """The record's packages.kept is read back with parse_pin (envbuild verify, envbuild inspect). (Found by this
    test: kept held 'numpy<3: numpy 1.26.4 from the base', which parse_pin cannot read, so verify saw no
    package as kept.)"""
    split = split_requirements(["numpy<3", "torch==2.6.0"], LUMI_CONDA_PROBE)
    assert [parse_pin(line) for line in split.kept] == [("numpy", "1.26.4"), ("torch", "2.6.0+rocm6.2.4")]


def test_split_a_version_without_local_label_matches_the_base_rocm_build() -> None:
    assert split_requirements(["torch==2.6.0"], LUMI_CONDA_PROBE).kept == ("torch==2.6.0+rocm6.2.4",)


def test_split_names_are_compared_canonically() -> None:
    split = split_requirements(["Typing-Extensions>=4", "NumPy"], LUMI_CONDA_PROBE)
    assert split.kept == ("typing_extensions==4.12.2", "numpy==1.26.4") and split.added == ()


def test_split_installs_a_requirement_with_extras_even_when_the_base_has_the_package() -> None:
    split = split_requirements(["accelerate[testing]", "transformers[torch]>=4.50"], LUMI_CONDA_PROBE)
    assert split.added == ("accelerate[testing]", "transformers[torch]>=4.50") and split.kept == ()


def test_split_installs_what_the_base_version_misses_or_lacks() -> None:
    split = split_requirements(["numpy>=2", "transformers==4.57.1", "peft", "accelerate"], LUMI_CONDA_PROBE)
    assert split.added == ("numpy>=2", "transformers==4.57.1", "peft")
    assert split.kept == ("accelerate==1.6.0",)


def test_split_installs_a_direct_url_requirement() -> None:
    split = split_requirements(["numpy @ https://example.invalid/numpy-1.26.4-cp312-none-any.whl"], LUMI_CONDA_PROBE)
    assert split.added == ("numpy @ https://example.invalid/numpy-1.26.4-cp312-none-any.whl",)


def test_split_counts_a_prerelease_in_the_base() -> None:
    probe = replace(LUMI_CONDA_PROBE, packages=("numpy==2.3.0rc1",))
    assert split_requirements(["numpy>=2"], probe).kept == ("numpy==2.3.0rc1",)


def test_split_lists_a_kept_package_once() -> None:
    split = split_requirements(["numpy", "numpy<3"], LUMI_CONDA_PROBE)
    assert split.kept == ("numpy==1.26.4",)


# --- the torch guard -------------------------------------------------------------------------------------


def test_a_different_torch_is_refused_naming_both_versions_and_the_fix() -> None:
    with pytest.raises(EnvbuildError) as info:
        check_torch(["numpy", "torch==2.7.1"], LUMI_CONDA_PROBE, allowed=False, spec_path="envs/x.yaml")
    message, hint = info.value.message, info.value.hint
    assert message.startswith("envs/x.yaml: the overlay asks for torch==2.7.1, but the base has torch 2.6.0+rocm6.2.4 "
                              "(in /opt/miniconda3/envs/pytorch)")
    assert "ROCm/CUDA libraries" in message
    assert hint is not None
    assert "drop the requirement (the base's 2.6.0+rocm6.2.4 is used)" in hint
    assert "choose a base image with the torch you need" in hint
    assert "overlay: {allow_torch_change: true}" in hint


@pytest.mark.parametrize("requirement", ["torchvision>=0.22", "pytorch-triton-rocm==3.3.0", "Torch<2.6"])
def test_the_whole_torch_family_is_guarded(requirement: str) -> None:
    with pytest.raises(EnvbuildError, match=re.escape(f"the overlay asks for {requirement}, but the base has")):
        check_torch([requirement], LUMI_CONDA_PROBE, allowed=False, spec_path="spec.yaml")


@pytest.mark.parametrize("requirements", [["torch==2.6.0"], ["torch>=2.5", "torchvision"], ["torchaudio==2.6.0"],
                                          ["numpy>=2"], []])
def test_torch_the_base_has_or_lacks_is_not_refused(requirements: list[str]) -> None:
    check_torch(requirements, LUMI_CONDA_PROBE, allowed=False, spec_path="spec.yaml")


def test_a_different_torch_is_allowed_when_the_spec_says_so() -> None:
    check_torch(["torch==2.7.1"], LUMI_CONDA_PROBE, allowed=True, spec_path="spec.yaml")


def test_plan_refuses_a_different_torch_and_allows_it_with_allow_torch_change() -> None:
    from envbuild.envspec.loadspec import load_spec_text

    request = overlay_request()
    text = request.source.text.replace('version: "2.6.0"', 'version: "2.7.1"')
    changed = with_overrides(request, spec=load_spec_text(text).spec, spec_text=text)
    with pytest.raises(EnvbuildError, match=r"^spec.yaml: the overlay asks for torch==2\.7\.1"):
        plan_overlay(changed, LUMI_CONDA_PROBE, spec_path="spec.yaml")
    text = text.replace("  processors: 4\n", "  processors: 4\n  allow_torch_change: true\n")
    allowed = plan_overlay(with_overrides(request, spec=load_spec_text(text).spec, spec_text=text), LUMI_CONDA_PROBE)
    assert "torch==2.7.1" in allowed.added and allowed.constraints == ()


def test_torch_constraints_pin_the_base_family() -> None:
    assert torch_constraints(LUMI_CONDA_PROBE, allowed=False) == (
        "torch==2.6.0+rocm6.2.4", "torchvision==0.21.0+rocm6.2.4", "pytorch-triton-rocm==3.2.0")
    assert torch_constraints(LUMI_VENV_PROBE, allowed=False) == ("torch==2.7.1+rocm6.4.1", "triton==3.3.1")
    assert torch_constraints(LUMI_CONDA_PROBE, allowed=True) == ()
    assert torch_constraints(replace(LUMI_CONDA_PROBE, packages=("numpy==1.26.4",)), allowed=False) == ()


# --- the mount check -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("mount", "hidden"), [
    ("/opt/miniconda3", "/opt/miniconda3/envs/pytorch"),
    ("/opt/miniconda3/envs/pytorch", "/opt/miniconda3/envs/pytorch"),
    ("/opt/miniconda3/envs/", "/opt/miniconda3/envs/pytorch"),
])
def test_a_mount_over_the_base_environment_is_refused(mount: str, hidden: str) -> None:
    with pytest.raises(EnvbuildError) as info:
        _check_mount(mount, LUMI_CONDA_PROBE, "envs/x.yaml")
    assert info.value.message == f"envs/x.yaml: overlay.mount {mount} would hide the base's Python environment {hidden}"
    assert info.value.hint == "mount the overlay elsewhere, e.g. overlay: {mount: /user-software}"


def test_a_mount_over_the_interpreter_is_refused() -> None:
    probe = replace(LUMI_VENV_PROBE, python="/opt/python/bin/python3.12")
    with pytest.raises(EnvbuildError, match=re.escape("would hide the base's Python environment /opt/python/bin/python3.12")):
        _check_mount("/opt/python", probe, "spec.yaml")


def test_a_mount_over_a_base_site_directory_is_refused() -> None:
    """/usr/local is no part of /opt/venv or its Python, but the base's packages in /usr/local/lib/python3.12/
    dist-packages would vanish under it. (Found by this test: only the prefix and the interpreter were checked.)"""
    hidden = "/usr/local/lib/python3.12/dist-packages"
    with pytest.raises(EnvbuildError, match=re.escape(f"would hide the base's Python environment {hidden}")):
        _check_mount("/usr/local", LUMI_VENV_PROBE, "spec.yaml")


@pytest.mark.parametrize("mount", ["/user-software", "/opt/miniconda3-extra", "/opt/my-project"])
def test_a_mount_beside_the_base_environment_is_accepted(mount: str) -> None:
    _check_mount(mount, LUMI_CONDA_PROBE, "spec.yaml")


def test_plan_refuses_a_mount_that_hides_the_base_prefix() -> None:
    from envbuild.envspec.loadspec import load_spec_text

    request = overlay_request("lumi-venv-overlay")
    text = request.source.text.replace("mount: /opt/my-project", "mount: /opt/venv")
    hiding = with_overrides(request, spec=load_spec_text(text).spec, spec_text=text)
    with pytest.raises(EnvbuildError) as info:
        plan_overlay(hiding, LUMI_VENV_PROBE, spec_path="envs/v.yaml")
    assert info.value.message == "envs/v.yaml: overlay.mount /opt/venv would hide the base's Python environment /opt/venv"


# --- the key ---------------------------------------------------------------------------------------------


def key_of(probe: BaseProbe = LUMI_CONDA_PROBE, **overrides: object) -> str:
    return overlay_key(overlay_request(**overrides), probe)


def test_key_is_stable_for_equal_inputs() -> None:
    assert key_of() == key_of()
    assert len(key_of()) == 64
    # where the build happens and what it is called do not change the bytes
    assert key_of(build_id="other", output="/elsewhere/y.sqsh", built_at="2030-01-01T00:00:00Z") == key_of()
    # the base's path does: the record names it (envrun --overlay without --image runs on it, errors name it)
    assert key_of(base_path="/scratch/copy-of-x.sif") != key_of()


@pytest.mark.parametrize(("what", "probe", "overrides"), [
    ("spec sha", LUMI_CONDA_PROBE, {"spec_sha256": "f" * 64}),
    ("base digest", LUMI_CONDA_PROBE, {"base_digest": "sha256:" + "e" * 64}),
    ("compression", LUMI_CONDA_PROBE, {"compression": "zstd:19"}),
    ("source date epoch", LUMI_CONDA_PROBE, {"source_date_epoch": 1_700_000_000}),
    ("lock", LUMI_CONDA_PROBE, {"lock_sha256": "a" * 64}),
    ("pip sources", LUMI_CONDA_PROBE, {"facts": replace(FIXED_FACTS, pip=PipSettings(index_url="https://pypi.site/simple"))}),
    ("uv version", LUMI_CONDA_PROBE, {"facts": replace(FIXED_FACTS, uv_version="0.14.0")}),
    ("installer", LUMI_CONDA_PROBE, {"facts": replace(FIXED_FACTS, uv=None)}),
    ("envbuild version", LUMI_CONDA_PROBE, {"facts": replace(FIXED_FACTS, envbuild_version="9.9.9")}),
    ("probe packages", replace(LUMI_CONDA_PROBE, packages=(*LUMI_CONDA_PROBE.packages, "six==1.17.0")), {}),
    ("probe python", replace(LUMI_CONDA_PROBE, version="3.12.10"), {}),
    ("probe interpreter", replace(LUMI_CONDA_PROBE, python="/opt/miniconda3/envs/pytorch/bin/python3.12"), {}),
    ("probe activation", replace(LUMI_CONDA_PROBE, activation=""), {}),
])
def test_key_changes_with_what_decides_the_overlay(what: str, probe: BaseProbe, overrides: dict[str, object]) -> None:
    assert key_of(probe, **overrides) != key_of(), what


def test_key_follows_the_installer_it_uses() -> None:
    pip_facts = replace(FIXED_FACTS, uv=None)
    assert key_of(facts=replace(pip_facts, pip_version="26.0")) != key_of(facts=pip_facts)
    assert key_of(LUMI_VENV_PROBE, facts=replace(FIXED_FACTS, pip_version="26.0")) != key_of(LUMI_VENV_PROBE)
    # uv installs this one: pip's version does not change its bytes
    assert key_of(facts=replace(FIXED_FACTS, pip_version="26.0")) == key_of()


def test_key_names_the_store_entry() -> None:
    assert plan_overlay(overlay_request(), LUMI_CONDA_PROBE).key == key_of()
    other = plan_overlay(overlay_request(base_digest="sha256:" + "e" * 64), LUMI_CONDA_PROBE)
    assert other.entry != plan_overlay(overlay_request(), LUMI_CONDA_PROBE).entry


# --- the record ------------------------------------------------------------------------------------------


def test_record_has_every_key_and_check_record_accepts_it() -> None:
    plan = plan_overlay(overlay_request(), LUMI_CONDA_PROBE)
    record = written_record(plan)
    assert set(RECORD_KEYS) <= set(record)
    assert check_record(record, "overlay.json") is record


def test_record_describes_the_build() -> None:
    request = overlay_request()
    plan = plan_overlay(request, LUMI_CONDA_PROBE)
    record = written_record(plan)
    assert record == overlay_record(request, LUMI_CONDA_PROBE, split_requirements(
        request.spec.python.requirements(), LUMI_CONDA_PROBE), plan.key)
    assert record["kind"] == "overlay" and record["name"] == "lumi-conda-overlay"
    assert record["mount"] == "/user-software" and record["key"] == plan.key and record["system"] == "lumi-g"
    assert record["base"] == {"ref": f"localimage:{BASE_SIF}", "path": BASE_SIF, "digest": FIXED_BASE_DIGEST,
                              "sif_id": BASE_SIF_ID, "size": BASE_SIZE}
    assert record["python"] == LUMI_CONDA_PROBE.as_record()
    assert record["requirements"] == ["torch==2.6.0", "transformers>=4.50", "numpy<3", "accelerate[testing]", "peft==0.15.2"]
    assert record["packages"] == {"kept": list(plan.kept), "added": []}
    assert record["installer"] == {"name": "uv", "version": "0.13.9"}
    assert record["lock"] is None
    assert record["spec"] == {"name": "lumi-conda-overlay", "sha256": request.source.sha256}


def test_record_with_a_lock_names_it_and_the_lock_is_written_beside_it() -> None:
    request = overlay_request(lock_text="torch==2.6.0\n", lock_sha256="d" * 64, lock_python="3.12")
    plan = plan_overlay(request, LUMI_CONDA_PROBE)
    assert written_record(plan)["lock"] == {"sha256": "d" * 64, "python": "3.12"}
    written = {a.path: a.content for a in step_named(plan, "install").actions if isinstance(a, WriteFile)}
    assert written[f"{plan.venv_dir}/.envbuild/spec.lock"] == "torch==2.6.0\n"
    assert written[f"{plan.venv_dir}/.envbuild/spec.yaml"] == request.source.text
