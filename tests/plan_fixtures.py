"""Fixed host facts so that plans are the same on every machine (golden tests)."""

from __future__ import annotations

from pathlib import Path

from envbuild.buildplan import BuildPlan, BuildRequest, plan_build
from envbuild.hostfacts import HostFacts, Runtime
from envbuild.hostpip import PipSettings
from envbuild.recipes import load_recipe
from envbuild.specload import load_spec

REPO = Path(__file__).resolve().parent.parent

FIXED_FACTS = HostFacts(
    runtime=Runtime("/usr/bin/apptainer", "apptainer"),
    pip=PipSettings(
        extra_index_urls=("file:///opt/pypi/simple",),
        find_links=("/opt/wheels",),
        cert="/etc/ssl/certs/ca-certificates.crt",
    ),
    uv="/opt/envbuild-venv/bin/uv",
    debian_mirror="http://mirror.invalid/debian",
    cache_dir=Path("/cache/envbuild"),
    envbuild_version="0.0.0-test",
    proxy_env=(("https_proxy", "http://proxy.invalid:3128"),),
)


def fixed_plan(spec_file: str, **overrides: object) -> BuildPlan:
    loaded = load_spec(REPO / spec_file)
    facts = overrides.pop("facts", FIXED_FACTS)
    request = BuildRequest(
        spec=loaded.spec, spec_text=loaded.text, spec_sha256=loaded.sha256, spec_dir="/specs",
        recipe=load_recipe(loaded.spec.system), facts=facts, output=f"/out/{loaded.spec.name}.sif",
        build_id="test", **overrides,
    )
    return plan_build(request)
