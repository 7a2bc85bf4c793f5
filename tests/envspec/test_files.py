"""files[] entries are confined (issue 28): `src` stays in the spec file's directory unless the entry opts out,
`~` means the same in validate and build, `dest` stays inside the image, modes are never widened."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest

from envbuild.builder.plan.imageplan import file_steps
from envbuild.envspec.jsonschema import spec_json_schema
from envbuild.envspec.loadspec import load_spec
from envbuild.shared.errors import SpecError
from tests.support.plan_fixtures import fixed_request, with_overrides

HEADER = "name: files-test\nsystem: local\nbase: debootstrap:bookworm\nfiles:\n"


def write_spec(directory: Path, entries: str) -> Path:
    spec = directory / "spec.yaml"
    spec.write_text(HEADER + entries)
    return spec


def problems(spec: Path) -> str:
    with pytest.raises(SpecError) as raised:
        load_spec(spec)
    return str(raised.value)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    (project / "data").mkdir(parents=True)
    (project / "data" / "vocab.txt").write_text("a\n")
    (project / "data" / "vocab.txt").chmod(0o644)
    return project


def test_an_absolute_host_source_is_refused_without_the_opt_out_with_line_and_fix(project: Path) -> None:
    text = problems(write_spec(project, "  - {src: /etc/shadow, dest: /opt/x}\n"))
    assert "spec.yaml:5:" in text and "files[0].src: '/etc/shadow' is outside the spec file's directory" in text
    assert "allow_outside_spec_dir: true" in text  # the fix names the opt-out
    loaded = load_spec(write_spec(project, "  - {src: /etc/hostname, dest: /opt/x, allow_outside_spec_dir: true}\n"))
    assert loaded.spec.files[0].allow_outside_spec_dir


def test_climbing_out_with_dots_or_a_link_is_refused(project: Path, tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("s")
    assert "'../../secret.txt' is outside" in problems(write_spec(project, "  - {src: ../../secret.txt, dest: /opt/x}\n"))
    assert "is outside" in problems(write_spec(project, "  - {src: data/../../secret.txt, dest: /opt/x}\n"))
    (project / "data" / "link.txt").symlink_to(tmp_path / "secret.txt")
    text = problems(write_spec(project, "  - {src: data/link.txt, dest: /opt/x}\n"))
    assert "leads out of the spec file's directory" in text and "spec.yaml:5:" in text
    # inside is fine, through a link too
    (project / "data" / "inner.txt").symlink_to("vocab.txt")
    assert load_spec(write_spec(project, "  - {src: data/inner.txt, dest: /opt/x}\n")).spec.files[0].src == "data/inner.txt"



def test_a_missing_source_gets_a_fix_that_is_not_already_applied(project: Path, tmp_path: Path) -> None:
    """Setting allow_outside_spec_dir does not make a missing file exist: the fix is the path or the file."""
    outside = tmp_path / "elsewhere" / "data.txt"
    text = problems(write_spec(project, f"  - {{src: {outside}, dest: /opt/x, allow_outside_spec_dir: true}}\n"
                                        "  - {src: data/missing.txt, dest: /opt/y}\n"))
    assert (f"spec.yaml:5:6: files[0].src: '{outside}' does not exist (resolved to {outside})\n"
            f"    fix: correct src (it is read as written) or put the file at {outside}") in text
    assert (f"spec.yaml:6:6: files[1].src: 'data/missing.txt' does not exist (resolved to {project}/data/missing.txt)\n"
            f"    fix: correct src (it is read from the spec file's directory {project}) or put the file at "
            f"{project}/data/missing.txt") in text
    assert "allow_outside_spec_dir" not in text
    (project / "data" / "dangling.txt").symlink_to(tmp_path / "gone.txt")
    text = problems(write_spec(project, "  - {src: data/dangling.txt, dest: /opt/x}\n"))
    assert "is a symbolic link to nothing" in text and "fix: point the link at an existing file" in text

def test_dest_is_normalised_inside_the_image_and_cannot_climb_above_it(project: Path) -> None:
    text = problems(write_spec(project, "  - {src: data/vocab.txt, dest: /../../../x}\n"))
    assert "files[0].dest: '/../../../x' climbs above the image's root" in text and "fix:" in text
    assert "managed by the container runtime" in problems(write_spec(project, "  - {src: data/vocab.txt, dest: /opt/../proc}\n"))
    loaded = load_spec(write_spec(project, "  - {src: data/vocab.txt, dest: /opt/./data//sub/../vocab.txt}\n"))
    assert loaded.spec.files[0].dest == "/opt/data/vocab.txt"


def test_tilde_is_the_same_file_for_validate_and_build(project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("n")
    monkeypatch.setenv("HOME", str(home))
    assert "'~/notes.txt' is outside" in problems(write_spec(project, "  - {src: ~/notes.txt, dest: /opt/notes.txt}\n"))
    loaded = load_spec(write_spec(project, "  - {src: ~/notes.txt, dest: /opt/notes.txt, allow_outside_spec_dir: true}\n"))
    request = with_overrides(fixed_request("envs/local-cpu-pytorch.yaml"), spec=loaded.spec, spec_dir=str(project))
    copy = next(a for a in file_steps(request, "/w/sandbox") if type(a).__name__ == "CopyFile")
    assert copy.src == str(home / "notes.txt") == loaded.spec.files[0].host_source(str(project))
    assert Path(copy.src).read_text() == "n"  # the build copies what validate checked (it used to be a traceback)


def test_a_0640_source_without_a_mode_stays_0640_and_validate_says_so(project: Path) -> None:
    from envbuild.builder.execute.fsactions import copy_file
    from envbuild.builder.plan.actions import CopyFile

    (project / "data" / "vocab.txt").chmod(0o640)
    loaded = load_spec(write_spec(project, "  - {src: data/vocab.txt, dest: /opt/data/vocab.txt}\n"))
    [warning] = [w for w in loaded.warnings if w.field == "files[0].src"]
    assert "0640" in warning.message and "mode: '0644'" in (warning.hint or "")
    request = with_overrides(fixed_request("envs/local-cpu-pytorch.yaml"), spec=loaded.spec, spec_dir=str(project))
    sandbox = project.parent / "sandbox"
    sandbox.mkdir()
    for action in file_steps(request, str(sandbox)):
        if isinstance(action, CopyFile):
            copy_file(None, None, action)  # type: ignore[arg-type]
        else:
            from envbuild.builder.execute.fsactions import make_dirs

            make_dirs(SimpleNamespace(store_root=None), None, action)  # type: ignore[arg-type]  # a sandbox outside any store
    assert stat.S_IMODE((sandbox / "opt" / "data" / "vocab.txt").stat().st_mode) == 0o640
    # a mode that lets others read it says they may: no warning; one that does not still hides it (issue 40: the
    # image file is written without their permissions, as the warning says)
    granted = load_spec(write_spec(project, "  - {src: data/vocab.txt, dest: /opt/v.txt, mode: '0644'}\n"))
    assert not [w for w in granted.warnings if w.field == "files[0].src"]
    withheld = load_spec(write_spec(project, "  - {src: data/vocab.txt, dest: /opt/v.txt, mode: '0600'}\n"))
    [warning] = [w for w in withheld.warnings if w.field == "files[0].src"]
    assert "0644 becomes 0640" in warning.message


def test_the_opt_out_is_in_the_json_schema() -> None:
    schema = json.dumps(spec_json_schema())
    assert "allow_outside_spec_dir" in schema and "spec file's directory" in schema
