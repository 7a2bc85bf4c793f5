"""`envbuild verify` without a container runtime: the image is a sandbox directory laid out like an
envbuild image (/.envbuild/build.json, spec.yaml, spec.lock and the venv's dist-info directories), so
every input is known. Each kind of difference verify promises (README "Provenance and verify") is
checked twice: planted, it is reported with its own message and exit 1; absent, the image matches."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import pytest

from envbuild.envspec.specmodel import VENV_PREFIX
from envbuild.lock.fileformat import render_lock
from envbuild.lock.lockmodel import Lock, LockedPackage, LockInputs, LockTarget
from envbuild.shared.errors import EnvbuildError
from envbuild.verify.imagecheck import Verification, lock_differences, render_verification, verify_image
from tests.conftest import REPO, run_cli

ENVBUILD = str(REPO / "bin" / "envbuild")

SPEC = """\
name: tiny
system: {system}
base: {base}
python:
  packages:
    - six
    - idna
env:
  TINY_FLAVOUR: "{flavour}"
"""

INSTALLED = {"six": "1.17.0", "idna": "3.10"}
H = {letter: f"sha256:{letter * 64}" for letter in "abcdef"}


def spec_text(*, system: str = "local", base: str = "debootstrap:bookworm", flavour: str = "plain") -> str:
    return SPEC.format(system=system, base=base, flavour=flavour)


def make_lock(packages: dict[str, tuple[str, str]] | None = None, *, python: str = "3.11.2",
              requirements: tuple[str, ...] = ("six", "idna"), base_digest: str = "sha256:" + "9" * 64) -> Lock:
    """A lock of `packages` (name -> (version, hash)); by default the installed set."""
    if packages is None:
        packages = {"six": ("1.17.0", H["a"]), "idna": ("3.10", H["b"])}
    return Lock(
        inputs=LockInputs(requirements=requirements, base="debootstrap:bookworm", system="local", torch_index=None,
                          interpreter="python3"),
        target=LockTarget(python=python, platform="x86_64-manylinux_2_36"),
        base_digest=base_digest, recipe_digest="sha256:" + "8" * 64, resolver="uv 0.13.9",
        packages=tuple(LockedPackage(name, version, (digest,)) for name, (version, digest) in packages.items()),
        spec_name="tiny",
    )


def lock_text(lock: Lock | None = None, comment_path: str = "tiny.yaml") -> str:
    return render_lock(lock or make_lock(), spec_path_for_comment=comment_path)


def make_image(root: Path, *, installed: dict[str, str] | None = None, recorded: dict[str, str] | None = None,
               spec: str | None = None, lock: str | None = None, system: str = "local",
               base: str = "debootstrap:bookworm", record_environments: bool = True) -> Path:
    """A sandbox directory as envbuild leaves an image: the venv with `installed` (dist-info), the build
    record listing `recorded` (default: what is installed), the embedded spec and (if given) lock."""
    installed = dict(INSTALLED if installed is None else installed)
    recorded = dict(installed if recorded is None else recorded)
    spec = spec_text(system=system, base=base) if spec is None else spec
    venv = root / VENV_PREFIX.lstrip("/")
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.11.2\n")
    (venv / "bin/python").write_text("")
    site = venv / "lib/python3.11/site-packages"
    for name, version in installed.items():
        info = site / f"{name}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\n")
        (info / "RECORD").write_text("")
    record: dict[str, object] = {
        "record_format": 2,
        "spec": {"name": "tiny", "sha256": hashlib.sha256(spec.encode()).hexdigest()},
        "system": system,
        "base": {"ref": base, "digest": "sha256:" + "9" * 64},
        "lock": {"sha256": hashlib.sha256(lock.encode()).hexdigest(), "python": "3.11.2"} if lock else None,
    }
    if record_environments:
        record["environments"] = {f"{VENV_PREFIX}/bin/python": [f"{n}=={v}" for n, v in sorted(recorded.items())]}
    envbuild_dir = root / ".envbuild"
    envbuild_dir.mkdir(parents=True)
    (envbuild_dir / "build.json").write_text(json.dumps(record, indent=2))
    (envbuild_dir / "spec.yaml").write_text(spec)
    if lock is not None:
        (envbuild_dir / "spec.lock").write_text(lock)
    return root


def write_spec(directory: Path, text: str, lock: str | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "tiny.yaml"
    path.write_text(text)
    if lock is not None:
        (directory / "tiny.lock").write_text(lock)
    return path


def diffs(result: Verification, area: str | None = None) -> list[str]:
    return [d.message for d in result.differences if area is None or d.area == area]


# -- the image against its own record and embedded lock ------------------------------------------


def test_an_image_as_recorded_matches(tmp_path: Path) -> None:
    result = verify_image(make_image(tmp_path / "img", lock=lock_text()))
    assert result.ok, render_verification(result)
    assert "build record: all 2 packages of /opt/envbuild/venv installed as recorded" in result.passed
    assert "embedded lock: all 2 packages at their locked versions" in result.passed


def test_missing_package_is_a_difference(tmp_path: Path) -> None:
    image = make_image(tmp_path / "img", installed={"six": "1.17.0"}, recorded=INSTALLED, lock=lock_text())
    result = verify_image(image)
    assert not result.ok
    assert diffs(result, "record") == ["idna 3.10: in the build record, not installed"]
    assert diffs(result, "lock") == ["idna 3.10: in the embedded lock, not installed"]


def test_extra_package_is_a_difference(tmp_path: Path) -> None:
    image = make_image(tmp_path / "img", installed={**INSTALLED, "rich": "13.7.1"}, recorded=INSTALLED, lock=lock_text())
    result = verify_image(image)
    assert diffs(result, "record") == ["rich 13.7.1: installed, not in the build record"]
    assert diffs(result, "lock") == ["rich 13.7.1: installed, not in the embedded lock"]


def test_venv_seed_packages_are_not_extra_against_a_lock(tmp_path: Path) -> None:
    """pip/setuptools/wheel come with `python -m venv`: a lock never lists them, the record does."""
    installed = {**INSTALLED, "pip": "24.0"}
    result = verify_image(make_image(tmp_path / "img", installed=installed, lock=lock_text()))
    assert result.ok, render_verification(result)


def test_record_mismatch_is_a_difference(tmp_path: Path) -> None:
    image = make_image(tmp_path / "img", recorded={"six": "1.16.0", "idna": "3.10"})
    result = verify_image(image)
    assert diffs(result) == ["six: the build record has 1.16.0, the image has 1.17.0"]
    assert "result: the image does NOT match (1 difference)" in render_verification(result)


def test_embedded_lock_mismatch_is_a_difference(tmp_path: Path) -> None:
    other = lock_text(make_lock({"six": ("1.16.0", H["a"]), "idna": ("3.10", H["b"])}))
    result = verify_image(make_image(tmp_path / "img", lock=other))
    assert diffs(result) == ["six: the embedded lock has 1.16.0, the image has 1.17.0"]


def test_record_without_environments_is_skipped_not_passed_silently(tmp_path: Path) -> None:
    result = verify_image(make_image(tmp_path / "img", record_environments=False))
    assert result.ok
    assert any("built by an older envbuild); skipped" in line for line in result.passed)


def test_not_an_envbuild_image_is_refused(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    with pytest.raises(EnvbuildError, match=r"is not an envbuild image \(it has no /.envbuild/build.json\)"):
        verify_image(tmp_path / "plain")
    with pytest.raises(EnvbuildError, match="no such image"):
        verify_image(tmp_path / "absent.sif")


# -- the image against a spec --------------------------------------------------------------------


def test_the_spec_it_was_built_from_matches(tmp_path: Path) -> None:
    image = make_image(tmp_path / "img")
    spec = write_spec(tmp_path / "envs", spec_text())
    result = verify_image(image, spec)
    assert result.ok, render_verification(result)
    assert f"spec: {spec} is the spec the image was built from" in result.passed
    assert "requirements: all 2 of the spec's requirements are met" in result.passed


@pytest.mark.parametrize(("change", "expected"), [
    ({"base": "debootstrap:trixie"}, "base: the image has debootstrap:bookworm, the spec says debootstrap:trixie"),
    ({"system": "lumi-c"}, "system: the image was built for local, the spec says lumi-c"),
    ({"flavour": "spicy"}, "env TINY_FLAVOUR: the image sets 'plain', the spec says 'spicy'"),
])
def test_a_changed_spec_names_what_changed(tmp_path: Path, change: dict[str, str], expected: str) -> None:
    image = make_image(tmp_path / "img")
    spec = write_spec(tmp_path / "envs", spec_text(**change))
    result = verify_image(image, spec)
    messages = diffs(result)
    assert messages[0].startswith(f"{spec} changed since the build (sha256 ")
    assert messages[1:] == [expected]


def test_a_spec_changed_only_in_a_comment_reports_the_hash_and_nothing_else(tmp_path: Path) -> None:
    image = make_image(tmp_path / "img")
    spec = write_spec(tmp_path / "envs", "# a comment\n" + spec_text())
    assert [d.area for d in verify_image(image, spec).differences] == ["spec"]


def test_unmet_requirement_is_a_difference(tmp_path: Path) -> None:
    image = make_image(tmp_path / "img")
    spec = write_spec(tmp_path / "envs", spec_text().replace("- six", "- six==1.16.0").replace("- idna", "- idna\n    - rich"))
    messages = diffs(verify_image(image, spec), "package")
    assert messages == ["six: the spec wants six==1.16.0, the image has 1.17.0", "rich: the spec wants rich, not installed"]


# -- the lock next to the spec against the image's embedded lock ---------------------------------


def test_the_same_lock_matches(tmp_path: Path) -> None:
    text = lock_text()
    image = make_image(tmp_path / "img", lock=text)
    spec = write_spec(tmp_path / "envs", spec_text(), lock=text)
    result = verify_image(image, spec)
    assert result.ok, render_verification(result)
    assert f"lock: {spec.with_suffix('.lock')} is the lock the image was built with" in result.passed


def test_a_lock_differing_only_in_comments_is_the_same_lock(tmp_path: Path) -> None:
    image = make_image(tmp_path / "img", lock=lock_text(comment_path="envs/tiny.yaml"))
    spec = write_spec(tmp_path / "envs", spec_text(), lock=lock_text(comment_path="elsewhere/tiny.yaml"))
    result = verify_image(image, spec)
    assert result.ok, render_verification(result)
    assert any("pins what the image's lock pins (only its comments differ)" in line for line in result.passed)


def test_a_different_lock_is_a_difference_listing_what_differs(tmp_path: Path) -> None:
    """The installed packages equal both locks' versions here except where noted, so the lock-to-lock
    comparison is what must catch a hash change, a target change and a changed input."""
    image = make_image(tmp_path / "img", lock=lock_text())
    given = make_lock({"six": ("1.17.0", H["c"]), "idna": ("3.10", H["b"]), "rich": ("13.7.1", H["d"])},
                      python="3.12.1", requirements=("six", "idna", "rich"))
    given = replace(given, packages=tuple(p for p in given.packages if p.name != "rich"))  # keep the input change only
    spec = write_spec(tmp_path / "envs", spec_text(), lock=lock_text(given))
    result = verify_image(image, spec)
    assert not result.ok
    messages = diffs(result, "lock")
    assert messages[0].startswith(f"{spec.with_suffix('.lock')} is not the lock the image was built with (sha256 ")
    assert messages[1:] == [
        "six 1.17.0: tiny.lock lists other file hashes than the image's lock",
        "target: tiny.lock is for Python 3.12.1 on x86_64-manylinux_2_36, the image's lock for Python 3.11.2 on x86_64-manylinux_2_36",
        "tiny.lock against the image's lock: requirement added: rich",
    ]
    out = run_cli([ENVBUILD, "verify", str(image), str(spec)])
    assert out.returncode == 1, out.stdout + out.stderr
    assert "  DIFF  six 1.17.0: tiny.lock lists other file hashes than the image's lock" in out.stdout
    assert "result: the image does NOT match (4 differences)" in out.stdout


def test_lock_differences_lists_added_removed_and_changed_pins() -> None:
    built = make_lock({"six": ("1.17.0", H["a"]), "idna": ("3.10", H["b"])})
    given = make_lock({"six": ("1.16.0", H["c"]), "rich": ("13.7.1", H["d"])}, base_digest="sha256:" + "7" * 64)
    assert lock_differences(built, given, "x.lock") == [
        "idna 3.10: in the image's lock, not in x.lock",
        "rich 13.7.1: in x.lock, not in the image's lock",
        "six: x.lock has 1.16.0, the image's lock has 1.17.0",
        f"base digest: x.lock has sha256:{'7' * 64}, the image's lock has sha256:{'9' * 64}",
    ]
    assert lock_differences(built, built, "x.lock") == []


def test_a_different_lock_with_the_installed_versions_still_differs(tmp_path: Path) -> None:
    """Before, only equal hashes printed a line and a different lock printed nothing: the image 'matched'."""
    image = make_image(tmp_path / "img", lock=lock_text())
    given = make_lock(base_digest="sha256:" + "7" * 64)
    spec = write_spec(tmp_path / "envs", spec_text(), lock=lock_text(given))
    result = verify_image(image, spec)
    assert not result.ok
    assert diffs(result, "lock")[1:] == [f"base digest: tiny.lock has sha256:{'7' * 64}, the image's lock has sha256:{'9' * 64}"]


def test_an_image_built_without_a_lock_is_compared_package_by_package(tmp_path: Path) -> None:
    image = make_image(tmp_path / "img")
    spec = write_spec(tmp_path / "envs", spec_text(), lock=lock_text())
    result = verify_image(image, spec)
    assert result.ok, render_verification(result)
    assert "lock: the image was built without a lock (not --locked); its packages are compared with tiny.lock below" in result.passed
    older = lock_text(make_lock({"six": ("1.16.0", H["a"]), "idna": ("3.10", H["b"])}))
    (spec.with_suffix(".lock")).write_text(older)
    assert diffs(verify_image(image, spec)) == ["six: tiny.lock has 1.16.0, the image has 1.17.0"]


# -- through the CLI -----------------------------------------------------------------------------


def test_a_torch_family_mismatch_in_the_image_is_a_difference(tmp_path: Path) -> None:
    """The issue's image: torch's CPU build next to PyPI's torchvision (a CUDA build). Read from the files."""
    installed = {**INSTALLED, "torch": "2.13.0+cpu", "torchvision": "0.28.0"}
    result = verify_image(make_image(tmp_path / "bad", installed=installed))
    [message] = diffs(result, "torch")
    assert message.startswith("torch family mismatch: torchvision 0.28.0 is PyPI's default build (no variant label; on "
                              "Linux x86_64 a CUDA build), but torch 2.13.0+cpu is the CPU-only build (cpu); fix: make "
                              "torchvision 0.28.0+cpu reachable")
    assert not result.ok and "torch family mismatch" in render_verification(result)
    good = verify_image(make_image(tmp_path / "good", installed={**installed, "torchvision": "0.28.0+cpu"}))
    assert good.ok, render_verification(good)
    assert "torch family: the image has torch 2.13.0+cpu (cpu), torchvision 0.28.0+cpu (cpu), all built for torch's variant" \
        in good.passed


def test_cli_exit_status_and_json(tmp_path: Path) -> None:
    image = make_image(tmp_path / "img", lock=lock_text())
    ok = run_cli([ENVBUILD, "verify", str(image)])
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.rstrip().endswith("result: the image matches")
    broken = make_image(tmp_path / "img2", installed={"six": "1.17.0"}, recorded=INSTALLED)
    bad = run_cli([ENVBUILD, "verify", str(broken), "--json"])
    assert bad.returncode == 1, bad.stdout + bad.stderr
    found = json.loads(bad.stdout)
    assert found["ok"] is False
    assert found["differences"] == [{"area": "record", "message": "idna 3.10: in the build record, not installed"}]
    missing = run_cli([ENVBUILD, "verify", str(tmp_path / "absent.sif")])
    assert missing.returncode == 1 and "no such image" in missing.stderr and "fix:" in missing.stderr
