"""Real builds from a `localimage:` base directory whose tree links out of itself (issue 28).

- /.envbuild a link to a host directory, the parent of a files[] destination too: the build succeeds, writes
  nothing on the host, and the record and the file are in the image, where the container finds them.
- /.singularity.d/labels.json a link to a host JSON file: `apptainer build --sandbox`, which unpacks the base,
  writes its labels through such a link onto the host (apptainer 1.4.5 here), so envbuild refuses the base
  before running it, naming the link.
(A relative link climbing out of the tree is refused by apptainer's own unpacking, "invalid symlink"; the
executor's test, tests/builder/test_tree_confinement.py, has one.)"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.support.build_faults import ENVBUILD

pytestmark = [pytest.mark.apptainer]

SPEC = """\
name: hostile-base
system: local
base: localimage:{base}
python:
  packages: [six]
files:
  - {{src: note.txt, dest: /opt/data/note.txt}}
tests:
  - python -c "import six"
"""


def snapshot(directory: Path) -> dict[str, tuple[int, int, bytes]]:
    return {str(p.relative_to(directory)): (p.lstat().st_mode, p.lstat().st_mtime_ns, p.read_bytes() if p.is_file() else b"")
            for p in sorted(directory.rglob("*"))}


def hostile_base(tmp_path: Path, debootstrap_base: Path, host: Path) -> Path:
    """The shared debootstrap base, hard-linked (its files are never written through: only links are added)."""
    base = tmp_path / "hostile-base"
    copy = subprocess.run(["cp", "-al", str(debootstrap_base), str(base)], capture_output=True, text=True)
    if copy.returncode != 0:  # another file system than the test store's: a real copy
        subprocess.run(["cp", "-a", "--reflink=auto", str(debootstrap_base), str(base)], check=True)
    (base / ".envbuild").symlink_to(host)
    (base / "opt" / "data").symlink_to(host)
    return base


@pytest.fixture
def host(tmp_path: Path) -> Path:
    host = tmp_path / "host-victim"
    host.mkdir()
    (host / "labels.json").write_text(json.dumps({"host.secret": "read from the host"}))
    (host / "build.json").write_text("the host's own file\n")
    return host


def build(tmp_path: Path, base: Path) -> tuple[subprocess.CompletedProcess[str], Path]:
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    (project / "note.txt").write_text("hello from the spec\n")
    (project / "note.txt").chmod(0o640)
    (project / "spec.yaml").write_text(SPEC.format(base=base))
    output = project / "out" / "hostile-base.sif"
    result = run_cli([ENVBUILD, "build", str(project / "spec.yaml"), "-o", str(output), "--compression", "zstd"],
                     env_extra={"ENVBUILD_CACHE_DIR": str(tmp_path / "store")}, timeout=900)
    return result, output


def test_a_base_whose_runtime_files_link_out_is_refused_before_apptainer_writes_through_them(
        tmp_path: Path, debootstrap_base: Path, host: Path) -> None:
    base = hostile_base(tmp_path, debootstrap_base, host)
    labels = base / ".singularity.d" / "labels.json"
    if labels.exists() or labels.is_symlink():
        labels.unlink()  # a hard link into the shared base: unlinked, never written through
    labels.symlink_to(host / "labels.json")
    before = snapshot(host)
    result, output = build(tmp_path, base)
    assert result.returncode != 0 and not output.exists()
    assert "has /.singularity.d/labels.json as a symbolic link to" in result.stderr and "fix:" in result.stderr
    assert snapshot(host) == before


def test_a_base_linking_out_of_its_tree_builds_without_touching_the_host(tmp_path: Path, debootstrap_base: Path,
                                                                        host: Path) -> None:
    base = hostile_base(tmp_path, debootstrap_base, host)
    before = snapshot(host)

    result, output = build(tmp_path, base)

    assert result.returncode == 0, result.stdout + result.stderr[-6000:]
    assert snapshot(host) == before, "the build wrote on the host"
    inspected = subprocess.run(["apptainer", "inspect", "--labels", "--json", str(output)], capture_output=True, text=True,
                               check=True).stdout
    assert "host.secret" not in inspected and "org.envbuild.spec-name" in inspected
    # the host's /tmp (where the links point) is not mounted: what is read is the image's own
    inside = subprocess.run(["apptainer", "exec", "--no-mount", "tmp,home,cwd", str(output), "/bin/sh", "-c",
                             "cat /.envbuild/build.json; stat -c %a /opt/data/note.txt; cat /opt/data/note.txt"],
                            capture_output=True, text=True, check=True).stdout
    assert '"name": "hostile-base"' in inside
    assert inside.rstrip().endswith("640\nhello from the spec")
