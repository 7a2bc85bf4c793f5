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


def test_a_dry_run_that_knows_the_build_will_stop_exits_as_the_build_would(tmp_path: Path) -> None:
    """A conda env file without the Miniforge license accepted: the plan is shown, then the reason the build
    would stop there, with its fix and the build's status (a usage error), not 0."""
    env_file = tmp_path / "env.yml"
    env_file.write_text("name: myenv\nchannels: [conda-forge]\ndependencies:\n  - python=3.12\n  - numpy\n")
    argv = ["build", str(env_file), "--system", "lumi-g", "--dry-run"]
    environ = {"ENVBUILD_CACHE_DIR": str(tmp_path / "store")}
    stopped = CliRunner().invoke(main, argv, env=environ)
    assert stopped.exit_code == EXIT_USAGE, stopped.output
    assert "## build" in stopped.stdout and "cotainr" in stopped.stdout  # the plan, as before
    assert "error: " in stopped.stderr and "it asks you to accept on the terminal" in stopped.stderr
    assert "fix: read the license, then write `accept_licenses: true`" in stopped.stderr
    accepted = CliRunner().invoke(main, [*argv, "--accept-licenses"], env=environ)
    assert accepted.exit_code == EXIT_CLEAN and "error" not in accepted.stderr, accepted.output
