"""Site detection names a site only on that site's own evidence (issue 29): Slurm's cluster name first (the job's
$SLURM_CLUSTER_NAME, else ClusterName in slurm.conf), then a variable the site sets (JSC's $SYSTEMNAME), then
hostnames specific to the site. `nid*` alone is not LUMI (Perlmutter's nodes are nid* too); with no evidence the
answer is "unknown" with what was looked at, and only a launch falls back to `local`. Also the JURECA-DC recipe."""

from __future__ import annotations

from pathlib import Path

import pytest

from envbuild.host.node import HostNode
from envbuild.recipes import detect
from envbuild.recipes.detect import detect_site, detect_system, resolve_site_recipe
from envbuild.recipes.loadrecipe import load_recipe
from envbuild.shared.errors import UsageError
from envbuild.slurm.batch.resources import JobRequest, plan_resources


@pytest.fixture
def on_lumi(monkeypatch: pytest.MonkeyPatch) -> None:
    """LUMI's central software tree is here, as on LUMI's nodes."""
    monkeypatch.setattr(detect, "site_path_exists", lambda path: path == "/appl/lumi")


def site(environ: dict[str, str], hostname: str = "unrelated-host") -> str | None:
    return detect_site(environ, hostname, slurm_conf="")[0]


@pytest.mark.parametrize(("cluster", "expected"), [
    ("lumi", "lumi-g"), ("puhti", "puhti"), ("mahti", "mahti"), ("roihu", "roihu"),
    ("juwels", "juwels-booster"), ("jupiter", "jupiter"), ("envbuild-local", "local"),
])
def test_slurm_cluster_name_names_the_site(cluster: str, expected: str) -> None:
    name, why = detect_site({"SLURM_CLUSTER_NAME": cluster}, "nid001234", slurm_conf="")
    assert (name, why) == (expected, f"SLURM_CLUSTER_NAME={cluster}")


@pytest.mark.parametrize(("systemname", "expected"), [("jurecadc", "jureca-dc"), ("juwelsbooster", "juwels-booster")])
def test_jsc_systemname_names_the_jsc_system(systemname: str, expected: str) -> None:
    assert detect_site({"SYSTEMNAME": systemname}, "somewhere", slurm_conf="") == (expected, f"SYSTEMNAME={systemname}")


def test_a_jsc_systemname_without_a_recipe_names_nothing() -> None:
    assert detect_site({"SYSTEMNAME": "jusuf"}, "jsfl01", slurm_conf="") == (
        None, "no SLURM_CLUSTER_NAME or slurm.conf ClusterName, SYSTEMNAME=jusuf, hostname jsfl01")


@pytest.mark.parametrize(("hostname", "expected"), [
    ("jrlogin03", "jureca-dc"), ("jrc0123", "jureca-dc"), ("jwb0097", "juwels-booster"), ("jwlogin23", "juwels-booster"),
    ("mahti-login11", "mahti"), ("roihu-gpu-login2", "roihu"), ("puhti-login12", "puhti"), ("r01g02", "puhti"),
])
def test_site_specific_hostnames(hostname: str, expected: str) -> None:
    assert detect_site({}, hostname, slurm_conf="") == (expected, f"hostname {hostname}")


@pytest.mark.parametrize("hostname", ["g1101", "nid001234", "uan01", "laptop"])
def test_hostnames_shared_with_other_sites_name_nothing(hostname: str) -> None:
    assert site({}, hostname) is None


def test_perlmutter_node_is_an_unknown_site_not_lumi() -> None:
    """nid* is any HPE Cray node: without LUMI's own /appl/lumi it names nothing, whatever the cluster is called."""
    name, why = detect_site({"SLURM_CLUSTER_NAME": "perlmutter"}, "nid001234", slurm_conf="")
    assert name is None
    assert why == "SLURM_CLUSTER_NAME=perlmutter, hostname nid001234"


def test_perlmutter_node_without_lumi_paths_is_unknown() -> None:
    assert detect_site({"SLURM_CLUSTER_NAME": "perlmutter"}, "nid001234", slurm_conf="")[0] is None
    assert detect_site({}, "nid001234", slurm_conf="") == (
        None, "no SLURM_CLUSTER_NAME or slurm.conf ClusterName, hostname nid001234")


def test_an_unknown_cluster_name_does_not_hide_a_site_its_hostnames_name() -> None:
    """Cluster names first, but not as a veto: several recipes' cluster names have no public source, and a wrong one
    must not make a site's own jobs fall back to the local recipe."""
    assert site({"SLURM_CLUSTER_NAME": "elsewhere"}, "jwb0097") == "juwels-booster"


@pytest.mark.parametrize("hostname", ["nid001234", "nid005001", "uan01"])
def test_lumi_nodes_are_lumi_g(on_lumi: None, hostname: str) -> None:
    """A LUMI login or compute node outside a job: lumi-g, as today (lumi-c shares both; it is chosen with --system)."""
    assert detect_site({}, hostname, slurm_conf="") == ("lumi-g", f"hostname {hostname} beside /appl/lumi")


def test_lumi_job_is_lumi_g_by_its_cluster_name() -> None:
    assert site({"SLURM_CLUSTER_NAME": "lumi"}, "nid001234") == "lumi-g"


def test_slurm_conf_cluster_name_outside_a_job(tmp_path: Path) -> None:
    """A login node has no $SLURM_CLUSTER_NAME; its slurm.conf names the cluster (case folded, as Slurm does)."""
    conf = tmp_path / "slurm.conf"
    conf.write_text("# a comment\nSlurmctldHost=ctl\n  clustername = LUMI   # the name\nPartitionName=debug\n")
    assert detect_site({}, "uan01", slurm_conf=str(conf)) == ("lumi-g", f"ClusterName=lumi in {conf}")
    assert detect_site({"SLURM_CONF": str(conf)}, "uan01") == ("lumi-g", f"ClusterName=lumi in {conf}")
    # the job's own variable wins over the file
    assert detect_site({"SLURM_CLUSTER_NAME": "mahti", "SLURM_CONF": str(conf)}, "x")[0] == "mahti"


def test_slurm_conf_of_an_unknown_cluster(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=perlmutter\n")
    assert detect_site({}, "nid001234", slurm_conf=str(conf)) == (
        None, f"ClusterName=perlmutter in {conf}, hostname nid001234")


def test_unreadable_or_nameless_slurm_conf_is_no_evidence(tmp_path: Path) -> None:
    (tmp_path / "slurm.conf").write_text("SlurmctldHost=ctl\n")
    for path in (tmp_path / "slurm.conf", tmp_path / "missing.conf", tmp_path):
        assert detect_site({}, "laptop", slurm_conf=str(path))[0] is None


def test_this_machines_cluster_is_local_by_its_slurm_conf() -> None:
    """provision/cluster.sh writes ClusterName=envbuild-local: this machine is `local` on evidence, in and out of jobs."""
    conf = Path("/etc/slurm/slurm.conf")
    if "ClusterName=envbuild-local" not in (conf.read_text() if conf.exists() else ""):
        pytest.skip("the local test cluster is not provisioned here")
    assert detect_site({}, "any-hostname") == ("local", f"ClusterName=envbuild-local in {conf}")


def test_launch_falls_back_to_local_and_says_why() -> None:
    name, why = detect_system({"SLURM_CLUSTER_NAME": "perlmutter"}, "nid001234", slurm_conf="")
    assert name == "local"
    assert why == ("no known site (SLURM_CLUSTER_NAME=perlmutter, hostname nid001234): the local recipe, "
                   "this machine's own facts")


def test_checks_get_no_recipe_for_an_unknown_site(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(detect, "SLURM_CONF", "")  # not this machine's own slurm.conf
    recipe, why = resolve_site_recipe(None, {"SLURM_CLUSTER_NAME": "perlmutter"})
    assert recipe is None and why.startswith("SLURM_CLUSTER_NAME=perlmutter, hostname ")
    recipe, why = resolve_site_recipe(None, {"SYSTEMNAME": "jurecadc"})
    assert recipe is not None and recipe.name == "jureca-dc" and why == "SYSTEMNAME=jurecadc"
    recipe, why = resolve_site_recipe("jureca-dc", {"SLURM_CLUSTER_NAME": "perlmutter"})
    assert recipe is not None and recipe.name == "jureca-dc" and why == "--system"


def test_environment_variable_wins_over_hostnames() -> None:
    assert site({"ENVBUILD_SYSTEM": "puhti", "SYSTEMNAME": "jurecadc"}, "jwb0001") == "puhti"
    assert site({"SYSTEMNAME": "jurecadc"}, "jwb0001") == "jureca-dc"


def test_bad_hostname_pattern_is_refused_at_validation(tmp_path: Path) -> None:
    (tmp_path / "odd.yaml").write_text("name: odd\nnode: host\ndetect:\n  hostname_patterns: ['^nid(']\n")
    with pytest.raises(UsageError, match=r"odd.yaml:4:.*detect.hostname_patterns: .*not a regular expression"):
        load_recipe("odd", tmp_path)


# -- the JURECA-DC recipe ---------------------------------------------------------------------------------------

def jureca_plan(**request):
    request.setdefault("account", "training2556")
    return plan_resources(load_recipe("jureca-dc"), JobRequest(**request), HostNode(cpus=2))


def test_jureca_dc_facts() -> None:
    recipe = load_recipe("jureca-dc")
    assert (recipe.node.gpus, recipe.node.cores, recipe.node.memory_gb, recipe.node.gpu_type) == (4, 128, 512, "a100")
    assert set(recipe.partitions) == {"dc-gpu", "dc-gpu-devel", "dc-cpu", "dc-cpu-devel"}
    assert all(spec.full_node and spec.billing == "whole-node" for spec in recipe.partitions.values())  # no sharing
    assert [n for n, spec in recipe.partitions.items() if spec.cpu_only] == ["dc-cpu", "dc-cpu-devel"]
    assert recipe.launch.gpu_request == "--gres=gpu:{gpus}"
    assert recipe.launch.srun_env_from == {"SRUN_CPUS_PER_TASK": "SLURM_CPUS_PER_TASK"}
    assert recipe.launch.master_addr_suffix == "i"
    assert recipe.batch.account_required and recipe.runtime.flags == ("--nv",)
    assert recipe.binds == ("/p",)
    assert recipe.pytorch.default_variant.startswith("cuda")


@pytest.mark.parametrize(("request_", "partition"), [
    ({}, "dc-gpu"), ({"nodes": 8}, "dc-gpu"), ({"test": True}, "dc-gpu-devel"), ({"gpus_per_node": 1}, "dc-gpu"),
])
def test_jureca_gpu_jobs_go_to_gpu_partitions(request_: dict, partition: str) -> None:
    resources = jureca_plan(**request_)
    assert resources.partition == partition
    options = [d.option for d in resources.directives]
    assert "--account=training2556" in options
    assert any(option.startswith("--gres=gpu:") for option in options)


def test_jureca_gpu_job_on_a_cpu_partition_is_refused() -> None:
    with pytest.raises(UsageError, match=r"partition dc-cpu .*its nodes have no GPUs"):
        jureca_plan(partition="dc-cpu")


def test_jureca_needs_an_account() -> None:
    with pytest.raises(UsageError):
        plan_resources(load_recipe("jureca-dc"), JobRequest(), HostNode(cpus=2))


# -- detection on the way into `envrun sbatch --check` ------------------------------------------------------------

def check_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    import json

    from envbuild.cli import envrun_main

    with pytest.raises(SystemExit):
        envrun_main.main(["sbatch", "--check", *argv, "--json"])
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def login_node(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A login node outside a job: no job variables; slurm.conf is the test's."""
    for name in ("ENVBUILD_SYSTEM", "SLURM_CLUSTER_NAME", "SYSTEMNAME", "SBATCH_ACCOUNT"):
        monkeypatch.delenv(name, raising=False)
    conf = tmp_path / "slurm.conf"
    monkeypatch.setenv("SLURM_CONF", str(conf))
    return conf


COURSE_JOB = """#!/bin/bash
#SBATCH --account=training2556
#SBATCH --partition=dc-gpu
#SBATCH --nodes=1
#SBATCH --gres=gpu:4
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=48
#SBATCH --time=00:30:00

export SRUN_CPUS_PER_TASK="$SLURM_CPUS_PER_TASK"
srun torchrun --nproc-per-node=4 train.py
"""


def test_check_on_a_jureca_login_node_uses_jureca_rules(login_node: Path, monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SYSTEMNAME", "jurecadc")
    job = tmp_path / "job.sh"
    job.write_text(COURSE_JOB)
    (tmp_path / "train.py").write_text("")  # the job's program, where the job would start
    monkeypatch.chdir(tmp_path)
    data = check_json([str(job)], capsys)
    assert (data["system"], data["site_rules"], data["findings"]) == ("jureca-dc", True, [])
    # the same job without its GPU request: JURECA's rules know dc-gpu is a GPU partition
    job.write_text(COURSE_JOB.replace("#SBATCH --gres=gpu:4\n", ""))
    assert [f["rule"] for f in check_json([str(job)], capsys)["findings"]] == ["gpu_partition_without_gpus"]


def test_check_on_an_unknown_login_node_skips_site_rules(login_node: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    login_node.write_text("ClusterName=perlmutter\n")
    job = tmp_path / "job.sh"
    job.write_text(COURSE_JOB)
    data = check_json([str(job)], capsys)
    assert (data["system"], data["site_rules"]) == (None, False)
    assert data["notes"][0].startswith(f"no recipe for this site (ClusterName=perlmutter in {login_node}, hostname ")
