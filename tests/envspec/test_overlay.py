"""The spec's overlay: section (issue 11): defaults, the mount checks, and a refusal, naming the fix, for
everything an overlay cannot do."""

from __future__ import annotations

import textwrap

import pytest

from envbuild.envspec.loadspec import load_spec_text
from envbuild.envspec.specmodel import OverlaySettings, Spec
from envbuild.shared.errors import SpecError
from envbuild.shared.overlayformat import DEFAULT_MOUNT

OVERLAY_BASE = "name: demo\nbase: localimage:/appl/local/containers/sif-images/x.sif\n"


def overlay_spec(text: str) -> Spec:
    return load_spec_text(OVERLAY_BASE + textwrap.dedent(text), "spec.yaml").spec


def problems_of(text: str) -> list[str]:
    with pytest.raises(SpecError) as info:
        load_spec_text(textwrap.dedent(text), "spec.yaml")
    return [problem.render() for problem in info.value.problems]


def overlay_problems(text: str) -> list[str]:
    return problems_of(OVERLAY_BASE + textwrap.dedent(text))


def test_defaults() -> None:
    overlay = overlay_spec("overlay: {}\n").overlay
    assert overlay == OverlaySettings()
    assert overlay is not None
    assert overlay.mount == DEFAULT_MOUNT == "/user-software"
    assert overlay.processors == 1
    assert overlay.python is None
    assert overlay.allow_torch_change is False


def test_a_spec_without_overlay_is_an_image_spec() -> None:
    assert overlay_spec("").overlay is None


def test_an_empty_overlay_section_means_the_defaults() -> None:
    """`overlay:` with nothing after it asks for an overlay: it must not quietly build an image instead."""
    assert overlay_spec("overlay:\n").overlay == OverlaySettings()


def test_every_setting() -> None:
    overlay = overlay_spec("""\
        overlay:
          mount: /opt/my-project/
          python: /opt/venv/bin/python
          allow_torch_change: true
          processors: 16
        python:
          installer: pip
          packages: [rich]
        tests: [python -c 'import rich']
        """).overlay
    assert overlay == OverlaySettings(mount="/opt/my-project", python="/opt/venv/bin/python", allow_torch_change=True,
                                      processors=16)


@pytest.mark.parametrize("base", ["docker://rocm/pytorch:latest", "oras://ghcr.io/x/y:1", "debootstrap:bookworm"])
def test_base_must_be_a_local_image(base: str) -> None:
    (problem,) = problems_of(f"name: demo\nbase: {base}\noverlay: {{}}\n")
    assert f"an overlay is made on an existing image file, but base is {base}" in problem
    assert "pull it once (apptainer pull base.sif docker://...) and write base: localimage:base.sif" in problem


@pytest.mark.parametrize(("section", "fix"), [
    ("files: [{src: a.txt, dest: /opt/a.txt}]", "copy the files into your project directory or bind them with envrun --bind"),
    ("post: [apt-get install -y git]", "build a full image (remove overlay:) to run commands in it"),
    ("env: {OMP_NUM_THREADS: '1'}", "set them in envrun.yaml (env:) next to your project"),
    ("labels: {org.example.project: x}", "its record (envbuild inspect NAME.sqsh) says how it was made"),
])
def test_sections_an_overlay_cannot_have(section: str, fix: str) -> None:
    (problem,) = overlay_problems(f"overlay: {{}}\n{section}\n")
    name = section.split(":", 1)[0]
    assert f"an overlay spec cannot have {name} (" in problem
    assert fix in problem


def test_all_refused_sections_are_named_in_one_message() -> None:
    (problem,) = overlay_problems("""\
        overlay: {}
        files: [{src: a.txt, dest: /opt/a.txt}]
        post: [echo hi]
        env: {A: b}
        labels: {a: b}
        """)
    assert "an overlay spec cannot have files (" in problem
    assert "; post (" in problem and "; env (" in problem and "; labels (" in problem


def test_empty_sections_are_not_refused() -> None:
    assert overlay_spec("overlay: {}\nfiles: []\npost: []\nenv: {}\nlabels: {}\n").overlay is not None


def test_uv_installer_is_refused_with_the_reason() -> None:
    (problem,) = overlay_problems("overlay: {}\npython:\n  installer: uv\n")
    assert "python.installer: uv is not used for overlays" in problem
    assert "reinstalls them into the overlay" in problem
    assert "remove the line (pip is used)" in problem


@pytest.mark.parametrize("installer", ["auto", "pip"])
def test_other_installers_are_accepted(installer: str) -> None:
    assert overlay_spec(f"overlay: {{}}\npython:\n  installer: {installer}\n").python.installer == installer


def test_python_interpreter_is_refused_naming_overlay_python() -> None:
    (problem,) = overlay_problems("overlay: {}\npython:\n  interpreter: /usr/bin/python3.12\n")
    assert "python.interpreter does not apply to overlays" in problem
    assert "write overlay: {python: /path/in/image/bin/python}" in problem


def test_overlay_python_must_be_absolute() -> None:
    (problem,) = overlay_problems("overlay: {python: python3}\n")
    assert problem == ("spec.yaml:3:11: overlay.python: 'python3' must be an absolute path inside the base image, "
                       "e.g. /opt/venv/bin/python")


@pytest.mark.parametrize("mount", ["/opt/my-project", "/user-software/", "/scratch/project_462000000/env", "/usr/local/x"])
def test_mount_accepted_without_trailing_slash(mount: str) -> None:
    overlay = overlay_spec(f"overlay: {{mount: '{mount}'}}\n").overlay
    assert overlay is not None and overlay.mount == mount.rstrip("/")


def test_relative_mount_is_refused() -> None:
    (problem,) = overlay_problems("overlay: {mount: user-software}\n")
    assert problem == ("spec.yaml:3:11: overlay.mount: 'user-software' must be an absolute path inside the container "
                       "(e.g. /user-software)")


@pytest.mark.parametrize("mount", ["/", "//", "/usr", "/usr/", "/opt", "/etc", "/tmp", "/home", "/proc", "/dev", "/run",
                                   "/.singularity.d", "/lib64", "/a/../usr", "/opt/./x", ""])
def test_mount_that_would_hide_the_base_is_refused(mount: str) -> None:
    (problem,) = overlay_problems(f"overlay: {{mount: '{mount}'}}\n")
    assert problem.startswith("spec.yaml:3:11: overlay.mount: ")
    assert f"mounting at {mount!r} would hide part of the base image" in problem
    assert "use a new directory such as /user-software or /opt/<name>" in problem


@pytest.mark.parametrize("processors", [0, -1, 1025])
def test_processors_out_of_range(processors: int) -> None:
    (problem,) = overlay_problems(f"overlay: {{processors: {processors}}}\n")
    assert problem.startswith("spec.yaml:3:11: overlay.processors: Input should be")


def test_unknown_overlay_setting_suggests_the_right_one() -> None:
    (problem,) = overlay_problems("overlay: {mnt: /x}\n")
    assert problem == ("spec.yaml:3:11: overlay.mnt: unknown field 'mnt'\n"
                       "    fix: did you mean 'mount'? allowed here: mount, python, allow_torch_change, processors")


def test_overlay_spec_requirements_are_the_python_section() -> None:
    spec = overlay_spec("overlay: {}\npython:\n  pytorch: {version: '2.6.0', variant: rocm6.2}\n  packages: [peft]\n")
    assert spec.python.requirements() == ["torch==2.6.0", "peft"]
