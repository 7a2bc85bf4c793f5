"""The parts of `envbuild lock` for overlays that need no container: pip's report and the kept pins."""

from __future__ import annotations

import json

import pytest

from envbuild.builder.sessions.overlaylock import _kept_pins, parse_pip_report
from envbuild.lock.lockmodel import Lock, LockedPackage, LockInputs, LockTarget
from envbuild.shared.errors import EnvbuildError

DIGEST = "a" * 64


def report(*items: dict) -> str:
    return json.dumps({"version": "1", "install": list(items)})


def item(name: str, version: str, archive: dict) -> dict:
    return {"metadata": {"name": name, "version": version},
            "download_info": {"url": f"https://files/{name}-{version}.whl", "archive_info": archive}}


def test_report_gives_each_package_with_its_sha256() -> None:
    found = parse_pip_report(report(item("Tabulate", "0.10.0", {"hashes": {"sha256": DIGEST, "md5": "b" * 32}}),
                                    item("humanize", "4.17.0", {"hash": f"sha256={DIGEST}"})), "r.json")
    assert found == (LockedPackage("tabulate", "0.10.0", (f"sha256:{DIGEST}",)),
                     LockedPackage("humanize", "4.17.0", (f"sha256:{DIGEST}",)))


def test_a_package_without_a_hash_cannot_be_locked() -> None:
    with pytest.raises(EnvbuildError) as caught:
        parse_pip_report(report(item("local", "1.0", {})), "r.json")
    assert "no sha256 for local" in caught.value.message and caught.value.hint


def test_not_a_report_is_a_clear_error() -> None:
    with pytest.raises(EnvbuildError, match=r"r\.json: not a pip installation report"):
        parse_pip_report("[]", "r.json")


def test_old_pins_are_kept_unless_upgrading() -> None:
    lock = Lock(inputs=LockInputs((), "localimage:b.sif", "local", None, "python3"), target=LockTarget("3.11.2", "x"),
                base_digest="sha256:" + DIGEST, recipe_digest="", resolver="pip", spec_name="x",
                packages=(LockedPackage("tabulate", "0.9.0", ()), LockedPackage("humanize", "4.0.0", ())))
    assert _kept_pins(lock, upgrade=False, upgrade_packages=()) == ("humanize==4.0.0", "tabulate==0.9.0")
    assert _kept_pins(lock, upgrade=False, upgrade_packages=("Tabulate",)) == ("humanize==4.0.0",)
    assert _kept_pins(lock, upgrade=True, upgrade_packages=()) == ()
    assert _kept_pins(None, upgrade=False, upgrade_packages=()) == ()
