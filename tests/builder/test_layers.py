"""Layer keys and parent choice are pure: what changes which key, and which env layer a build starts from."""

from __future__ import annotations

from dataclasses import replace

from envbuild.builder.plan.actions import CopyTree, GuardTree
from envbuild.builder.plan.layers import choose_env_parent, plan_layers
from tests.support.plan_fixtures import FIXED_FACTS, fixed_plan, fixed_request, with_overrides

SPEC = "envs/local-cpu-pytorch.yaml"


def layers(**overrides: object):
    return plan_layers(fixed_request(SPEC, **overrides))


def with_spec_text(text_change: tuple[str, str]) -> object:
    request = fixed_request(SPEC)
    from envbuild.envspec.loadspec import load_spec_text

    text = request.source.text.replace(*text_change)
    assert text != request.source.text
    loaded = load_spec_text(text, "spec.yaml")
    return plan_layers(with_overrides(request, spec=loaded.spec, spec_text=text, spec_sha256=loaded.sha256))


def test_same_inputs_same_keys() -> None:
    assert layers() == layers()


def test_user_layer_change_keeps_the_env_key() -> None:
    changed = with_spec_text(('TOKENIZERS_PARALLELISM: "false"', 'TOKENIZERS_PARALLELISM: "true"'))
    assert changed.env_key == layers().env_key
    assert changed.image_key != layers().image_key


def test_package_change_changes_env_but_not_compat() -> None:
    changed = with_spec_text(("    - accelerate", "    - accelerate\n    - rich"))
    assert changed.env_key != layers().env_key
    assert changed.env_compat == layers().env_compat


def test_base_digest_installer_and_sources_change_the_env_key() -> None:
    base = layers()
    assert layers(base_digest="sha256:" + "d" * 64).env_key != base.env_key
    assert layers(facts=replace(FIXED_FACTS, uv_version="0.14.0")).env_key != base.env_key
    assert layers(facts=replace(FIXED_FACTS, pip=replace(FIXED_FACTS.pip, find_links=("/other",)))).env_compat != base.env_compat


def test_lock_and_compression_change_the_image_key() -> None:
    base = layers()
    locked = layers(locked_requirements="six==1.17.0 --hash=sha256:" + "a" * 64 + "\n", lock_text="x")
    assert locked.env_key != base.env_key and locked.image_key != base.image_key
    zstd = layers(compression="zstd")
    assert zstd.env_key == base.env_key and zstd.image_key != base.image_key


def test_parent_env_is_used_as_the_starting_tree() -> None:
    plan = fixed_plan(SPEC, env_parent="local-cpu-pytorch-0123456789abcdef")
    env = next(s for s in plan.steps if s.name == "env")
    copy = next(a for a in env.actions if isinstance(a, CopyTree))
    assert copy.src == "/cache/envbuild/envs/local-cpu-pytorch-0123456789abcdef/rootfs" and copy.hardlink
    guard = next(a for a in env.actions if isinstance(a, GuardTree))
    assert guard.invalidate == "/cache/envbuild/envs/local-cpu-pytorch-0123456789abcdef/complete"
    assert "install the difference" in env.title


def _candidate(name: str, compat: str, requirements: list[str], freeze: list[str], used: float = 0.0):
    return (name, {"kind": "env", "compat": compat, "requirements": requirements}, freeze, used)


def test_parent_choice_unlocked_takes_the_largest_subset() -> None:
    candidates = [
        _candidate("small", "c", ["six"], ["pip==23.0.1", "six==1.17.0"]),
        _candidate("big", "c", ["six", "idna"], ["pip==23.0.1", "six==1.17.0", "idna==3.20"]),
        _candidate("too-much", "c", ["six", "rich"], ["six==1.17.0", "rich==13.9.4"]),
        _candidate("other-base", "x", ["six", "idna"], ["six==1.17.0", "idna==3.20"]),
    ]
    assert choose_env_parent(candidates, compat="c", requirements=["six", "idna", "attrs"], locked=None) == "big"
    assert choose_env_parent(candidates, compat="c", requirements=["attrs"], locked=None) is None


def test_parent_choice_locked_needs_every_package_at_the_locked_version() -> None:
    lock = "six==1.17.0 \\\n    --hash=sha256:aa\nidna==3.20 --hash=sha256:bb\n"
    candidates = [
        _candidate("same", "c", ["six"], ["pip==23.0.1", "setuptools==66.1.1", "six==1.17.0"]),
        _candidate("older", "c", ["six", "idna"], ["six==1.16.0", "idna==3.20"]),
    ]
    assert choose_env_parent(candidates, compat="c", requirements=["six", "idna"], locked=lock) == "same"
