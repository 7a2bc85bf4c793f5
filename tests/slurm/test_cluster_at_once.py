"""`envrun sbatch --check` asks Slurm's commands at once (envbuild.slurm.cluster.read_live_cluster): a slow
controller costs the slowest query, not their sum, and one that cannot be reached costs one bounded wait that the
note states, after which the queries still running are stopped. Stand-in processes (tests/support/slurmfakes.py)
answer after a delay, fail at once or hang, so the waits are timed without a controller."""

from __future__ import annotations

import re
import time

import pytest

from envbuild.slurm import cluster
from envbuild.slurm.cluster import Answer, Query, ask_at_once, read_live_cluster
from tests.support.slurmfakes import HANG, FakeSlurm, Reply, all_missing, live_replies

SCRIPT = "#!/bin/bash\n#SBATCH --partition=debug\nsrun hostname\n"
CONTROLLER_QUERIES = ("scontrol ping", "scontrol show partition", "scontrol show node", "scontrol show config",
                      "sbatch")


@pytest.fixture(autouse=True)
def short_timeouts(monkeypatch: pytest.MonkeyPatch) -> None:
    """The queries' own timeouts, short enough to be waited out here; sbatch --test-only keeps a longer one."""
    monkeypatch.setattr(cluster, "SCONTROL_TIMEOUT_S", 0.6)
    monkeypatch.setattr(cluster, "SACCTMGR_TIMEOUT_S", 0.6)
    monkeypatch.setattr(cluster, "TEST_ONLY_TIMEOUT_S", 1.5)


def timed(slurm: FakeSlurm, user: str = "ci", script: str | None = SCRIPT) -> tuple[cluster.LiveCluster, float]:
    began = time.monotonic()
    live = read_live_cluster("envbuild-local", user, script, "/tmp", start=slurm)
    return live, time.monotonic() - began


def test_all_answering_costs_the_slowest_not_the_sum() -> None:
    replies = live_replies(delay_s=0.3)
    replies["scontrol show node"].delay_s = 0.5
    slurm = FakeSlurm(replies)
    live, took = timed(slurm)
    assert 0.5 <= took < 1.8  # 7 queries one after another: 2.3 s (slack for CI's load)
    assert live.facts is not None and live.why == ""
    assert sorted(live.facts.partitions) == ["debug"] and live.facts.slurm_version == "22.05.8"
    assert live.facts.associations is not None and live.facts.associations.accounts() == ["project_2001234"]
    assert live.facts.associations.enforce == "associations"
    assert live.test_only == (0, "sbatch: Job 7 to start at 2026-11-29T02:20:26 using 1 processors on nodes vm in "
                                 "partition debug")
    assert slurm.started["sbatch"].input == SCRIPT
    assert slurm.started["sacctmgr"].argv == ["sacctmgr", "-nP", "show", "assoc", "user=ci",
                                              "cluster=envbuild-local", "format=account,partition"]
    assert not any(process.killed.is_set() for process in slurm.started.values())


def test_a_controller_that_refuses_costs_no_wait() -> None:
    """scontrol ping reports a refused connection at once; the other commands would retry for seconds (9 s with
    MessageTimeout=10 on the test cluster's Slurm 22.05) before they said so: they are stopped."""
    replies = live_replies()
    ping = "Slurmctld(primary) at vm is DOWN\n*****************************************\n"
    replies["scontrol ping"] = Reply(ping, returncode=1, delay_s=0.05)
    for words in CONTROLLER_QUERIES[1:]:
        replies[words] = Reply(stderr="Unable to contact slurm controller (connect failure)", returncode=1,
                               delay_s=HANG)
    slurm = FakeSlurm(replies)
    live, took = timed(slurm)
    assert took < 1.5  # the others hang for ever: any finite wait shows they were stopped (slack for CI's load)
    assert live.facts is None and live.test_only is None
    assert re.fullmatch(r"no Slurm answered in (under 0\.1|\d\.\d) s: scontrol ping: Slurmctld\(primary\) at vm is DOWN", live.why)
    assert all(slurm.started[words].killed.is_set() for words in CONTROLLER_QUERIES[1:])


def test_a_hung_controller_costs_one_timeout() -> None:
    """Every query that asks the controller hangs: the first to time out (0.6 s here) ends the wait, and sbatch
    --test-only (its own timeout 1.5 s) and sacctmgr are stopped rather than waited for."""
    replies = live_replies()
    for words in CONTROLLER_QUERIES:
        replies[words] = Reply(delay_s=HANG)
    replies["sacctmgr"] = Reply(delay_s=HANG)
    slurm = FakeSlurm(replies)
    live, took = timed(slurm)
    assert 0.6 <= took < 2.0  # one after another: 0.6 s for each of 4 scontrol queries, 1.5 s for sbatch (3.9 s)
    assert live.facts is None
    assert re.fullmatch(r"no Slurm answered in (under 0\.1|\d\.\d) s: scontrol (ping|show (partition|node) --oneliner|show config): "
                        r"scontrol gave no answer in 0\.6 s", live.why), live.why
    assert slurm.started["sbatch"].killed.is_set() and slurm.started["sacctmgr"].killed.is_set()


def test_a_connection_failure_stops_the_others() -> None:
    """A Slurm whose ping does not say DOWN: the first query that says it could not connect ends the wait."""
    replies = live_replies()
    replies["scontrol ping"] = Reply(delay_s=HANG)
    replies["scontrol show partition"] = Reply(
        stderr="slurm_load_partitions error: Unable to contact slurm controller (connect failure)\n", returncode=1,
        delay_s=0.2)
    for words in ("scontrol show node", "scontrol show config", "sbatch"):
        replies[words] = Reply(delay_s=HANG)
    slurm = FakeSlurm(replies)
    live, took = timed(slurm)
    assert 0.2 <= took < 1.5  # the others hang for ever (slack for CI's load)
    assert re.match(r"no Slurm answered in \d\.\d s: scontrol show partition --oneliner: slurm_load_partitions "
                    r"error: Unable to contact slurm controller \(connect failure\)", live.why), live.why
    assert slurm.started["scontrol ping"].killed.is_set() and slurm.started["sbatch"].killed.is_set()


def test_a_backup_controller_that_answers() -> None:
    """The primary DOWN and the backup UP: the controller answers, nothing is stopped."""
    replies = live_replies()
    replies["scontrol ping"] = Reply("Slurmctld(primary) at ctl1 is DOWN\nSlurmctld(backup) at ctl2 is UP\n",
                                     returncode=1)
    live, _took = timed(FakeSlurm(replies))
    assert live.facts is not None and live.test_only is not None


def test_a_controller_that_stops_answering_after_its_facts(monkeypatch: pytest.MonkeyPatch) -> None:
    """The partitions and nodes came, then scontrol show config timed out: the facts are kept; sbatch --test-only
    and sacctmgr, still running, are stopped, and say why. (sacctmgr's own timeout is made longer here: at the same
    0.6 s it may time out first, a race of the test, and then says so itself.)"""
    monkeypatch.setattr(cluster, "SACCTMGR_TIMEOUT_S", 1.5)
    replies = live_replies()
    for words in ("scontrol show config", "sbatch", "sacctmgr"):
        replies[words] = Reply(delay_s=HANG)
    live, took = timed(FakeSlurm(replies))
    assert 0.6 <= took < 2.0  # slack for CI's load; the hung ones hang for ever
    assert live.facts is not None and live.facts.associations is not None
    assert live.test_only is None
    stopped = "stopped: scontrol show config: scontrol gave no answer in 0.6 s"
    assert live.test_only_why == stopped and live.facts.associations.why == stopped


def test_accounting_that_hangs_costs_its_own_timeout_only() -> None:
    """slurmdbd far away: the controller's facts come at once, sacctmgr is waited for up to its own timeout, in the
    same wait as the others, and the account is then not checked (the finding says why)."""
    replies = live_replies(delay_s=0.1)
    replies["sacctmgr"] = Reply(delay_s=HANG)
    live, took = timed(FakeSlurm(replies))
    assert 0.6 <= took < 2.0  # slack for CI's load; sacctmgr hangs for ever
    assert live.facts is not None and live.facts.associations is not None
    assert (live.facts.associations.answered, live.facts.associations.why) == (False, "sacctmgr gave no answer in 0.6 s")


def test_without_slurm() -> None:
    live, took = timed(all_missing())  # type: ignore[arg-type]
    assert took < 1.0 and live.facts is None
    assert live.why == "no Slurm answered here: scontrol show partition --oneliner: scontrol is not on PATH"


def test_sbatch_missing_where_scontrol_answers() -> None:
    replies = live_replies()
    replies["sbatch"] = Reply(missing=True)
    live, _took = timed(FakeSlurm(replies))
    assert live.facts is not None and live.test_only is None and live.test_only_why == "sbatch is not on PATH"


def test_a_query_that_does_not_ask_the_controller_never_stops_the_others() -> None:
    """scontrol --version answers by itself and sacctmgr asks slurmdbd: their failure says nothing of slurmctld."""
    asked = ask_at_once({
        "version": Query(("scontrol", "--version"), 0.2, controller=False),
        "partition": Query(("scontrol", "show", "partition"), 1.0),
    }, start=FakeSlurm({"scontrol --version": Reply(delay_s=HANG),
                        "scontrol show partition": Reply("PartitionName=debug\n", delay_s=0.4)}))
    assert asked.unreachable == "" and 0.4 <= asked.waited_s < 1.5  # not stopped at the version's 0.2 s
    assert asked.answers["partition"] == Answer(0, "PartitionName=debug\n")
    assert asked.answers["version"].timed_out and asked.answers["version"].returncode is None
