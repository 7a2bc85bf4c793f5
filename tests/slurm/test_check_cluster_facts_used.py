"""What `envrun sbatch --check` does with what the cluster says beyond its partitions' limits: where the site's
recipe and the live cluster disagree (a stale recipe), the user's accounts from accounting, and the Slurm release
that decides whether srun inherits the job's --cpus-per-task. Pure: recorded scontrol and sacctmgr output
(tests/fixtures/scontrol/README.md, tests/fixtures/sacctmgr/README.md) and recipes written here."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from envbuild.recipes.loadrecipe import load_recipe
from envbuild.slurm import cluster
from envbuild.slurm.check.pitfalls import check_script
from envbuild.slurm.cluster import (
    Answer,
    Associations,
    ClusterFacts,
    associations_from,
    enforcement_from,
    parse_associations,
    parse_nodes,
    parse_partitions,
    read_live_cluster,
    slurm_release,
    version_from,
)
from tests.support.slurmfakes import HANG, FakeSlurm, Reply, live_replies

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
SCONTROL, SACCTMGR = FIXTURES / "scontrol", FIXTURES / "sacctmgr"


def site(**changes: object) -> ClusterFacts:
    facts = ClusterFacts(name="site", read_at="2026-11-28T12:00",
                         partitions=parse_partitions((SCONTROL / "site-partition.txt").read_text()),
                         nodes=parse_nodes((SCONTROL / "site-node.txt").read_text()))
    return replace(facts, **changes)  # type: ignore[arg-type]


def local_cluster() -> ClusterFacts:
    """The test cluster as recorded: partitions debug and short, node vm (2 cores, 4 gres gpus), Slurm 22.05.8."""
    return ClusterFacts(name="envbuild-local", read_at="2026-11-28T20:30",
                        partitions=parse_partitions((SCONTROL / "local-two-partitions-partition.txt").read_text()),
                        nodes=parse_nodes((SCONTROL / "local-node.txt").read_text()),
                        slurm_version=version_from(Answer(0, (SCONTROL / "local-version.txt").read_text())))


STALE_RECIPE = """\
name: mysite
description: a site whose recipe was written before its last upgrade
detect:
  slurm_cluster_names: [site]
node:
  gpus: 8                 # the nodes have 4 now
  gpu_vendor: nvidia
  cores: 48               # 64 now
  memory_gb: 500          # 512000 MB: the same, in rounded GB
partitions:
  gpu: {max_nodes: 16, max_time: '1-00:00:00'}            # MaxTime is 2 days now
  gpu_dev: {test: true, max_nodes: 2, max_time: '00:30:00'}  # MaxNodes is 1 now
  gpu_large: {full_node: true}                             # gone
batch:
  retired_partitions:
    cpu: replaced by the new CPU partition   # scontrol lists it still
"""


@pytest.fixture
def stale(tmp_path: Path) -> object:
    (tmp_path / "mysite.yaml").write_text(STALE_RECIPE)
    return load_recipe("mysite", tmp_path)


def findings(text: str, recipe: object, cluster: ClusterFacts | None, environ: dict[str, str] | None = None,
             rule: str = "") -> list[tuple[int, str, str]]:
    report = check_script("#!/bin/bash\n" + text, recipe, environ or {}, syntax_error=None,  # type: ignore[arg-type]
                          cluster=cluster)
    return [(f.line, f.level, f.what) for f in report.findings if not rule or f.rule == rule]


# --- the recipe against the live cluster ----------------------------------------------------------------------------


def test_the_local_recipe_against_the_test_clusters_two_partitions() -> None:
    """recipes/local.yaml names `debug`; the test cluster has `short` too: one info, and the script stays clean."""
    report = check_script("#!/bin/bash\n#SBATCH --time=00:05:00\nsrun hostname\n", load_recipe("local"), {},
                          syntax_error=None, cluster=local_cluster())
    (finding,) = [f for f in report.findings if f.rule == "recipe_vs_cluster"]
    assert finding.level == "info" and report.problems == 0
    assert finding.what.startswith("the recipe says the partitions are debug (recipes/local.yaml:")
    assert finding.what.endswith("partitions), scontrol show partition lists short too (the recipe may leave them "
                                 "out on purpose), now: the recipe may be stale")
    assert "scontrol show partition/node on envbuild-local, 2026-11-28T20:30" in finding.source
    assert finding.fix.startswith("nothing to change in the script; update recipes/local.yaml")


def test_every_disagreement_of_a_stale_recipe_once(stale: object) -> None:
    found = findings("#SBATCH -p gpu\n#SBATCH --time=01:00:00\nsrun python train.py\n", stale, site(),
                     rule="recipe_vs_cluster")
    assert all(level == "info" for _line, level, _what in found)
    whats = [re.sub(r" \([^()]*mysite\.yaml:\d+ [^()]*\), ", " | ", what) for _line, _level, what in found]
    assert whats == [
        "the recipe says partition gpu allows 1-00:00:00 | scontrol show partition says MaxTime=2-00:00:00, now: the "
        "recipe may be stale",
        "the recipe says partition gpu_dev takes at most 2 node(s) | scontrol show partition says MaxNodes=1, now: "
        "the recipe may be stale",
        "the recipe says partition gpu_large exists | scontrol show partition does not list it (gone, renamed, or "
        "hidden from this user), now: the recipe may be stale",
        "the recipe says partition cpu was retired (replaced by the new CPU partition) | scontrol show partition "
        "lists it, now: the recipe may be stale",
        "the recipe says a node has 8 GPU(s) | scontrol show node says the nodes of gpu, gpu_dev have 4 (their Gres), "
        "now: the recipe may be stale",
        "the recipe says a node has 48 cores | scontrol show node says the nodes of gpu, gpu_dev have 64 (Sockets x "
        "CoresPerSocket), now: the recipe may be stale",
    ]  # memory: 500G and RealMemory=512000 are one amount, rounded
    assert found[0][0] == 2  # the job's partition: at its --partition line
    assert "/mysite.yaml:11 partitions.gpu), " in found[0][2]


def test_memory_that_disagrees_beyond_rounding(stale: object, tmp_path: Path) -> None:
    (tmp_path / "mysite.yaml").write_text(STALE_RECIPE.replace("memory_gb: 500", "memory_gb: 256"))
    found = findings("srun hostname\n", load_recipe("mysite", tmp_path), site(), rule="recipe_vs_cluster")
    assert any("a job may ask for 256G per node" in what and "RealMemory=500G" in what for _l, _v, what in found)


def test_the_live_facts_judge_the_script_where_the_recipe_is_stale(stale: object) -> None:
    """The recipe's 1-day limit of gpu and its retired `cpu` would be false alarms: the cluster says otherwise."""
    rules = {rule for rule in ("partition_exists", "partition_limits", "cluster_partition", "cluster_limits")
             if findings("#SBATCH -p gpu\n#SBATCH --time=1-12:00:00\nsrun python train.py\n", stale, site(), rule=rule)
             or findings("#SBATCH -p cpu\nsrun python train.py\n", stale, site(), rule=rule)}
    assert rules == set()
    # away from the cluster the recipe is all there is, and it says so
    assert findings("#SBATCH -p gpu\n#SBATCH --time=1-12:00:00\nsrun python train.py\n", stale, None,
                    rule="partition_limits")
    assert findings("#SBATCH -p cpu\nsrun python train.py\n", stale, None, rule="partition_exists")


def test_a_recipe_for_another_cluster_is_not_compared(stale: object) -> None:
    report = check_script("#!/bin/bash\nsrun hostname\n", stale, {}, syntax_error=None,  # type: ignore[arg-type]
                          cluster=replace(site(), name="elsewhere"))
    assert not [f for f in report.findings if f.rule == "recipe_vs_cluster"]
    assert any("names Slurm cluster(s) site, and this is elsewhere" in note for note in report.notes)


def test_a_recipe_that_agrees_says_nothing(tmp_path: Path) -> None:
    agreeing = STALE_RECIPE.replace("gpus: 8", "gpus: 4").replace("cores: 48", "cores: 64").replace(
        "'1-00:00:00'", "'2-00:00:00'").replace("max_nodes: 2,", "max_nodes: 1,").replace(
        "  gpu_large: {full_node: true}                             # gone\n", "  cpu: {cpu_only: true}\n").split(
        "batch:")[0]
    (tmp_path / "mysite.yaml").write_text(agreeing)
    assert findings("srun hostname\n", load_recipe("mysite", tmp_path), site(), rule="recipe_vs_cluster") == []


# --- accounts -------------------------------------------------------------------------------------------------------


def with_accounts(answered: bool = True) -> ClusterFacts:
    if not answered:
        said = (SACCTMGR / "local-no-slurmdbd.txt").read_text()
        associations = associations_from("ci", "2026-11-28T12:00", Answer(1, "", said))
    else:
        associations = associations_from("ci", "2026-11-28T12:00", Answer(0, (SACCTMGR / "site-assoc.txt").read_text()))
    return site(associations=associations)


def test_the_recorded_associations() -> None:
    assert parse_associations((SACCTMGR / "site-assoc.txt").read_text()) == (
        ("project_2001234", ""), ("project_2005678", "gpu"), ("project_2005678", "gpu_dev"))
    slurm = FakeSlurm(live_replies())
    live = read_live_cluster("site", "ci", start=slurm)
    assert live.facts is not None and live.facts.associations is not None and live.facts.associations.answered
    assert slurm.started["sacctmgr"].argv == ["sacctmgr", "-nP", "show", "assoc", "user=ci", "cluster=site",
                                              "format=account,partition"]


def test_an_account_the_user_has_no_association_with() -> None:
    (found,) = findings("#SBATCH --account=project_2009999\nsrun hostname\n", None, with_accounts(),
                        rule="cluster_account")
    assert found == (2, "error", "--account=project_2009999: ci has no association with account project_2009999")
    report = check_script("#!/bin/bash\n#SBATCH -A project_2009999\nsrun hostname\n", None, {}, syntax_error=None,
                          cluster=with_accounts())
    (finding,) = [f for f in report.findings if f.rule == "cluster_account"]
    assert finding.fix == "--account=project_2001234 (yours: project_2001234, project_2005678)"
    assert finding.source.startswith("sacctmgr show assoc user=ci, ")


def test_an_account_of_the_users_own_and_its_partitions() -> None:
    assert findings("#SBATCH --account=Project_2001234\n#SBATCH -p cpu\nsrun hostname\n", None, with_accounts(),
                    rule="cluster_account") == []
    assert findings("#SBATCH --account=project_2005678\n#SBATCH -p gpu\nsrun hostname\n", None, with_accounts(),
                    rule="cluster_account") == []
    assert findings("#SBATCH --account=project_2005678\n#SBATCH -p cpu\nsrun hostname\n", None, with_accounts(),
                    rule="cluster_account") == [
        (3, "error", "-p cpu: account project_2005678 may be used on gpu, gpu_dev only")]


def test_sbatch_account_in_the_environment_is_the_one_checked() -> None:
    found = findings("#SBATCH --account=project_2001234\nsrun hostname\n", None, with_accounts(),
                     {"SBATCH_ACCOUNT": "project_2000000"}, rule="cluster_account")
    assert found == [(2, "error", "$SBATCH_ACCOUNT=project_2000000: ci has no association with account project_2000000")]


def test_accounting_that_does_not_answer_is_said_never_clean() -> None:
    (found,) = findings("#SBATCH --account=project_2001234\nsrun hostname\n", None, with_accounts(answered=False),
                        rule="accounting_unanswered")
    assert found == (2, "info", "--account=project_2001234: accounting does not answer: account not checked")
    report = check_script("#!/bin/bash\n#SBATCH -A x1\nsrun hostname\n", None, {}, syntax_error=None,
                          cluster=with_accounts(answered=False))
    (finding,) = [f for f in report.findings if f.rule == "accounting_unanswered"]
    assert report.problems == 0 and "You are not running a supported accounting_storage plugin" in finding.why


@pytest.mark.parametrize(("reply", "why"), [
    (Reply(missing=True), "sacctmgr is not on PATH"),
    (Reply(delay_s=HANG), "sacctmgr gave no answer in 0.2 s"),
    (Reply(returncode=1), "sacctmgr exit status 1"),
])
def test_accounting_missing_or_hung(reply: Reply, why: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster, "SACCTMGR_TIMEOUT_S", 0.2)
    live = read_live_cluster("", "ci", start=FakeSlurm({**live_replies(), "sacctmgr": reply}))
    assert live.facts is not None and live.facts.associations is not None
    assert (live.facts.associations.answered, live.facts.associations.why) == (False, why)


def test_no_account_named_or_accounting_not_asked() -> None:
    assert findings("srun hostname\n", None, with_accounts(answered=False), rule="accounting_unanswered") == []
    assert findings("#SBATCH -A nobody\nsrun hostname\n", None, site(), rule="cluster_account") == []
    assert findings("#SBATCH -A nobody\nsrun hostname\n", None, None, rule="cluster_account") == []
    assert Associations("ci", "now", True, (("a", ""),)).partitions_of("a") is None


# --- srun and --cpus-per-task by Slurm release ---------------------------------------------------------------------

JUWELS_LIKE = "#SBATCH --ntasks-per-node=4\n#SBATCH --cpus-per-task=24\nsrun python train.py\n"


def test_the_release_as_the_tools_print_it() -> None:
    assert local_cluster().slurm_version == "22.05.8" and local_cluster().release() == (22, 5)
    assert slurm_release("slurm 23.11.4") == (23, 11) and slurm_release("") is None
    assert version_from(Answer(1)) == "" and version_from(Answer(None, why="scontrol is not on PATH")) == ""


@pytest.mark.parametrize(("version", "said"), [
    ("21.08.8", False), ("22.05.0", True), ("22.05.8", True), ("23.02.7", True), ("23.11.0", False),
    ("24.05.1", False), ("25.05.3", False),
])
def test_srun_inherits_by_release_on_the_cluster(version: str, said: bool) -> None:
    """A fact where the release is known, for 22.05 to 23.02 only, on any site (the local recipe, none, JUWELS)."""
    for recipe in (load_recipe("local"), None, load_recipe("juwels-booster")):
        report = check_script("#!/bin/bash\n" + JUWELS_LIKE, recipe, {}, syntax_error=None,
                              cluster=site(slurm_version=version))
        found = [f for f in report.findings if f.rule == "srun_inherits"]
        assert bool(found) == said, (version, recipe)
        if found:
            assert found[0].what == "srun does not get the job's --cpus-per-task=24"
            assert f"this cluster's Slurm is {version}" in found[0].why
            assert "scontrol --version on site, 2026-11-28T12:00" in found[0].source
            assert "RELEASE_NOTES" in found[0].source


def test_srun_inherits_with_the_release_unknown() -> None:
    """Away from the cluster: a condition on the release, only where the recipe says its srun does not inherit."""
    (found,) = findings(JUWELS_LIKE, load_recipe("juwels-booster"), None, rule="srun_inherits")
    assert found[2] == "if this cluster's Slurm is 22.05 to 23.02, srun does not get the job's --cpus-per-task=24"
    assert findings(JUWELS_LIKE, load_recipe("local"), None, rule="srun_inherits") == []
    assert findings(JUWELS_LIKE, None, site(), rule="srun_inherits") == []  # scontrol --version said nothing
    exported = JUWELS_LIKE.replace("srun", 'export SRUN_CPUS_PER_TASK="$SLURM_CPUS_PER_TASK"\nsrun')
    assert findings(exported, None, site(slurm_version="23.02.7"), rule="srun_inherits") == []


def test_a_step_of_one_task_per_node_keeps_the_jobs_cpus() -> None:
    """A step that is not --exact gets all the job's CPUs on its nodes; its one task may use them (measured on the
    test cluster's Slurm 22.05.8: `--ntasks=1 --cpus-per-task=2`, then `srun nproc` printed 2)."""
    one = "#SBATCH --ntasks-per-node=1\n#SBATCH --cpus-per-task=24\nsrun torchrun --nproc-per-node=4 train.py\n"
    assert findings(one, None, site(slurm_version="22.05.8"), rule="srun_inherits") == []
    assert findings(one, load_recipe("juwels-booster"), None, rule="srun_inherits") == []
    several = one.replace("srun torchrun", "srun --ntasks-per-node=2 torchrun")
    assert findings(several, None, site(slurm_version="22.05.8"), rule="srun_inherits")


@pytest.mark.parametrize(("enforce", "enforced"), [
    ("associations,limits,qos,safe", True), ("limits", True), ("qos", True), ("wckeys", True), ("safe", True),
    ("all", True), ("none", False), ("0", False), ("nojobs,nosteps", False), ("", None),
])
def test_which_enforcement_refuses_an_account_without_association(enforce: str, enforced: bool | None) -> None:
    """slurm.conf(5): limits, qos, wckeys and safe each set associations; nojobs and nosteps do not."""
    assert Associations("ci", "now", True, enforce=enforce).enforced() is enforced


def test_the_enforcement_scontrol_prints() -> None:
    config = "Configuration data as of 2026-11-28T10:00:00\nAccountingStorageBackupHost = (null)\n" \
             "AccountingStorageEnforce = associations,limits,qos\nAccountingStorageHost   = db1\n"
    assert enforcement_from(Answer(0, config)) == "associations,limits,qos"
    assert enforcement_from(Answer(0, "AccountingStorageEnforce = none\n")) == "none"
    assert enforcement_from(Answer(1, "", "slurm_load_ctl_conf error")) == ""


def test_an_account_without_association_where_associations_are_not_enforced() -> None:
    """sbatch accepts the job there: an info that says so, never the error."""
    facts = with_accounts()
    assert facts.associations is not None
    unenforced = site(associations=replace(facts.associations, enforce="none"))
    script = "#SBATCH --account=project_2009999\nsrun hostname\n"
    assert findings(script, None, unenforced, rule="cluster_account") == []
    (found,) = findings(script, None, unenforced, rule="account_not_enforced")
    assert found == (2, "info", "--account=project_2009999: ci has no association with account project_2009999; this "
                                "cluster does not enforce associations, so sbatch accepts the job")
    enforced = site(associations=replace(facts.associations, enforce="associations,limits"))
    assert findings(script, None, enforced, rule="account_not_enforced") == []
    assert [f[1] for f in findings(script, None, enforced, rule="cluster_account")] == ["error"]
    # an account of the user's own says nothing either way
    assert findings("#SBATCH --account=project_2001234\nsrun hostname\n", None, unenforced,
                    rule="account_not_enforced") == []
