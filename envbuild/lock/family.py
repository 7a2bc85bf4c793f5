"""The torch family check on a resolution (envbuild lock, and a lock a --locked build installs): only the pins
are known there, so a member's variant is its local version label (+cpu, +cu126, +rocm6.4), or PyPI's default
build without one (envbuild.spec.torchfamily)."""

from __future__ import annotations

from collections.abc import Iterable

from envbuild.lock.model import LockedPackage
from envbuild.spec.torchfamily import builds_from_pins, family_error, family_mismatches


def check_locked_family(packages: Iterable[LockedPackage], where: str, *, then: str,
                        given: Iterable[tuple[str, str]] = ()) -> None:
    """Raise the torch family error when a locked torchvision/torchaudio is for another variant than torch.
    `given`: (name, version) of members the environment gets from elsewhere (an overlay's base), counted
    after the locked ones."""
    pins = [(package.name, package.version) for package in packages] + list(given)
    mismatches = family_mismatches(builds_from_pins(pins))
    if mismatches:
        raise family_error(mismatches, where, then=then)
