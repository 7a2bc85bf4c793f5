"""The container runtime's version: parsed from `--version`, checked against the supported minimum with a message
that names what was found, what is needed and the fix, and cached for envrun (fake runtimes in tmp_path)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from envbuild.host.runtime import require_runtime
from envbuild.host.runtimeversion import check_supported, parse_version_line
from envbuild.shared.errors import UsageError
from tests.conftest import REPO, run_cli


@pytest.mark.parametrize(("line", "parsed"), [
    ("apptainer version 1.4.5", ("apptainer", (1, 4, 5))),
    ("apptainer version 1.3.0-rc.1", ("apptainer", (1, 3, 0))),
    ("apptainer version 1.4.5-1.el9", ("apptainer", (1, 4, 5))),
    ("singularity-ce version 4.1.0-jammy", ("singularity-ce", (4, 1, 0))),
    ("singularity-ce version 3.11", ("singularity-ce", (3, 11, 0))),
    ("singularity version 3.8.7", ("singularity", (3, 8, 7))),
    ("singularity version v3.5.3", ("singularity", (3, 5, 3))),
    ("something else 1.2.3", None),
    ("apptainer version unknown", None),
    ("", None),
])
def test_version_lines(line: str, parsed: tuple | None) -> None:
    assert parse_version_line(line) == parsed


@pytest.mark.parametrize("line", ["apptainer version 1.2.0", "apptainer version 1.4.5", "singularity-ce version 3.11.0",
                                  "singularity-ce version 4.3.1", "no version said", ""])
def test_supported_versions_pass(line: str) -> None:
    check_supported("/usr/bin/apptainer", line)


@pytest.mark.parametrize(("line", "found"), [
    ("apptainer version 1.0.0", "Apptainer 1.0.0"),
    ("apptainer version 1.1.9", "Apptainer 1.1.9"),
    ("singularity-ce version 3.5.0", "SingularityCE 3.5.0"),
    ("singularity-ce version 3.10.5", "SingularityCE 3.10.5"),
    ("singularity version 3.8.7", "Singularity 3.8.7 (the Singularity from before the Apptainer/SingularityCE split)"),
])
def test_old_versions_are_refused_naming_found_minimum_and_fix(line: str, found: str) -> None:
    with pytest.raises(UsageError) as raised:
        check_supported("/opt/old/bin/apptainer", line)
    assert raised.value.message == (f"/opt/old/bin/apptainer is {found}; envbuild needs Apptainer >= 1.2.0 or "
                                     "SingularityCE >= 3.11.0 (envbuild runs `exec --no-mount bind-paths`, which older "
                                     "versions refuse)")
    assert "module load apptainer" in (raised.value.hint or "") and "ENVBUILD_RUNTIME" in (raised.value.hint or "")


def fake_runtime(directory: Path, name: str, line: str) -> Path:
    """A runtime that answers --version with `line` and logs each call."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(f'#!/bin/sh\necho "$@" >> "{directory}/{name}.calls"\necho "{line}"\n')
    path.chmod(0o755)
    return path


def environ_with(tmp_path: Path, directory: Path, **extra: str) -> dict[str, str]:
    return {"PATH": f"{directory}:/usr/bin:/bin", "ENVBUILD_CACHE_DIR": str(tmp_path / "cache"), **extra}


def test_envruns_check_probes_a_runtime_file_once(tmp_path: Path) -> None:
    fake = fake_runtime(tmp_path / "bin", "apptainer", "apptainer version 1.3.4")
    environ = environ_with(tmp_path, fake.parent)
    for _ in range(3):
        runtime = require_runtime(probe=False, environ=environ)
        assert (runtime.path, runtime.name, runtime.version) == (str(fake), "apptainer", "apptainer version 1.3.4")
    assert (fake.parent / "apptainer.calls").read_text() == "--version\n"
    fake_runtime(tmp_path / "bin", "apptainer", "apptainer version 1.0.0")  # replaced: another size and time
    os.utime(fake, ns=(1, 1))
    with pytest.raises(UsageError, match=r"is Apptainer 1\.0\.0; envbuild needs Apptainer >= 1\.2\.0"):
        require_runtime(probe=False, environ=environ)
    assert (fake.parent / "apptainer.calls").read_text() == "--version\n--version\n"


def test_a_singularity_named_by_envbuild_runtime_is_checked(tmp_path: Path) -> None:
    fake = fake_runtime(tmp_path / "bin", "singularity", "singularity-ce version 3.5.0")
    environ = environ_with(tmp_path, fake.parent, ENVBUILD_RUNTIME="singularity")
    for probe in (True, False):
        with pytest.raises(UsageError, match=r"singularity is SingularityCE 3\.5\.0; envbuild needs"):
            require_runtime(probe=probe, environ=environ)
    fake_runtime(tmp_path / "ok", "singularity", "singularity-ce version 4.1.2")
    runtime = require_runtime(environ=environ_with(tmp_path, tmp_path / "ok", ENVBUILD_RUNTIME="singularity"))
    assert (runtime.name, runtime.version) == ("singularity", "singularity-ce version 4.1.2")


def test_an_unwritable_cache_still_checks(tmp_path: Path) -> None:
    fake = fake_runtime(tmp_path / "bin", "apptainer", "apptainer version 1.1.0")
    (tmp_path / "cache").write_text("a file where the cache directory would be")
    with pytest.raises(UsageError, match=r"Apptainer 1\.1\.0"):
        require_runtime(probe=False, environ=environ_with(tmp_path, fake.parent))


@pytest.mark.parametrize(("name", "line", "found"), [("apptainer", "apptainer version 1.0.0", "Apptainer 1.0.0"),
                                                    ("singularity", "singularity-ce version 3.5.0", "SingularityCE 3.5.0")])
def test_envrun_and_envbuild_refuse_an_old_runtime_first_on_path(tmp_path: Path, name: str, line: str, found: str) -> None:
    fake = fake_runtime(tmp_path / "bin", name, line)
    image = tmp_path / "env.sif"
    image.write_bytes(b"never opened\n")
    env = {"PATH": f"{fake.parent}:{os.environ['PATH']}", "ENVBUILD_CACHE_DIR": str(tmp_path / "cache"),
           "ENVBUILD_RUNTIME": name, "HOME": str(tmp_path), "ENVBUILD_SYSTEM": "local"}
    for argv in ([str(REPO / "bin/envrun"), "--image", str(image), "srun", "python", "train.py"],
                 [str(REPO / "bin/envrun"), "--image", str(image), "--dry-run", "python", "train.py"],
                 [str(REPO / "bin/envbuild"), "packages", "--via-runtime", str(image)]):
        result = run_cli(argv, env_extra=env, timeout=120, cwd=tmp_path)
        assert result.returncode == 2, result.stdout + result.stderr
        assert f"error: {fake} is {found}; envbuild needs Apptainer >= 1.2.0 or SingularityCE >= 3.11.0" in result.stderr
        assert "fix: load a newer one" in result.stderr and result.stdout == ""
