"""A spec that would bake a secret into its image loads with a located warning (not an error)."""

from __future__ import annotations

from envbuild.envspec.loadspec import load_spec_text

SPEC = """\
name: leaky
system: local
base: debootstrap:bookworm
python:
  packages: [six]
env:
  HF_TOKEN: hf_abcdefghijklmnopqrstuvwxyz0123
  TOKENIZERS_PARALLELISM: "false"
  HF_HUB_DISABLE_IMPLICIT_TOKEN: "1"
  HF_TOKEN_PATH: /scratch/me/token
  DB_PASSWORD: hunter2
  MIRROR: https://bob:s3cret@mirror.site/simple
labels:
  api_key: k-123
  maintainer: me
post:
  - pip download --index-url https://u:pw@mirror.site/simple six
"""


def test_secret_looking_values_are_warned_about_with_their_place() -> None:
    loaded = load_spec_text(SPEC, "leaky.yaml")
    found = {(w.field, w.line): w for w in loaded.warnings}
    assert set(found) == {("env.HF_TOKEN", 7), ("env.DB_PASSWORD", 11), ("env.MIRROR", 12), ("labels.api_key", 14),
                          ("post[0]", 17)}
    token = found[("env.HF_TOKEN", 7)]
    assert "access token" in token.message and "environment script" in token.message
    assert "export HF_TOKEN=" in (token.hint or "")
    assert "user name and password" in found[("post[0]", 17)].message
    assert "pip configuration" in (found[("post[0]", 17)].hint or "")
    # The value itself is never repeated in a warning (it would land in a CI log).
    assert not [w for w in loaded.warnings if "hunter2" in w.render() or "s3cret" in w.render()]


def test_a_clean_spec_has_no_warnings() -> None:
    assert load_spec_text("name: ok\nsystem: local\nbase: debootstrap:bookworm\nenv: {HF_HOME: /scratch/hf}\n").warnings == ()
