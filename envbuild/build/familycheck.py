"""The torch family check of a build, after installing: what the environment's files say was installed,
against torch's variant (envbuild.spec.torchfamily). Runs on the host and reads the sandbox or venv
directory, so it works whatever the image's Python can do, and never imports the packages."""

from __future__ import annotations

from envbuild.build.actions import CheckTorchFamily
from envbuild.inventory.pkgmeta import parse_pin
from envbuild.inventory.torchbuilds import env_family
from envbuild.inventory.trees import DirectoryTree
from envbuild.spec.torchfamily import builds_from_pins, family_error, family_mismatches, first_of_each


def check_torch_family(action: CheckTorchFamily) -> str:
    """One line for the log saying what was found; an EnvbuildError naming each mismatch when the family
    does not follow torch's variant."""
    builds = env_family(DirectoryTree(action.root), action.prefix)
    builds += builds_from_pins([pin for pin in map(parse_pin, action.given) if pin])
    mismatches = family_mismatches(builds)
    if mismatches:
        raise family_error(mismatches, action.where,
                           then="build again (nothing of this environment was kept in the store)")
    first = first_of_each(builds)
    if not first:
        return "torch family: no torch, torchvision or torchaudio installed"
    return "torch family: " + ", ".join(build.describe() for build in first.values())
