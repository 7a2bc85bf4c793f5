"""`envrun sbatch --check` on the local test cluster asks the cluster itself (issue 38): a partition that does not
exist, a time over a partition's MaxTime (`short`, 10 minutes: provision/cluster.sh), more GPUs per node than the
nodes have, and `--test-only` with sbatch's own answer, each a finding; every fact says where it came from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli

pytestmark = [pytest.mark.slurm]
ENVRUN = str(REPO / "bin/envrun")


def check(tmp_path: Path, directives: str, *more: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, object]]:
    (tmp_path / "train.py").write_text("print('trained')\n")
    (tmp_path / "job.sh").write_text("#!/bin/bash\n" + directives + "srun python train.py\n")
    result = run_cli([ENVRUN, "sbatch", "--check", "job.sh", "--json", *more], cwd=tmp_path, timeout=120,
                     env_extra={"SBATCH_ACCOUNT": "", **(env or {})})
    assert result.returncode in (0, 1), result.stdout + result.stderr
    return result.returncode, json.loads(result.stdout)


def rules(data: dict[str, object]) -> list[tuple[str, str]]:
    return [(f["rule"], f["what"]) for f in data["findings"]]  # type: ignore[index, union-attr]


def test_a_partition_this_cluster_does_not_have(tmp_path: Path) -> None:
    code, data = check(tmp_path, "#SBATCH --partition=kempner_dev\n#SBATCH --time=00:05:00\n")
    assert code == 1
    (finding,) = [f for f in data["findings"] if f["rule"] == "cluster_partition"]  # type: ignore[union-attr]
    assert finding["what"] == "--partition=kempner_dev: this cluster (envbuild-local) has no partition kempner_dev"
    assert "debug" in finding["why"] and "scontrol show partition/node on envbuild-local" in finding["source"]
    assert any("checked against envbuild-local" in note for note in data["notes"])  # type: ignore[union-attr]


def test_a_time_over_the_partitions_limit_and_more_gpus_than_a_node_has(tmp_path: Path) -> None:
    code, data = check(tmp_path, "#SBATCH -p short\n#SBATCH --time=00:20:00\n#SBATCH --gpus-per-node=8\n")
    assert code == 1
    assert [found for found in rules(data) if found[0].startswith("cluster_")] == [
        ("cluster_limits", "--time=00:20:00 is over the time limit of short (00:10:00)"),
        ("cluster_limits", "--gpus-per-node=8: short has at most 4 GPUs per node")]


def test_test_only_gives_slurms_own_answer(tmp_path: Path) -> None:
    code, data = check(tmp_path, "#SBATCH --partition=nope\n#SBATCH --time=00:05:00\n", "--test-only")
    assert code == 1
    (refused,) = [f for f in data["findings"] if f["rule"] == "sbatch_test_only"]  # type: ignore[union-attr]
    assert "invalid partition" in refused["what"].lower()
    code, data = check(tmp_path, "#SBATCH --time=00:05:00\n", "--test-only")
    assert code == 0, data
    (accepted,) = [f for f in data["findings"] if f["rule"] == "sbatch_test_only_accepted"]  # type: ignore[union-attr]
    assert accepted["level"] == "info" and "to start at" in accepted["what"]


def test_where_the_recipe_and_the_cluster_disagree(tmp_path: Path) -> None:
    """recipes/local.yaml names `debug` only: `short` is an info. A copy that says `short` allows 30 minutes and
    names a partition the cluster lacks gives one info each, and the script is judged by what scontrol says."""
    code, data = check(tmp_path, "#SBATCH --time=00:05:00\n")
    assert code == 0
    (found,) = [f for f in data["findings"] if f["rule"] == "recipe_vs_cluster"]  # type: ignore[union-attr]
    assert found["level"] == "info" and "scontrol show partition lists short too" in found["what"]
    assert "recipes/local.yaml:" in found["what"] and "on envbuild-local, " in found["source"]
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    text = (REPO / "recipes/local.yaml").read_text()
    assert "  debug: {full_node: false}\n" in text
    (recipes / "local.yaml").write_text(text.replace("  debug: {full_node: false}\n", "  debug: {full_node: false}\n"
                                                     "  short: {max_time: '00:30:00'}\n  gone: {}\n"))
    code, data = check(tmp_path, "#SBATCH -p short\n#SBATCH --time=00:20:00\n", env={"ENVBUILD_RECIPES": str(recipes)})
    assert code == 1  # the 20 minutes are over short's real limit, whatever the recipe says
    whats = [what for rule, what in rules(data) if rule == "recipe_vs_cluster"]
    assert len(whats) == 2
    assert whats[0].startswith("the recipe says partition short allows 00:30:00 (recipes/local.yaml:")
    assert whats[0].endswith("scontrol show partition says MaxTime=00:10:00, now: the recipe may be stale")
    assert "partition gone exists" in whats[1] and "does not list it" in whats[1]
    assert [rule for rule, _what in rules(data) if rule in ("partition_limits", "cluster_limits")] == ["cluster_limits"]


def test_srun_and_cpus_per_task_on_this_clusters_slurm(tmp_path: Path) -> None:
    """The test cluster runs Slurm 22.05: srun does not inherit the job's --cpus-per-task, said as a fact for a
    step of several tasks (one task alone gets the job's CPUs: tests/slurm/test_check_cluster_facts_used.py)."""
    code, data = check(tmp_path, "#SBATCH --ntasks=2\n#SBATCH --cpus-per-task=2\n#SBATCH --time=00:05:00\n")
    (found,) = [f for f in data["findings"] if f["rule"] == "srun_inherits"]  # type: ignore[union-attr]
    assert code == 1 and found["what"] == "srun does not get the job's --cpus-per-task=2"
    assert "this cluster's Slurm is 22.05" in found["why"] and "scontrol --version on envbuild-local" in found["source"]
    assert any("Slurm 22.05" in note for note in data["notes"])  # type: ignore[union-attr]


def test_an_account_where_accounting_does_not_answer(tmp_path: Path) -> None:
    """The test cluster runs no slurmdbd: the account is not checked, and an info says so (the script stays clean)."""
    code, data = check(tmp_path, "#SBATCH --account=project_2001234\n#SBATCH --time=00:05:00\n")
    assert code == 0
    (found,) = [f for f in data["findings"] if f["rule"] == "accounting_unanswered"]  # type: ignore[union-attr]
    assert found["level"] == "info"
    assert found["what"] == "--account=project_2001234: accounting does not answer: account not checked"
    assert "sacctmgr" in found["why"] and found["source"].startswith("sacctmgr show assoc user=")
    assert any("accounting (sacctmgr) did not answer" in note for note in data["notes"])  # type: ignore[union-attr]


def test_a_recipe_file_given_with_system_is_compared_with_its_cluster(tmp_path: Path) -> None:
    """`--system FILE` (as `envrun recipe draft -o FILE` writes one) naming this ClusterName is this cluster's
    recipe: the live facts are read and compared with it; one naming another cluster is not compared."""
    text = (REPO / "recipes/local.yaml").read_text().replace("name: local\n", "name: mysite\n").replace(
        "  debug: {full_node: false}\n", "  debug: {full_node: false}\n  short: {max_nodes: 4, max_time: '00:10:00'}\n")
    (tmp_path / "mysite.yaml").write_text(text)
    code, data = check(tmp_path, "#SBATCH --time=00:05:00\n", "--system", str(tmp_path / "mysite.yaml"))
    # short's MaxNodes=UNLIMITED may be a QOS's 4, and its MaxTime agrees: nothing is stale
    assert code == 0 and not [rule for rule, _what in rules(data) if rule == "recipe_vs_cluster"]
    (tmp_path / "mysite.yaml").write_text(text.replace("'00:10:00'", "'00:20:00'"))
    code, data = check(tmp_path, "#SBATCH --time=00:05:00\n", "--system", str(tmp_path / "mysite.yaml"))
    (what,) = [what for rule, what in rules(data) if rule == "recipe_vs_cluster"]
    assert what.startswith("the recipe says partition short allows 00:20:00 (") and "/mysite.yaml:" in what
    assert what.endswith("partitions.short), scontrol show partition says MaxTime=00:10:00, now: the recipe may be stale")
    assert any("checked against envbuild-local" in note for note in data["notes"])  # type: ignore[union-attr]
    (tmp_path / "other.yaml").write_text(text.replace("[envbuild-local]", "[elsewhere]").replace("mysite", "other"))
    code, data = check(tmp_path, "#SBATCH --time=00:05:00\n", "--system", str(tmp_path / "other.yaml"))
    assert not [rule for rule, _what in rules(data) if rule.startswith(("recipe_vs", "cluster_"))]
    assert any("were not checked" in note for note in data["notes"])  # type: ignore[union-attr]


def test_options_newer_than_this_clusters_slurm(tmp_path: Path) -> None:
    """The test cluster's Slurm 22.05 has no --gres-flags=allow-task-sharing (23.11.4): on the srun line an error
    naming both releases, in #SBATCH one on any release, and sbatch --test-only refuses the script too."""
    (tmp_path / "job.sh").write_text("#!/bin/bash\n#SBATCH --ntasks=2\n#SBATCH --time=00:05:00\n"
                                     "#SBATCH --gres-flags=allow-task-sharing\n\n"
                                     "srun --gres-flags=allow-task-sharing hostname\n")
    result = run_cli([ENVRUN, "sbatch", "--check", "job.sh", "--json", "--test-only"], cwd=tmp_path, timeout=120,
                     env_extra={"SBATCH_ACCOUNT": ""})
    assert result.returncode == 1, result.stdout + result.stderr
    found = {(f["rule"], f["line"]): f for f in json.loads(result.stdout)["findings"]}
    newer = found[("option_newer_than_slurm", 6)]
    assert newer["level"] == "error" and "this cluster's Slurm is 22.05" in newer["what"] and "23.11.4" in newer["what"]
    assert newer["source"].startswith("scontrol --version on envbuild-local")
    assert found[("srun_option_in_sbatch", 4)]["level"] == "error"
    assert any(rule == "sbatch_test_only" and "gres-flags" in f["what"] for (rule, _line), f in found.items())
