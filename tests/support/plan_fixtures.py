"""Fixed host facts so that plans are the same on every machine (golden tests)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from envbuild.builder.plan.imageplan import plan_base, plan_build
from envbuild.builder.plan.plandata import BasePlan, BuildPlan, BuildRequest, ImageOptions, SpecSource
from envbuild.envspec.loadspec import load_spec
from envbuild.host.buildhost import HostFacts, Runtime
from envbuild.host.pip import PipSettings
from envbuild.recipes.loadrecipe import load_recipe

REPO = Path(__file__).resolve().parents[2]

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
    pip_module="/opt/envbuild-venv/lib/python3.11/site-packages/pip",
    pip_version="25.2",
    python="/opt/envbuild-venv/bin/python",
    cpus=8,
    runtime_version="apptainer version 1.4.5",
    host_info=(("hostname", "buildhost"), ("kernel", "6.1.0"), ("machine", "x86_64"), ("os", "Debian GNU/Linux 12 (bookworm)")),
)
FIXED_BASE_DIGEST = "sha256:" + "b" * 64


# Where each flat override name of fixed_request lives in the grouped BuildRequest.
_OVERRIDE_GROUPS = {
    "spec": ("source", "spec"), "spec_text": ("source", "text"), "spec_sha256": ("source", "sha256"),
    "spec_dir": ("source", "directory"), "file_digests": ("source", "file_digests"),
    "base_path": ("base", "path"), "base_fingerprint": ("base", "fingerprint"), "base_digest": ("base", "digest"),
    "base_sif_id": ("base", "sif_id"), "base_size": ("base", "size"),
    "locked_requirements": ("lock", "requirements"), "lock_text": ("lock", "text"), "lock_sha256": ("lock", "sha256"),
    "lock_python": ("lock", "python"),
    "output": ("options", "output"), "build_id": ("options", "build_id"), "as_root": ("options", "as_root"),
    "keep_work": ("options", "keep_work"), "compression": ("options", "compression"),
    "source_date_epoch": ("options", "source_date_epoch"), "built_at": ("options", "built_at"),
}


def with_overrides(request: BuildRequest, **overrides: object) -> BuildRequest:
    """`request` with fields replaced by their flat names (spec_text=, base_digest=, env_parent=, ...)."""
    groups: dict[str, dict[str, object]] = {}
    top: dict[str, object] = {}
    for name, value in overrides.items():
        if name in _OVERRIDE_GROUPS:
            group, field = _OVERRIDE_GROUPS[name]
            groups.setdefault(group, {})[field] = value
        else:
            top[name] = value
    for group, fields in groups.items():
        top[group] = replace(getattr(request, group), **fields)
    return replace(request, **top)


def fixed_request(spec_file: str, *, check_host: bool = True, **overrides: object) -> BuildRequest:
    """A request for the spec REPO/SPEC_FILE with FIXED_FACTS. check_host=False for a spec whose base is
    not on this machine (an overlay on /appl/local/...)."""
    loaded = load_spec(REPO / spec_file, check_host=check_host)
    facts = overrides.pop("facts", FIXED_FACTS)
    fields: dict[str, object] = {"base_digest": FIXED_BASE_DIGEST, "recipe_digest": "sha256:" + "c" * 64,
                                 "built_at": "2026-11-22T00:00:00Z"}
    fields.update(overrides)
    request = BuildRequest(
        source=SpecSource(spec=loaded.spec, text=loaded.text, sha256=loaded.sha256, directory="/specs"),
        recipe=load_recipe(loaded.spec.system), facts=facts,  # type: ignore[arg-type]
        options=ImageOptions(output=f"/out/{loaded.spec.name}.sif", build_id="test"),
    )
    return with_overrides(request, **fields)


def fixed_plan(spec_file: str, **overrides: object) -> BuildPlan:
    return plan_build(fixed_request(spec_file, **overrides))


def fixed_base_plan(spec_file: str, **overrides: object) -> BasePlan:
    return plan_base(fixed_request(spec_file, **overrides))


def session_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty store at tmp_path/store that a build session's host facts point at (FIXED_FACTS otherwise), for
    the `store` fixtures of the session tests."""
    import envbuild.host.buildhost

    root = tmp_path / "store"
    root.mkdir()
    facts = replace(FIXED_FACTS, cache_dir=root)
    monkeypatch.setattr(envbuild.host.buildhost, "gather_host_facts", lambda **_: facts)
    return root
