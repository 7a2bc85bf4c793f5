"""Post commands (an imported file's %post and RUN lines) get the build's network settings when they run, as
envbuild's own installs do: the host's package sources (rewritten to where they are bound inside the sandbox),
its CA bundle and its proxy variables. Nothing of them is written into the image, its labels, its environment
script or its record, and a credential in them is shown redacted in the plan."""

from __future__ import annotations

from dataclasses import replace

from envbuild.builder.plan.actions import MakeDirs, MergeJson, Remove, Run, Touch, WriteFile
from envbuild.builder.plan.condaplan import plan_conda_build
from envbuild.builder.plan.imageplan import plan_build
from envbuild.builder.plan.planrender import render_build_plan
from envbuild.envspec.loadspec import load_spec_text
from envbuild.host.pip import PipSettings
from tests.builder.test_condaplan import TOOL
from tests.builder.test_condaplan import request_for as conda_request_for
from tests.support.plan_fixtures import FIXED_FACTS, fixed_request

SECRET = "pw-CANARY-post"
PROXY = f"http://proxyuser:{SECRET}@proxy.site:3128"
SITE_PIP = PipSettings(index_url=f"https://idx:{SECRET}@mirror.site/simple", extra_index_urls=("file:///srv/pypi/simple",),
                       find_links=("/srv/wheels",), trusted_hosts=("mirror.site",), cert="/srv/site-ca.pem",
                       client_cert="/srv/client.pem")
SITE_FACTS = replace(FIXED_FACTS, pip=SITE_PIP, proxy_env=(("https_proxy", PROXY), ("no_proxy", "localhost")))

SPEC = """\
name: post-net
system: local
base: debootstrap:bookworm
python:
  packages: [six]
post:
  - python3 -m pip install -r /opt/requirements.txt
  - python3 -m pip download --no-deps -d /tmp/dl six
"""


def post_runs(plan) -> list[Run]:
    step = next(s for s in plan.steps if s.name == "post")
    return [a for a in step.actions if isinstance(a, Run)]


def image_plan(spec_text: str = SPEC, facts=SITE_FACTS):
    loaded = load_spec_text(spec_text)
    request = fixed_request("envs/local-cpu-pytorch.yaml", facts=facts, spec=loaded.spec, spec_text=loaded.text)
    return plan_build(request)


def test_each_post_command_gets_the_hosts_pip_sources_ca_bundle_and_proxy() -> None:
    runs = post_runs(image_plan())
    assert len(runs) == 2
    for run in runs:
        env = dict(run.env)
        assert env["APPTAINERENV_PIP_INDEX_URL"] == f"https://idx:{SECRET}@mirror.site/simple"
        assert env["APPTAINERENV_PIP_EXTRA_INDEX_URL"] == "file:///.envbuild-host/src0/simple"
        assert env["APPTAINERENV_PIP_FIND_LINKS"] == "/.envbuild-host/src1"
        assert env["APPTAINERENV_PIP_TRUSTED_HOST"] == "mirror.site"
        for variable in ("PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"):
            assert env[f"APPTAINERENV_{variable}"] == "/.envbuild-host/ca-bundle.pem"
        assert env["APPTAINERENV_PIP_CLIENT_CERT"] == "/.envbuild-host/client-cert.pem"
        assert env["APPTAINERENV_https_proxy"] == PROXY and env["APPTAINERENV_no_proxy"] == "localhost"
        binds = [run.argv[i + 1] for i, word in enumerate(run.argv) if word == "--bind"]
        assert sorted(binds) == ["/srv/client.pem:/.envbuild-host/client-cert.pem:ro", "/srv/pypi:/.envbuild-host/src0:ro",
                                 "/srv/site-ca.pem:/.envbuild-host/ca-bundle.pem:ro", "/srv/wheels:/.envbuild-host/src1:ro"]
        # A credential never on a command line (every user of the machine sees those).
        assert not [word for word in run.argv if SECRET in word]


def test_the_mount_points_are_made_before_and_gone_after_the_commands() -> None:
    plan = image_plan()
    actions = next(s for s in plan.steps if s.name == "post").actions
    sandbox = plan.sandbox
    assert isinstance(actions[0], MakeDirs) and f"{sandbox}/.envbuild-host/src1" in actions[0].paths
    assert isinstance(actions[1], Touch) and f"{sandbox}/.envbuild-host/ca-bundle.pem" in actions[1].paths
    assert isinstance(actions[-1], Remove) and actions[-1].paths == (f"{sandbox}/.envbuild-host",)


def test_nothing_of_the_settings_is_written_into_the_image_or_shown_unredacted() -> None:
    plan = image_plan()
    written = [a for s in plan.steps for a in s.actions if isinstance(a, WriteFile | MergeJson)]
    assert written
    for action in written:
        text = action.content if isinstance(action, WriteFile) else repr(action)
        for value in (SECRET, "proxy.site", "mirror.site", "/srv/", "ca-bundle.pem", "PIP_"):
            assert value not in text, (action, value)
    shown = render_build_plan(plan)
    assert SECRET not in shown and "APPTAINERENV_PIP_INDEX_URL=https://***@mirror.site/simple" in shown


def test_a_host_without_pip_configuration_gives_post_commands_only_its_proxy() -> None:
    runs = post_runs(image_plan(facts=replace(SITE_FACTS, pip=PipSettings())))
    assert all(dict(run.env).keys() == {"APPTAINERENV_https_proxy", "APPTAINERENV_no_proxy"} for run in runs)
    plan = image_plan(facts=replace(SITE_FACTS, pip=PipSettings()))
    assert [type(a) for a in next(s for s in plan.steps if s.name == "post").actions] == [Run, Run]


def test_no_post_commands_no_post_step() -> None:
    assert "post" not in [s.name for s in image_plan(SPEC.split("post:")[0]).steps]


def test_a_conda_builds_post_commands_get_them_too() -> None:
    text = """\
name: conda-post
system: lumi-g
base: docker://docker.io/library/ubuntu:24.04
conda:
  channels: [conda-forge]
  dependencies: [python=3.12]
  accept_licenses: true
post:
  - python -m pip install six
"""
    plan = plan_conda_build(conda_request_for(text, facts=SITE_FACTS), TOOL)
    (run,) = post_runs(plan)
    assert dict(run.env)["APPTAINERENV_PIP_INDEX_URL"] == f"https://idx:{SECRET}@mirror.site/simple"
    assert "/srv/site-ca.pem:/.envbuild-host/ca-bundle.pem:ro" in run.argv
