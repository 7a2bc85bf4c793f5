"""`envbuild validate` and `envbuild build --dry-run` (bin/envbuild, as a user runs them) on a spec whose `system:`
names a drafted recipe next to it (`envrun recipe draft -o mycluster.yaml`, here the golden draft of the test
cluster), run from another directory; and a conda env file with `--system ./FILE`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envbuild.host.arch import host_arch
from tests.conftest import REPO, run_cli

ENVBUILD = str(REPO / "bin" / "envbuild")
SPEC = """\
name: train
system: {system}
base: debootstrap:bookworm
python:
  pytorch: {{version: "2.13.0"}}
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """tmp/proj/train.yaml beside tmp/proj/mycluster.yaml, a drafted recipe for this machine's architecture."""
    draft = (REPO / "tests" / "golden" / "recipedraft-local.yaml").read_text()
    assert "DRAFTED by envrun recipe draft" in draft
    draft = draft.replace("name: local", "name: mycluster").replace("architecture: x86_64", f"architecture: {host_arch()}")
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "mycluster.yaml").write_text(draft)
    (tmp_path / "elsewhere").mkdir()
    return tmp_path / "proj"


def envbuild(args: list[str], tmp_path: Path) -> tuple[int, str, str]:
    result = run_cli([ENVBUILD, *args], cwd=tmp_path / "elsewhere", timeout=300,
                     env_extra={"ENVBUILD_CACHE_DIR": str(tmp_path / "store"), "XDG_CACHE_HOME": str(tmp_path / "cache")})
    return result.returncode, result.stdout, result.stderr


def test_validate_and_the_dry_run_take_a_drafted_recipe_beside_the_spec(tmp_path: Path, project: Path) -> None:
    spec = project / "train.yaml"
    spec.write_text(SPEC.format(system="./mycluster.yaml"))
    code, out, err = envbuild(["validate", "--json", str(spec)], tmp_path)
    assert code == 0, out + err
    assert json.loads(out)["files"][0] | {"warnings": []} == {
        "file": str(spec), "ok": True, "name": "train", "system": "./mycluster.yaml", "problems": [], "warnings": []}
    code, out, err = envbuild(["build", "--dry-run", str(spec), "-o", str(tmp_path / "train.sif")], tmp_path)
    assert code == 0, out + err
    assert f"# target architecture: {host_arch()} (system mycluster)" in out
    # the draft writes no pytorch section: the schema's default variant, said as such
    assert "# torch variant cpu: the mycluster recipe's default_variant (not written in the recipe" in out
    assert f"(system {project / 'mycluster.yaml'})" in out  # the run wrappers read the same file


def test_a_missing_recipe_file_is_located_in_the_spec(tmp_path: Path, project: Path) -> None:
    spec = project / "train.yaml"
    spec.write_text(SPEC.format(system="../site/mycluster.yaml"))
    for command in (["validate"], ["build", "--dry-run"]):
        code, out, err = envbuild([*command, str(spec)], tmp_path)
        assert code == 2, out + err
        assert (f"{spec}:2:1: system: the recipe file '../site/mycluster.yaml' (resolved to "
                f"{tmp_path / 'site' / 'mycluster.yaml'}, from the spec file's directory) does not exist") in err
        assert "fix: correct the path (it is read from the spec file's directory" in err


def test_a_conda_env_file_takes_a_recipe_file_with_system(tmp_path: Path) -> None:
    """--system ./FILE reads the file from the working directory, as it does for envrun; the spec made of the env
    file names it by its absolute path."""
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "mylumi.yaml").write_text(
        (REPO / "recipes" / "lumi-g.yaml").read_text().replace("name: lumi-g", "name: mylumi"))
    env = tmp_path / "elsewhere" / "env.yml"
    env.write_text("name: demo\nchannels: [conda-forge]\ndependencies:\n  - python=3.11\n  - numpy\n")
    code, out, err = envbuild(["validate", "--system", "./mylumi.yaml", "env.yml"], tmp_path)
    assert code == 0, out + err
    assert out.strip() == f"env.yml: ok (env, system {tmp_path / 'elsewhere' / 'mylumi.yaml'})"
    code, out, err = envbuild(["validate", "--system", "./none.yaml", "env.yml"], tmp_path)
    assert code == 2 and "cannot read the recipe file ./none.yaml: No such file or directory" in err
