"""`envbuild verify IMAGE [SPEC]`: does an image hold what its build record, its lock, and a spec (with
the lock next to it) say it should? Everything is read from the file (no runtime): the record
/.envbuild/build.json, the embedded spec and lock, and the packages actually installed in the venv."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envbuild.builder.plan.layers import VENV_SEED as _VENV_SEED  # seeded by `python -m venv`; a lock never lists them
from envbuild.shared.errors import EnvbuildError
from envbuild.shared.terminaltext import printable

if TYPE_CHECKING:
    from collections.abc import Mapping

    from envbuild.envspec.specmodel import EnvEdit
    from envbuild.envspec.torchfamily import TorchBuild
    from envbuild.lock.lockmodel import Lock


@dataclass(frozen=True)
class Difference:
    area: str  # record | lock | spec | package | base | env | torch (the torch family)
    message: str


@dataclass
class Verification:
    image: str
    spec: str | None
    passed: list[str] = field(default_factory=list)
    differences: list[Difference] = field(default_factory=list)
    kind: str = "image"  # or "overlay" (a venv overlay, envbuild.verify.overlaycheck)

    @property
    def ok(self) -> bool:
        return not self.differences


@dataclass(frozen=True)
class ImageContents:
    """What verify reads from an image or an overlay."""

    record: dict[str, Any]
    spec_text: str | None
    lock_text: str | None
    installed: dict[str, str]  # canonical name -> version, in the venv
    # An overlay's packages its record says the base provides (canonical name -> version): its Python
    # meets requirements with them, and a lock's pins for them are not expected in the overlay.
    kept: dict[str, str] = field(default_factory=dict)
    noun: str = "the image"
    lock_location: str = "/.envbuild/spec.lock"  # where the embedded lock is, for messages
    family: tuple[TorchBuild, ...] = ()  # the torch family the environment imports, read from its files
    # python.target: base: the environment is the base's own, so it holds the base's distributions beside what
    # the build added; a lock pins only the latter (and names what it kept of the former).
    shares_base: bool = False

    @property
    def visible(self) -> dict[str, str]:
        """What the venv's Python imports: its own packages over those kept from the base."""
        return {**self.kept, **self.installed}


def _canonical(name: str) -> str:
    from envbuild.inventory.pkgmeta import canonical_name

    return canonical_name(name)


def _read_image(path: Path) -> ImageContents:
    from envbuild.builder.plan.sandbox import RECORD_DIR
    from envbuild.inventory.image import guarded, open_image
    from envbuild.inventory.installedtorch import env_family
    from envbuild.inventory.pyenvs import take_inventory

    if not path.exists():
        raise EnvbuildError(f"{path}: no such image", "give the path of a .sif file (or a sandbox directory)")
    with open_image(str(path)) as image:
        def text(name: str) -> str | None:
            data = image.tree.read(f"{RECORD_DIR}/{name}", 64 << 20)
            return None if data is None else data.decode("utf-8", errors="replace")

        record_text = text("build.json")
        if record_text is None:
            raise EnvbuildError(f"{path} is not an envbuild image (it has no {RECORD_DIR}/build.json)",
                                "envbuild packages / envbuild inspect list what any image holds")
        try:
            record = json.loads(record_text)
        except ValueError as exc:
            raise EnvbuildError(f"{path}: its build record {RECORD_DIR}/build.json is not JSON ({exc})") from None
        main_env = record_env(record)
        inventory = guarded(str(path), lambda: take_inventory(image.tree))
        family = guarded(str(path), lambda: env_family(image.tree, main_env)) if main_env else []
        spec_text, lock_text = text("spec.yaml"), text("spec.lock")
    installed = {_canonical(p.name): p.version for p in inventory.packages if main_env and p.environment == main_env}
    # A venv over the base's Python (python.target: venv-over-base) imports the base's packages below its own:
    # what its Python saw when the build recorded it, less its own, is kept from the base.
    kept = {name: version for name, version in pins(recorded_python_packages(record) or []).items()
            if name not in installed} if record.get("python_target") == "venv-over-base" else {}
    return ImageContents(record=record, spec_text=spec_text, lock_text=lock_text, installed=installed, family=tuple(family),
                         kept=kept, shares_base=record.get("python_target") == "base")


def recorded_python_packages(record: dict[str, Any]) -> list[str] | None:
    """name==version of what the build's Python saw, as the record step listed it (None: not recorded): the
    venv's Python, or the base's own where the packages went into it (the record names it)."""
    main_env = record_env(record)
    python = record.get("python") or f"{main_env}/bin/python"
    found: list[str] | None = (record.get("environments") or {}).get(python)
    return found


def record_env(record: object) -> str | None:
    """The prefix of the environment the build made: envbuild's venv, or the conda env of a cotainr build
    (the record's "venv"; None when cotainr only took the base image)."""
    from envbuild.envspec.specmodel import VENV_PREFIX

    if not isinstance(record, dict):
        return VENV_PREFIX
    venv: str | None = record.get("venv", VENV_PREFIX)
    return venv


def _pin_or_blank(line: str) -> tuple[str, str]:
    from envbuild.inventory.pkgmeta import parse_pin

    return parse_pin(line) or ("", "")


def pins(lines: list[str]) -> dict[str, str]:
    """canonical name -> version of the `name==version` lines (a record's package lists, a freeze)."""
    from envbuild.inventory.pkgmeta import parse_pin

    return dict(pin for pin in map(parse_pin, lines) if pin)


def compare_versions(expected: dict[str, str], actual: dict[str, str], what: str, *, ignore: frozenset[str] = frozenset(),
                     noun: str = "the image") -> list[str]:
    """One line per package whose version in `actual` (installed in `noun`) is not the one `what` expects."""
    lines = []
    for name in sorted(expected.keys() | actual.keys()):
        if name in ignore:
            continue
        want, have = expected.get(name), actual.get(name)
        if want == have:
            continue
        if have is None:
            lines.append(f"{name} {want}: in {what}, not installed")
        elif want is None:
            lines.append(f"{name} {have}: installed, not in {what}")
        else:
            lines.append(f"{name}: {what} has {want}, {noun} has {have}")
    return lines


def verify_image(image: Path, spec_path: Path | None = None) -> Verification:

    contents = _read_image(image)
    result = Verification(image=str(image), spec=str(spec_path) if spec_path else None)
    record, installed = contents.record, contents.installed

    main_env = record_env(record)
    recorded = recorded_python_packages(record)
    if recorded is not None and record.get("python_target"):
        # That Python sees the base's packages too, in other environments: the record is compared for this one's.
        recorded = [line for line, (name, _) in zip(recorded, map(_pin_or_blank, recorded), strict=True) if name in installed]
    if main_env is None:
        result.passed.append(f"build record: {record.get('installer', 'the build')} added no Python environment "
                             "(the base image's only); nothing to compare")
    elif recorded is None:
        result.passed.append("build record: no per-environment package list (built by an older envbuild); skipped")
    else:
        lines = compare_versions(pins(recorded), installed, "the build record")
        add_findings(result, "record", lines, f"build record: all {len(installed)} packages of {main_env} installed as recorded")

    check_embedded_lock(result, contents)
    check_family(result, list(contents.family), contents.noun)
    if spec_path is not None:
        verify_against_spec(result, contents, spec_path)
    return result


def check_family(result: Verification, builds: list[TorchBuild], noun: str) -> None:
    """torchvision/torchaudio against torch's variant (envbuild.envspec.torchfamily); nothing to say without torch."""
    from envbuild.envspec.torchfamily import family_mismatches, first_of_each

    mismatches = family_mismatches(builds)
    result.differences.extend(Difference("torch", f"torch family mismatch: {m.message()}; fix: {m.fix}") for m in mismatches)
    first = first_of_each(builds)
    if not mismatches and "torch" in first and len(first) > 1:
        shown = ", ".join(first[n].describe() for n in sorted(first, key=lambda n: (n != "torch", n)))
        result.passed.append(f"torch family: {noun} has {shown}, all built for torch's variant")


def check_embedded_lock(result: Verification, contents: ImageContents) -> None:
    """The lock embedded at build time against what is installed."""
    if contents.lock_text is None:
        return
    from envbuild.lock.fileformat import read_lock

    image_lock = read_lock(contents.lock_text, f"{result.image}:{contents.lock_location}")
    locked = {p.name: p.version for p in image_lock.packages}
    add_findings(result, "lock", _locked_differences(locked, contents, "the embedded lock", image_lock.kept),
                 f"embedded lock: all {len(locked)} packages at their locked versions{_kept_note(locked, contents)}"
                 f"{_kept_from_base_note(image_lock.kept)}")


def _kept_from_base_note(kept: tuple[str, ...]) -> str:
    return f", the base's {' '.join(kept)} kept" if kept else ""


def _locked_differences(locked: dict[str, str], contents: ImageContents, what: str,
                        kept_from_base: tuple[str, ...] = ()) -> list[str]:
    """A lock's pins against what is installed. Pins of packages kept from an overlay's base are not
    expected in the overlay: they are compared with the version the base provides instead. In the base's own
    environment (python.target: base) the base's other distributions are not the lock's; those it names as kept
    (`kept_from_base`) must be there at their versions."""
    from_base = contents.kept.keys() - contents.installed.keys()
    ignore = _VENV_SEED | from_base
    if contents.shares_base:
        ignore |= contents.installed.keys() - locked.keys()
    lines = compare_versions(locked, contents.installed, what, ignore=frozenset(ignore), noun=contents.noun)
    visible = contents.visible
    for name, version in sorted(pins(list(kept_from_base)).items()):
        if visible.get(name) != version:
            lines.append(f"{name}: {what} keeps the base's {version}, {contents.noun} has {visible.get(name) or 'none'}")
    lines += [f"{name}: {what} has {version}, {contents.noun} uses the base's {contents.kept[name]}"
              for name, version in sorted(locked.items()) if name in from_base and contents.kept[name] != version]
    return lines


def _kept_note(locked: dict[str, str], contents: ImageContents) -> str:
    count = len(locked.keys() & contents.kept.keys() - contents.installed.keys())
    return f" ({count} of them kept from the base)" if count else ""


def add_findings(result: Verification, area: str, lines: list[str], passed: str) -> None:
    if lines:
        result.differences.extend(Difference(area, line) for line in lines)
    else:
        result.passed.append(passed)


def verify_against_spec(result: Verification, contents: ImageContents, spec_path: Path) -> None:
    """The image (or overlay) against a spec and the lock next to it."""
    from packaging.requirements import Requirement

    from envbuild.envspec.loadspec import load_spec
    from envbuild.lock.fileformat import read_lock
    from envbuild.lock.lockmodel import lock_path_for

    loaded = load_spec(spec_path, check_host=False)
    spec = loaded.spec
    record = contents.record
    built_sha = (record.get("spec") or {}).get("sha256", "")
    if built_sha == loaded.sha256:
        result.passed.append(f"spec: {spec_path} is the spec {contents.noun} was built from")
    else:
        result.differences.append(Difference("spec", f"{spec_path} changed since the build "
                                                      f"(sha256 {built_sha[:12] or '?'} -> {loaded.sha256[:12]})"))
        built_base = (record.get("base") or {}).get("ref")
        if built_base and built_base != spec.base.describe():
            result.differences.append(Difference("base", f"base: {contents.noun} has {built_base}, "
                                                         f"the spec says {spec.base.describe()}"))
        if record.get("system") and record["system"] != spec.system:
            result.differences.append(Difference(
                "spec", f"system: {contents.noun} was built for {record['system']}, the spec says {spec.system}"))
        _compare_env(result, contents, spec.env)

    unmet = []
    visible = contents.visible
    wanted = spec.python.requirements() or [r for r in (spec.conda.pip_part().requirements if spec.conda else ())
                                            if "://" not in r and not r.startswith((".", "/"))]
    for text in wanted:
        requirement = Requirement(text)
        have = visible.get(_canonical(requirement.name))
        if have is None:
            unmet.append(f"{requirement.name}: the spec wants {text}, not installed")
        elif requirement.specifier and not requirement.specifier.contains(have, prereleases=True):
            unmet.append(f"{requirement.name}: the spec wants {text}, {contents.noun} has {have}")
    add_findings(result, "package", unmet,
                 f"requirements: all {len(wanted)} of the spec's requirements are met")

    lock_path = lock_path_for(spec_path)
    if lock_path.is_file():
        lock_text = lock_path.read_text(encoding="utf-8")
        lock = read_lock(lock_text, str(lock_path))
        _compare_with_embedded_lock(result, contents, lock_path, lock_text, lock)
        locked = {p.name: p.version for p in lock.packages}
        add_findings(result, "lock", _locked_differences(locked, contents, lock_path.name, lock.kept),
                     f"lock: all {len(locked)} packages of {lock_path.name} installed at their versions"
                     f"{_kept_note(locked, contents)}{_kept_from_base_note(lock.kept)}")


def _compare_with_embedded_lock(result: Verification, contents: ImageContents, lock_path: Path, lock_text: str,
                                lock: Lock) -> None:
    """The lock next to the spec against the lock embedded in the image: a different lock is a difference,
    listed as what differs (pins, hashes, target, inputs); a text differing only in comments is the same lock."""
    from envbuild.lock.fileformat import read_lock
    from envbuild.lock.lockmodel import lock_sha256

    if contents.lock_text is None:
        result.passed.append(f"lock: {contents.noun} was built without a lock (not --locked); "
                             f"its packages are compared with {lock_path.name} below")
        return
    if lock_text == contents.lock_text:
        result.passed.append(f"lock: {lock_path} is the lock {contents.noun} was built with")
        return
    built = read_lock(contents.lock_text, f"{result.image}:{contents.lock_location}")
    lines = lock_differences(built, lock, lock_path.name)
    if not lines:
        result.passed.append(f"lock: {lock_path} pins what the image's lock pins (only its comments differ)")
        return
    result.differences.append(Difference("lock", f"{lock_path} is not the lock {contents.noun} was built with (sha256 "
                                                 f"{lock_sha256(contents.lock_text)[:12]} -> {lock_sha256(lock_text)[:12]})"))
    result.differences.extend(Difference("lock", line) for line in lines)


def lock_differences(built: Lock, given: Lock, name: str) -> list[str]:
    """What `given` (the file `name`) pins or records differently from `built` (the image's embedded lock),
    one line per difference; empty when both pin the same packages, hashes, target and inputs."""
    from envbuild.lock.staleness import stale_reasons

    theirs = "the image's lock"
    lines = []
    old = {p.name: p for p in built.packages}
    new = {p.name: p for p in given.packages}
    for package in sorted(old.keys() | new.keys()):
        was, now = old.get(package), new.get(package)
        if was is not None and now is None:
            lines.append(f"{package} {was.version}: in {theirs}, not in {name}")
        elif was is None and now is not None:
            lines.append(f"{package} {now.version}: in {name}, not in {theirs}")
        elif was is None or now is None:
            continue
        elif was.version != now.version:
            lines.append(f"{package}: {name} has {now.version}, {theirs} has {was.version}")
        elif was.hashes != now.hashes:
            lines.append(f"{package} {now.version}: {name} lists other file hashes than {theirs}")
    if built.target != given.target:
        lines.append(f"target: {name} is for Python {given.target.python} on {given.target.platform}, "
                     f"{theirs} for Python {built.target.python} on {built.target.platform}")
    lines += [f"{name} against {theirs}: {reason}" for reason in stale_reasons(built, given.inputs)]
    for label, was_value, now_value in (("base digest", built.base_digest, given.base_digest),
                                        ("recipe digest", built.recipe_digest, given.recipe_digest),
                                        ("spec name", built.spec_name, given.spec_name)):
        if was_value != now_value:
            lines.append(f"{label}: {name} has {now_value}, {theirs} has {was_value}")
    return lines


def _compare_env(result: Verification, contents: ImageContents, env: Mapping[str, str | EnvEdit]) -> None:
    built_spec_text = contents.spec_text
    if built_spec_text is None:
        return
    from envbuild.envspec.loadspec import load_spec_text
    from envbuild.shared.errors import SpecError

    try:
        built = load_spec_text(built_spec_text, "embedded spec").spec
    except SpecError:
        return  # written by another envbuild version: the spec hash difference is reported already
    for name in sorted(built.env.keys() | env.keys()):
        if built.env.get(name) != env.get(name):
            result.differences.append(Difference(
                "env", f"env {name}: {contents.noun} sets {_env_shown(built.env.get(name))}, "
                       f"the spec says {_env_shown(env.get(name))}"))


def _env_shown(value: str | EnvEdit | None) -> str:
    """An env entry as the spec writes it: 'value', {prepend: '/a'}, or None where it is not set."""
    return repr(value) if value is None or isinstance(value, str) else value.describe()


def render_verification(result: Verification) -> str:
    target = f" against {result.spec}" if result.spec else ""
    lines = [f"verify {result.image}{target}"]
    lines += [f"  ok    {line}" for line in result.passed]
    lines += [f"  DIFF  {d.message}" for d in result.differences]
    if result.ok:
        lines.append(f"result: the {result.kind} matches")
    else:
        count = len(result.differences)
        lines.append(f"result: the {result.kind} does NOT match ({count} difference{'s' if count != 1 else ''})")
    return "\n".join(printable(line) for line in lines) + "\n"  # names, versions, labels come from the image


def verification_to_dict(result: Verification) -> dict[str, Any]:
    return {"image": result.image, "spec": result.spec, "ok": result.ok, "passed": result.passed,
            "differences": [{"area": d.area, "message": d.message} for d in result.differences]}
