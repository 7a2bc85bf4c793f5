"""`envrun sbatch --check` and options newer than the cluster's Slurm (envbuild.slurm.check.rulebase
NEWER_SLURM_OPTIONS, each with the release that brought it): an error where the check runs on the cluster and
scontrol --version says it is older, a condition (info) where the release is not known, nothing where the site's
recipe gives the option as its own way; and an srun-only option in #SBATCH, which sbatch refuses on every release."""

from __future__ import annotations

from envbuild.recipes.loadrecipe import load_recipe
from envbuild.slurm.check.pitfalls import check_script
from envbuild.slurm.check.rulebase import Finding, newer_slurm_option
from envbuild.slurm.cluster import ClusterFacts

HEAD = """#!/bin/bash
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=4
#SBATCH --gpus-per-node=4
#SBATCH --time=01:00:00

"""
LUMI_HEAD = """#!/bin/bash
#SBATCH --account=project_465000000
#SBATCH --partition=standard-g
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-task=1
#SBATCH --time=01:00:00

"""
SHARING = "srun --gpu-bind=map:0,1,2,3 --gres-flags=allow-task-sharing python train.py\n"


def on(version: str) -> ClusterFacts:
    return ClusterFacts(name="site", read_at="2026-11-28T21:00", slurm_version=version)


def found(text: str, rule: str, cluster: ClusterFacts | None = None, system: str | None = None) -> list[Finding]:
    report = check_script(text, load_recipe(system) if system else None, {}, cluster=cluster)
    return [finding for finding in report.findings if finding.rule == rule]


def test_allow_task_sharing_on_an_older_slurm_is_an_error_naming_both_releases() -> None:
    (finding,) = found(HEAD + SHARING, "option_newer_than_slurm", on("22.05.8"))
    assert finding.level == "error" and finding.line == 7
    assert finding.what == ("srun --gres-flags=allow-task-sharing: this cluster's Slurm is 22.05.8, older than the "
                            "23.11.4 that brought it")
    assert "stops: the step does not start" in finding.why
    assert finding.source.startswith("scontrol --version on site, 2026-11-28T21:00; SchedMD Slurm "
                                     "CHANGELOG/slurm-23.11.md, 'Changes in Slurm 23.11.4'")
    assert "--gpus-per-node" in finding.fix and "23.11.4 or newer" in finding.fix
    assert finding.edit == (7, "srun --gpu-bind=map:0,1,2,3 python train.py")


def test_the_release_is_compared_to_the_micro_version() -> None:
    for older in ("23.11.3", "23.02.7", "slurm-wlm 22.05.8"):
        assert found(HEAD + SHARING, "option_newer_than_slurm", on(older)), older
    for newer in ("23.11.4", "24.05.1", "slurm 25.05.0"):
        assert found(HEAD + SHARING, "option_newer_than_slurm", on(newer)) == [], newer
        assert found(HEAD + SHARING, "option_release_unknown", on(newer)) == [], newer


def test_away_from_the_cluster_it_is_a_condition() -> None:
    (finding,) = found(HEAD + SHARING, "option_release_unknown")
    assert finding.level == "info"
    assert finding.what.startswith("srun --gres-flags=allow-task-sharing: if the cluster's Slurm is older than 23.11.4")
    assert "was not asked" in finding.why
    assert found(HEAD + SHARING, "option_newer_than_slurm") == []
    assert found(HEAD + "srun python train.py\n", "option_release_unknown") == []


def test_a_recipe_that_gives_the_flag_as_the_sites_way_is_not_doubted() -> None:
    text = LUMI_HEAD + "srun --gpu-bind=map:4,5,2,3,6,7,0,1 --gres-flags=allow-task-sharing python train.py\n"
    report = check_script(text, load_recipe("lumi-g"), {})
    assert report.findings == ()
    # on the cluster, the release still decides
    assert [f.rule for f in found(text, "option_newer_than_slurm", on("23.09.1"), "lumi-g")] == \
        ["option_newer_than_slurm"]


def test_on_an_older_slurm_the_per_task_rule_does_not_offer_the_flag() -> None:
    text = LUMI_HEAD + "srun python train.py\n"
    (finding,) = found(text, "forbidden_options", on("22.05.8"), "lumi-g")
    assert "allow-task-sharing" not in finding.fix and finding.edit is None
    (newer,) = found(text, "forbidden_options", on("24.05.3"), "lumi-g")
    assert newer.edit == (9, "srun --gres-flags=allow-task-sharing python train.py")


def test_other_newer_options_and_values() -> None:
    text = HEAD.replace("#SBATCH --time", "#SBATCH --tres-per-task=gres/gpu:1\n#SBATCH --time") + \
        "srun --gres-flags=enforce-binding,one-task-per-sharing python train.py\n"
    findings = found(text, "option_newer_than_slurm", on("22.05.8"))
    assert [(f.line, f.what.split(":")[0]) for f in findings] == [
        (5, "#SBATCH --tres-per-task=gres/gpu"), (8, "srun --gres-flags=enforce-binding,one-task-per-sharing")]
    assert "the job is not submitted" in findings[0].why
    assert findings[0].edit == (5, "#SBATCH")
    assert findings[1].edit is None  # the list holds another flag: taking the word out would drop it too
    assert found(text, "option_newer_than_slurm", on("23.02.7"))[0].line == 8  # 23.02 has --tres-per-task
    assert newer_slurm_option("--gres-flags=ALLOW-TASK-SHARING") is not None  # Slurm compares without case
    assert newer_slurm_option("--gres-flags=enforce-binding") is None


def test_allow_task_sharing_in_sbatch_is_refused_on_every_release() -> None:
    text = HEAD.replace("#SBATCH --time", "#SBATCH --gres-flags=allow-task-sharing\n#SBATCH --time")
    for cluster in (None, on("22.05.8"), on("25.05.0")):
        (finding,) = found(text + "srun python train.py\n", "srun_option_in_sbatch", cluster)
        assert finding.level == "error" and finding.line == 5
        assert finding.what == "#SBATCH --gres-flags=allow-task-sharing: sbatch refuses it, it is an srun option"
        assert "srun --gres-flags=allow-task-sharing ... (line 8)" in finding.fix and finding.edit is None
        assert found(text + "srun python train.py\n", "option_newer_than_slurm", cluster) == []
    (moved,) = found(text + SHARING, "srun_option_in_sbatch")
    assert moved.edit == (5, "#SBATCH")  # every srun has it: the #SBATCH line need not


# --- options srun takes from its input variables (srun(1): "SLURM_GRES_FLAGS  Same as --gres-flags") ----------------


def test_an_exported_input_variable_is_srun_s_option() -> None:
    """`export SLURM_GRES_FLAGS=allow-task-sharing` gives every later srun the option: too new for 22.05, and on
    LUMI-G it is the `unless` of the forbidden --gpus-per-task (no finding there)."""
    text = HEAD + "export SLURM_GRES_FLAGS=allow-task-sharing\nsrun --gpus-per-task=1 python train.py\n"
    (finding,) = found(text, "option_newer_than_slurm", on("22.05.8"))
    assert finding.line == 8 and finding.what.startswith(
        "srun SLURM_GRES_FLAGS=allow-task-sharing (line 7): this cluster's Slurm is 22.05.8, older than the 23.11.4")
    assert finding.edit is None
    assert found(text, "option_newer_than_slurm", on("24.05.1")) == []
    lumi = LUMI_HEAD.replace("#SBATCH --gpus-per-task=1\n", "#SBATCH --gpus-per-node=8\n")
    shared = lumi + "export SLURM_GRES_FLAGS=allow-task-sharing\nsrun --gpus-per-task=1 python train.py\n"
    assert found(shared, "forbidden_options", system="lumi-g") == []
    alone = lumi + "srun --gpus-per-task=1 python train.py\n"
    assert [f.line for f in found(alone, "forbidden_options", system="lumi-g")] == [9]


def test_a_variable_set_on_the_line_counts_and_the_lines_own_option_wins() -> None:
    inline = HEAD + "SLURM_GRES_FLAGS=allow-task-sharing srun python train.py\n"
    (finding,) = found(inline, "option_newer_than_slurm", on("23.02.7"))
    assert finding.what.startswith("srun SLURM_GRES_FLAGS=allow-task-sharing: this cluster's Slurm is 23.02.7")
    overridden = HEAD + "export SLURM_GRES_FLAGS=allow-task-sharing\nsrun --gres-flags=enforce-binding python x.py\n"
    assert found(overridden, "option_newer_than_slurm", on("22.05.8")) == []
    # not exported: a shell variable of the batch script, which srun never sees
    unexported = HEAD + "SLURM_GRES_FLAGS=allow-task-sharing\nsrun python train.py\n"
    assert found(unexported, "option_newer_than_slurm", on("22.05.8")) == []
    later = HEAD + "SLURM_GRES_FLAGS=allow-task-sharing\nexport SLURM_GRES_FLAGS\nsrun python train.py\n"
    assert [f.line for f in found(later, "option_newer_than_slurm", on("22.05.8"))] == [9]


def test_an_option_in_two_words_is_the_same_option() -> None:
    (finding,) = found(HEAD + "srun --gres-flags allow-task-sharing python train.py\n", "option_newer_than_slurm",
                       on("22.05.8"))
    assert finding.what.startswith("srun --gres-flags=allow-task-sharing: this cluster's Slurm is 22.05.8")
