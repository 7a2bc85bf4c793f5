"""Fixed host facts so that plans are the same on every machine (golden tests)."""

from __future__ import annotations

from pathlib import Path

from envbuild.build.plan import BasePlan, BuildPlan, BuildRequest, plan_base, plan_build
from envbuild.host.facts import HostFacts, Runtime
from envbuild.host.pip import PipSettings
from envbuild.recipes.load import load_recipe
from envbuild.spec.load import load_spec

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
    uv_version="0.13.9",
    python="/opt/envbuild-venv/bin/python",
    cpus=8,
    runtime_version="apptainer version 1.4.5",
    host_info=(("hostname", "buildhost"), ("kernel", "6.1.0"), ("machine", "x86_64"), ("os", "Debian GNU/Linux 12 (bookworm)")),
)
FIXED_BASE_DIGEST = "sha256:" + "b" * 64


def fixed_request(spec_file: str, **overrides: object) -> BuildRequest:
    loaded = load_spec(REPO / spec_file)
    facts = overrides.pop("facts", FIXED_FACTS)
    fields: dict[str, object] = {"base_digest": FIXED_BASE_DIGEST, "recipe_digest": "sha256:" + "c" * 64,
                                 "built_at": "2026-11-22T00:00:00Z"}
    fields.update(overrides)
    return BuildRequest(
        spec=loaded.spec, spec_text=loaded.text, spec_sha256=loaded.sha256, spec_dir="/specs",
        recipe=load_recipe(loaded.spec.system), facts=facts, output=f"/out/{loaded.spec.name}.sif",
        build_id="test", **fields,  # type: ignore[arg-type]
    )


def fixed_plan(spec_file: str, **overrides: object) -> BuildPlan:
    return plan_build(fixed_request(spec_file, **overrides))


def fixed_base_plan(spec_file: str, **overrides: object) -> BasePlan:
    return plan_base(fixed_request(spec_file, **overrides))
