"""One exit status per kind of problem, whichever command meets it (envbuild.shared.errors): a spec with problems
is a usage error (2) from `envbuild validate`, `envbuild build --dry-run` and `envbuild lock` alike, each saying
the same located problem, and validate says what build would."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from envbuild.cli.envbuild_main import main
from envbuild.shared.errors import EXIT_CLEAN, EXIT_USAGE

BAD = """\
name: tiny
system: local
base: debootstrap:bookworm
python:
  pakages: [six]
"""


def test_a_bad_spec_exits_the_same_from_validate_build_and_lock(tmp_path: Path) -> None:
    spec = tmp_path / "tiny.yaml"
    spec.write_text(BAD)
    outcomes = {}
    for argv in (["validate"], ["validate", "--json"], ["build", "--dry-run"], ["lock"]):
        result = CliRunner().invoke(main, [*argv, str(spec)], env={"ENVBUILD_CACHE_DIR": str(tmp_path / "store")})
        outcomes[" ".join(argv)] = result.exit_code
        assert "Traceback" not in result.output, result.output
        where = "stdout" if "--json" in argv else "stderr"
        assert "pakages" in getattr(result, where), (argv, result.output)
    assert set(outcomes.values()) == {EXIT_USAGE}, outcomes
    assert not (tmp_path / "tiny.lock").exists() and not (tmp_path / "store").exists(), "nothing was done"


def test_validate_exits_as_build_would_on_each_file(tmp_path: Path, repo: Path) -> None:
    """The highest status of the files it checks: a clean file beside a bad one does not hide it."""
    spec = tmp_path / "tiny.yaml"
    spec.write_text(BAD)
    good = str(repo / "envs/local-cpu-pytorch.yaml")
    assert CliRunner().invoke(main, ["validate", good]).exit_code == EXIT_CLEAN
    assert CliRunner().invoke(main, ["validate", good, str(spec)]).exit_code == EXIT_USAGE
    assert CliRunner().invoke(main, ["validate", str(tmp_path / "missing.yaml")]).exit_code == EXIT_USAGE
