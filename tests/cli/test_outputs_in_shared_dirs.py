"""Outputs through envbuild.shared.safefiles (issue 40): `-o -` is standard output, `-o /dev/null` is written in place and
stays the machine's device (run as root, the old rename made it a regular file), and a link planted at an output's
name, or at a build's bin/ wrapper directory, in a directory others may write never gets written through."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from envbuild.builder.execute.wrapperfiles import write_run_wrappers
from envbuild.builder.plan.actions import WriteRunWrappers
from envbuild.catalogue.cataloguedata import Catalogue
from envbuild.catalogue.site import write_site
from envbuild.cli.envbuild_main import main
from envbuild.launch.wrappers import render_wrapper
from envbuild.recipes.loadrecipe import load_recipe
from envbuild.shared.safefiles import UnsafePlaceError
from envbuild.slurm.sweep import state as sweepstate
from tests.conftest import REPO
from tests.support.trust_accounts import stranger

SPEC = REPO / "envs/local-cpu-pytorch.yaml"


def command_line(kind: str, recipe_dir: Path) -> list[str]:
    """`envbuild import` of a definition file in `recipe_dir` (nothing copied in), or `export` of a spec."""
    if kind == "export":
        return ["export", str(SPEC), "--format", "def", "--no-lock"]
    recipe = recipe_dir / "no-files.def"
    recipe.write_text("Bootstrap: docker\nFrom: ubuntu:22.04\n\n%post\n    pip install numpy\n")
    return ["import", str(recipe)]


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    directory = tmp_path / "shared"
    directory.mkdir()
    directory.chmod(0o777)  # a directory others may write, as a group project is to its members
    return directory


@pytest.fixture
def victims_file(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    path = home / ".bashrc"
    path.write_text("export EDITOR=vi\n")
    path.chmod(0o600)
    return path


def _intact(path: Path) -> None:
    assert path.read_text() == "export EDITOR=vi\n" and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


def _dev_null_is_a_device() -> None:
    info = os.stat("/dev/null")
    assert stat.S_ISCHR(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o666, "/dev/null is no longer the device"


@pytest.mark.parametrize("kind", ["import", "export"])
def test_o_dev_null_writes_the_device_in_place(kind: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(main, [*command_line(kind, tmp_path), "-o", "/dev/null"])
    assert result.exit_code == 0, result.output
    _dev_null_is_a_device()


@pytest.mark.parametrize(("kind", "says"), [("import", "name: no-files"), ("export", "Bootstrap:")])
def test_o_dash_prints(kind: str, says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, [*command_line(kind, tmp_path), "-o", "-"])
    assert result.exit_code == 0, result.output
    assert says in result.stdout and not (tmp_path / "-").exists()


@pytest.mark.parametrize("kind", ["import", "export"])
def test_o_replaces_a_planted_link_and_never_writes_through_it(kind: str, shared: Path, victims_file: Path) -> None:
    output = shared / "out.yaml"
    output.symlink_to(victims_file)
    for pid in range(os.getpid(), os.getpid() + 50):  # the partial names of the old shape, .NAME.partial-PID
        (shared / f".out.yaml.partial-{pid}").symlink_to(victims_file)
    result = CliRunner().invoke(main, [*command_line(kind, shared), "-o", str(output)])
    assert result.exit_code == 0, result.output
    _intact(victims_file)
    assert not output.is_symlink() and output.stat().st_size > 0


def _wrappers(dest: Path) -> WriteRunWrappers:
    venv_bin = dest.parent / "venv-bin"  # an empty venv: the extra commands get wrappers
    venv_bin.mkdir(exist_ok=True)
    return WriteRunWrappers(venv_bin=str(venv_bin), dest=str(dest), image="/img/env.sif",
                            system="local", runtime_name="apptainer", extra_commands=("python", "torchrun"))


def test_a_bin_directory_planted_as_a_link_gets_no_wrappers(shared: Path, victims_file: Path) -> None:
    (shared / "bin").symlink_to(victims_file.parent)
    with pytest.raises(UnsafePlaceError, match="is a symbolic link"):
        write_run_wrappers(_wrappers(shared / "bin"))
    _intact(victims_file)


def test_a_bin_directory_made_by_another_user_gets_no_wrappers(shared: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("a stranger's directory needs root to plant (CI runs the tests as root)")
    (shared / "bin").mkdir(mode=0o777)
    os.chown(shared / "bin", stranger().pw_uid, stranger().pw_gid)
    with pytest.raises(UnsafePlaceError, match="belongs to another user"):
        write_run_wrappers(_wrappers(shared / "bin"))
    assert list((shared / "bin").iterdir()) == []


def test_wrappers_replace_their_own_and_keep_links_and_foreign_files(shared: Path, victims_file: Path) -> None:
    bin_dir = shared / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").write_text(render_wrapper("python", "/img/old.sif", load_recipe("local")))
    (bin_dir / "torchrun").symlink_to(victims_file)
    names, kept = write_run_wrappers(_wrappers(bin_dir))
    assert "python" in names and kept == ["torchrun"]
    assert "/img/env.sif" in (bin_dir / "python").read_text()
    _intact(victims_file)


def test_sweep_state_and_reports_replace_planted_links(shared: Path, victims_file: Path) -> None:
    for name in ("sweep.json", "table.txt", "table.csv", "table.json", "report.html"):
        (shared / name).symlink_to(victims_file)
    sweepstate.save(str(shared), sweepstate.SweepState(identity={"command": ["python", "train.py"]}))
    written = sweepstate.write_reports(str(shared), [], {"command": ["python", "train.py"]})
    assert [Path(p).name for p in written] == ["table.txt", "table.csv", "table.json", "report.html"]
    _intact(victims_file)
    assert not any((shared / name).is_symlink() for name in ("sweep.json", *map(lambda p: Path(p).name, written)))


def test_the_catalogue_page_replaces_planted_links(shared: Path, victims_file: Path) -> None:
    for name in ("index.html", "catalogue.json"):
        (shared / name).symlink_to(victims_file)
    page, data = write_site(shared, Catalogue(title="t", generated_at="now", envbuild_version="0", images=(), columns=(), packages=()))
    _intact(victims_file)
    assert page.read_text().startswith("<!DOCTYPE html>") and not data.is_symlink()
