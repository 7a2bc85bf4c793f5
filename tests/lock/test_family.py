"""The torch family check on locks: after `envbuild lock` resolves (only the pins' labels are known), and
on the lock a `--locked` build is about to install."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from envbuild.builder.sessions.buildrequest import load_fresh_lock, torch_index_for
from envbuild.envspec.loadspec import load_spec
from envbuild.inventory.installedtorch import check_locked_family
from envbuild.lock.fileformat import render_lock
from envbuild.lock.lockmodel import Lock, LockedPackage, LockTarget, lock_inputs
from envbuild.shared.errors import EnvbuildError

H = "sha256:" + "a" * 64
# The issue's spec: torch's CPU build and torchvision listed next to it.
ISSUE_SPEC = """\
name: issue14
system: local
base: debootstrap:bookworm
python:
  pytorch: {version: "2.13.0", variant: cpu}
  packages: [torchvision]
"""


def pins(**versions: str) -> tuple[LockedPackage, ...]:
    return tuple(LockedPackage(name, version, (H,)) for name, version in versions.items())


def test_a_resolution_with_pypis_torchvision_next_to_a_cpu_torch_is_refused() -> None:
    with pytest.raises(EnvbuildError) as caught:
        check_locked_family(pins(torch="2.13.0+cpu", torchvision="0.28.0", numpy="2.3.0"), "the resolution of x.yaml",
                            then="run `envbuild lock x.yaml` again")
    assert caught.value.message.startswith("torch family mismatch in the resolution of x.yaml")
    assert ("torchvision 0.28.0 is PyPI's default build (no variant label; on Linux x86_64 a CUDA build), but torch "
            "2.13.0+cpu is the CPU-only build (cpu)") in caught.value.message
    assert (caught.value.hint or "").endswith("then run `envbuild lock x.yaml` again")


@pytest.mark.parametrize("packages", [
    {"torch": "2.13.0+cpu", "torchvision": "0.28.0+cpu", "torchaudio": "2.13.0+cpu"},
    {"torch": "2.13.0", "torchvision": "0.28.0", "triton": "3.5.0"},  # PyPI's builds, made together
    {"torchvision": "0.28.0"},  # no torch: nothing to compare with
    {"six": "1.17.0"},
])
def test_agreeing_resolutions_pass(packages: dict[str, str]) -> None:
    check_locked_family(pins(**packages), "x", then="")


def test_an_overlay_resolution_counts_the_torch_of_its_base() -> None:
    with pytest.raises(EnvbuildError, match=r"torchvision 0\.21\.0 is PyPI's default build"):
        check_locked_family(pins(torchvision="0.21.0"), "x", then="", given=[("torch", "2.6.0+rocm6.2.4")])
    check_locked_family(pins(torchvision="0.21.0+rocm6.2.4"), "x", then="", given=[("torch", "2.6.0+rocm6.2.4")])


def test_a_locked_build_refuses_a_lock_with_a_mismatched_family(tmp_path: Path) -> None:
    spec_path = tmp_path / "issue14.yaml"
    spec_path.write_text(ISSUE_SPEC)
    loaded = load_spec(spec_path)
    assert loaded.spec.python.requirements() == ["torch==2.13.0", "torchvision==0.28.0"]
    lock = Lock(inputs=lock_inputs(loaded.spec, torch_index_for(loaded)),
                target=LockTarget(python="3.11.2", platform="x86_64-manylinux_2_36"), base_digest=H, recipe_digest=H,
                resolver="uv 0.13.9", packages=pins(torch="2.13.0+cpu", torchvision="0.28.0"), spec_name="issue14")
    (tmp_path / "issue14.lock").write_text(render_lock(lock, spec_path_for_comment="issue14.yaml"))
    with pytest.raises(EnvbuildError) as caught:
        load_fresh_lock(loaded)
    assert caught.value.message.startswith(f"torch family mismatch in {tmp_path / 'issue14.lock'}")
    assert (caught.value.hint or "").endswith(f"then run `envbuild lock {spec_path}` again")
    good = replace(lock, packages=pins(torch="2.13.0+cpu", torchvision="0.28.0+cpu"))
    (tmp_path / "issue14.lock").write_text(render_lock(good, spec_path_for_comment="issue14.yaml"))
    assert load_fresh_lock(loaded)[0] == good
