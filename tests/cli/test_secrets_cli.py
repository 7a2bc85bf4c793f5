"""Secrets in the environment of `envbuild build --dry-run`, `envrun --dry-run` and `envrun sbatch --dry-run`
never reach their output; `envbuild validate` and `build` warn about a spec that would bake one into its
image. No apptainer needed: nothing is built (tests/integration/test_secrets.py builds)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import REPO, run_cli
from tests.support.canaries import canary_environment, found_in_text

ENVBUILD, ENVRUN = str(REPO / "bin/envbuild"), str(REPO / "bin/envrun")
TINY = "name: tiny\nsystem: local\nbase: debootstrap:bookworm\npython:\n  packages: [six]\n"


def test_dry_run_shows_credentialed_sources_redacted(tmp_path: Path) -> None:
    env, kinds = canary_environment(tmp_path, "127.0.0.1:9/simple")
    canaries = list(kinds.values())
    spec = tmp_path / "tiny.yaml"
    spec.write_text(TINY)
    result = run_cli([ENVBUILD, "build", str(spec), "-o", str(tmp_path / "tiny.sif"), "--dry-run"],
                     env_extra={**env, "ENVBUILD_CACHE_DIR": str(tmp_path / "store")}, timeout=120)
    assert result.returncode == 0, result.stderr
    assert found_in_text(result.stdout + result.stderr, canaries) == []
    assert "APPTAINERENV_UV_INDEX_URL=http://***@127.0.0.1:9/simple" in result.stdout  # pip.conf's, by variable
    assert "APPTAINERENV_ALL_PROXY=http://***@127.0.0.1:9" in result.stdout


def test_envrun_plans_and_batch_scripts_carry_no_secret(tmp_path: Path) -> None:
    env, kinds = canary_environment(tmp_path, "127.0.0.1:9/simple")
    canaries = list(kinds.values())
    for argv in ([ENVRUN, "--system", "local", "--image", "/etc/hostname", "--dry-run", "srun", "torchrun", "train.py"],
                 [ENVRUN, "sbatch", "--system", "local", "--image", "/etc/hostname", "--account", "p1", "--dry-run",
                  "--", "python", "train.py"],
                 [ENVRUN, "sbatch", "--system", "lumi-g", "--image", "/etc/hostname", "--account", "p1", "--nodes", "2",
                  "--dry-run", "--", "python", "train.py"]):
        result = run_cli(argv, env_extra=env, cwd=tmp_path, timeout=120)
        assert result.returncode == 0, f"{argv}: {result.stderr}"
        assert found_in_text(result.stdout + result.stderr, canaries) == [], argv


def test_a_spec_that_bakes_a_token_is_warned_about_and_still_valid(tmp_path: Path) -> None:
    spec = tmp_path / "leaky.yaml"
    spec.write_text(TINY + "env:\n  HF_TOKEN: hf_abcdefghijklmnopqrstuvwxyz0123\n")
    result = run_cli([ENVBUILD, "validate", str(spec)], timeout=120)
    assert result.returncode == 0, result.stderr
    assert f"warning: {spec}:7:3: env.HF_TOKEN: this value looks like an access token (hf_...)" in result.stderr
    assert "abcdefghijklmnop" not in result.stderr
    dry = run_cli([ENVBUILD, "build", str(spec), "--dry-run", "-o", str(tmp_path / "x.sif")],
                  env_extra={"ENVBUILD_CACHE_DIR": str(tmp_path / "store")}, timeout=120)
    assert dry.returncode == 0 and "warning:" in dry.stderr and "env.HF_TOKEN" in dry.stderr
