"""What `envbuild build` does with SPEC.lock (uv's conventions), as a pure decision: the lock's state and
the flags in, the action and the line the user reads out."""

from __future__ import annotations

import pytest

from envbuild.lock.policy import LockDecision, LockFlags, LockState, decide_lock
from envbuild.shared.errors import UsageError

PATH = "envs/tiny.lock"
CURRENT = LockState(PATH, exists=True, packages=3)
STALE = LockState(PATH, exists=True, stale=("requirement added: idna",), packages=3)
MISSING = LockState(PATH, exists=False)


def decide(state: LockState, **flags: bool) -> LockDecision:
    return decide_lock(state, LockFlags(**flags), spec_path="envs/tiny.yaml")


def test_a_current_lock_is_installed_exactly() -> None:
    decision = decide(CURRENT)
    assert decision.action == "use"
    assert decision.message == "using envs/tiny.lock (3 packages)"


def test_a_stale_lock_is_resolved_again_keeping_the_other_pins_and_says_what_changed() -> None:
    decision = decide(STALE)
    assert decision.action == "resolve" and not decision.upgrade
    assert "requirement added: idna" in decision.message and "rewriting it" in decision.message


def test_without_a_lock_the_build_resolves_from_the_spec_and_says_how_to_make_one() -> None:
    decision = decide(MISSING)
    assert decision.action == "unlocked" and "`envbuild lock envs/tiny.yaml`" in decision.message


def test_upgrade_without_a_lock_resolves_and_writes_one() -> None:
    assert decide(MISSING, upgrade=True).action == "resolve"


def test_an_unreadable_lock_is_resolved_from_scratch() -> None:
    assert decide(LockState(PATH, exists=True, readable=False)).action == "resolve"


def test_a_spec_without_python_packages_has_no_lock() -> None:
    assert decide(LockState(PATH, exists=False, lockable=False)).action == "unlocked"


def test_locked_uses_a_current_lock_and_leaves_a_stale_one_to_the_detailed_refusal() -> None:
    assert decide(CURRENT, locked=True).action == "use"
    assert decide(STALE, locked=True).action == "use"  # load_fresh_lock refuses it with the reasons


@pytest.mark.parametrize("flag", ["locked", "frozen"])
def test_locked_and_frozen_refuse_a_missing_lock_naming_the_fix(flag: str) -> None:
    with pytest.raises(UsageError) as caught:
        decide(MISSING, **{flag: True})
    assert caught.value.message == f"--{flag}: there is no lock file {PATH} for envs/tiny.yaml"
    assert caught.value.hint == "create it with: envbuild lock envs/tiny.yaml"


def test_frozen_installs_even_a_stale_lock_unchecked() -> None:
    decision = decide(STALE, frozen=True)
    assert decision.action == "use-unchecked" and "not checked" in decision.message


def test_upgrade_resolves_everything_anew_even_when_the_lock_is_current() -> None:
    decision = decide(CURRENT, upgrade=True)
    assert decision.action == "resolve" and decision.upgrade


@pytest.mark.parametrize("flags", [{"locked": True, "frozen": True}, {"locked": True, "upgrade": True},
                                   {"frozen": True, "upgrade": True}])
def test_exclusive_flags_are_a_usage_error(flags: dict[str, bool]) -> None:
    with pytest.raises(UsageError, match="exclude each other"):
        decide(CURRENT, **flags)
