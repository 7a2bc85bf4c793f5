"""Package sources with credentials (https://user:token@host/simple in pip.conf or PIP_EXTRA_INDEX_URL): the
installers get them from their environment at install time, never on a command line (ps shows those to every
user) and never in anything written: plans, layer keys, lock files."""

from __future__ import annotations

import shlex
from dataclasses import replace

from envbuild.builder.plan.actions import Run
from envbuild.builder.plan.install import host_index_args, host_index_env
from envbuild.builder.plan.layers import env_compat_key, env_key
from envbuild.builder.plan.overlayplan import overlay_key, plan_overlay
from envbuild.builder.plan.planrender import render_build_plan, render_steps
from envbuild.envspec.loadspec import load_spec_text
from envbuild.host.pip import PipSettings
from envbuild.lock.fileformat import render_lock
from envbuild.lock.lockmodel import Lock, LockedPackage, LockTarget, lock_inputs
from tests.builder.test_overlayplan import LUMI_CONDA_PROBE, LUMI_VENV_PROBE, overlay_request
from tests.support.plan_fixtures import FIXED_FACTS, fixed_plan, fixed_request

SECRET = "pw-CANARY-1"
OTHER_SECRET = "pw-CANARY-2"


def pip_with(secret: str) -> PipSettings:
    return PipSettings(index_url=f"https://idx:{secret}@pypi.site/simple",
                       extra_index_urls=("file:///opt/pypi/simple", f"https://x:{secret}@extra.site/simple"),
                       find_links=("/opt/wheels",), cert="/etc/ssl/certs/ca-certificates.crt")


def facts_with(secret: str = SECRET, **changes: object):
    return replace(FIXED_FACTS, pip=pip_with(secret), **changes)


def runs(steps) -> list[Run]:
    return [a for step in steps for a in step.actions if isinstance(a, Run)]


def install_run(steps) -> Run:
    """The installer's run; one wrapped in `sh -ec` (an overlay's venv before it, the package list after it), as
    its own words."""
    for run in runs(steps):
        if "install" in run.argv:
            return run
        line = next((x for x in run.argv[-1].split("\n") if " install " in x), None)
        if tuple(run.argv[-3:-1]) == ("/bin/sh", "-ec") and line:
            return replace(run, argv=(*run.argv[:-3], *shlex.split(line)))
    raise AssertionError("no installer run")


def test_uv_gets_credentialed_sources_from_its_environment_not_its_command_line() -> None:
    plan = fixed_plan("envs/local-cpu-pytorch.yaml", facts=facts_with())
    assert not [r.argv for r in runs(plan.steps) if any(SECRET in arg for arg in r.argv)]
    env = dict(install_run(plan.steps).env)
    assert env["APPTAINERENV_UV_INDEX_URL"] == f"https://idx:{SECRET}@pypi.site/simple"
    # In their order; local ones are still bound in and rewritten.
    assert env["APPTAINERENV_UV_EXTRA_INDEX_URL"] == f"file:///.envbuild-host/src0/simple https://x:{SECRET}@extra.site/simple"
    argv = install_run(plan.steps).argv
    assert "--index-url" not in argv and "--extra-index-url" not in argv
    assert argv[argv.index("--find-links") + 1] == "/.envbuild-host/src1"  # no credentials: still a flag
    text = render_build_plan(plan)
    assert SECRET not in text and "APPTAINERENV_UV_INDEX_URL=https://***@pypi.site/simple" in text


def test_pip_gets_them_as_pip_variables() -> None:
    plan = fixed_plan("envs/local-cpu-pytorch.yaml", facts=facts_with(uv=None))
    env = dict(install_run(plan.steps).env)
    assert env["APPTAINERENV_PIP_INDEX_URL"] == f"https://idx:{SECRET}@pypi.site/simple"
    assert env["APPTAINERENV_PIP_EXTRA_INDEX_URL"].endswith(f"https://x:{SECRET}@extra.site/simple")
    assert not [r.argv for r in runs(plan.steps) if any(SECRET in arg for arg in r.argv)]


def test_sources_without_credentials_stay_flags() -> None:
    plan = fixed_plan("envs/local-cpu-pytorch.yaml")
    run = install_run(plan.steps)
    assert "--extra-index-url" in run.argv and not [k for k, _ in run.env if "INDEX_URL" in k or "FIND_LINKS" in k]


def test_layer_keys_hold_no_credentials_and_survive_a_rotated_token() -> None:
    first, rotated = fixed_request("envs/local-cpu-pytorch.yaml", facts=facts_with()), \
        fixed_request("envs/local-cpu-pytorch.yaml", facts=facts_with(OTHER_SECRET))
    assert env_key(first, "uv", "base") == env_key(rotated, "uv", "base")
    assert env_compat_key(first, "uv", "base") == env_compat_key(rotated, "uv", "base")
    # Another host is another key: the sources still count, only without their credentials.
    elsewhere = replace(FIXED_FACTS, pip=replace(pip_with(SECRET), index_url=f"https://idx:{SECRET}@other.site/simple"))
    assert env_key(first, "uv", "base") != env_key(fixed_request("envs/local-cpu-pytorch.yaml", facts=elsewhere), "uv", "base")


def test_overlay_installs_take_credentials_from_the_environment_and_key_without_them() -> None:
    request = overlay_request("lumi-venv-overlay", facts=facts_with())
    plan = plan_overlay(request, LUMI_VENV_PROBE)
    assert not [r.argv for r in runs(plan.steps) if any(SECRET in arg for arg in r.argv)]
    env = dict(install_run(plan.steps).env)
    assert env["APPTAINERENV_PIP_INDEX_URL"] == f"https://idx:{SECRET}@pypi.site/simple"
    assert SECRET not in render_steps("overlay", plan.steps)
    rotated = overlay_request("lumi-venv-overlay", facts=facts_with(OTHER_SECRET))
    assert overlay_key(request, LUMI_VENV_PROBE) == overlay_key(rotated, LUMI_VENV_PROBE)


def test_overlay_installs_with_uv_take_credentials_and_the_certificate_from_the_environment() -> None:
    request = overlay_request(facts=facts_with())
    plan = plan_overlay(request, LUMI_CONDA_PROBE)
    assert not [r.argv for r in runs(plan.steps) if any(SECRET in arg for arg in r.argv)]
    run = install_run(plan.steps)
    env = dict(run.env)
    assert "--dry-run" in run.argv  # uv's dry run against the base, then its install: both read these
    assert env["APPTAINERENV_UV_INDEX_URL"] == f"https://idx:{SECRET}@pypi.site/simple"
    assert env["APPTAINERENV_UV_EXTRA_INDEX_URL"].endswith(f"https://x:{SECRET}@extra.site/simple")
    assert env["APPTAINERENV_SSL_CERT_FILE"] == "/.envbuild-host/ca-bundle.pem"
    assert SECRET not in render_steps("overlay", plan.steps)


def test_lock_resolution_passes_credentials_by_environment() -> None:
    request = fixed_request("envs/local-cpu-pytorch.yaml", facts=facts_with())
    assert not [arg for arg in host_index_args(request) if SECRET in arg]
    env = dict(host_index_env(request))
    assert env["UV_INDEX_URL"].endswith("@pypi.site/simple") and SECRET in env["UV_EXTRA_INDEX_URL"]
    assert env["UV_EXTRA_INDEX_URL"] == f"file:///opt/pypi/simple https://x:{SECRET}@extra.site/simple"


def test_lock_files_record_spec_urls_without_credentials() -> None:
    spec = load_spec_text(f"""\
name: tiny
system: local
base: {{debootstrap: bookworm, mirror: "http://deb:{SECRET}@mirror.site/debian"}}
python:
  pytorch: {{version: "2.13.0", variant: cpu, index_url: "https://t:{SECRET}@torch.site/whl"}}
""").spec
    inputs = lock_inputs(spec, spec.python.pytorch.index_url)
    assert inputs.torch_index == "https://***@torch.site/whl" and "mirror=http://***@mirror.site/debian" in inputs.base
    lock = Lock(inputs=inputs, target=LockTarget("3.11.2", "x86_64-manylinux_2_36"), base_digest="sha256:" + "a" * 64,
                recipe_digest="sha256:" + "b" * 64, resolver="uv 0.13.9",
                packages=(LockedPackage("six", "1.17.0", ("sha256:" + "c" * 64,)),), spec_name="tiny")
    assert SECRET not in render_lock(lock, spec_path_for_comment="tiny.yaml")
