"""envrun --step-timeout: srun's --time, and where it is refused (pure; its grammar: tests/test_durations.py)."""

from __future__ import annotations

import pytest

from envbuild.host.runtime import Runtime
from envbuild.launch.launchplan import LaunchRequest, plan_launch
from envbuild.launch.steptime import srun_time_limit
from envbuild.recipes.loadrecipe import load_recipe
from envbuild.shared.errors import UsageError


def test_srun_gets_whole_minutes_rounded_up() -> None:
    option, words, note = srun_time_limit((), "90s", "--step-timeout")
    assert option == "--time=00:02:00" and words == "--step-timeout 90s = srun --time=00:02:00"
    assert "rounded up to whole minutes" in note and "KillWait" in note


def test_a_second_time_limit_is_refused() -> None:
    with pytest.raises(UsageError, match="both limit the step"):
        srun_time_limit(("-t", "10"), "5m", "--step-timeout")


def plan(*command: str, step_timeout: str = "", source: str = "--step-timeout"):
    return plan_launch(LaunchRequest(command=command, image="/img/env.sif", recipe=load_recipe("local"),
                                     runtime=Runtime("/usr/bin/apptainer", "apptainer"), cwd="/work/proj",
                                     step_timeout=step_timeout, step_timeout_from=source))


def test_the_plan_passes_the_limit_to_srun_and_explains_it() -> None:
    launch = plan("srun", "torchrun", "train.py", step_timeout="20m")
    assert launch.argv[: launch.argv.index("--kill-on-bad-exit=1")][-1] == "--time=00:20:00"
    assert launch.time_limit == "--step-timeout 20m = srun --time=00:20:00"
    assert any(reason.startswith("--time=00:20:00: --step-timeout 20m. Slurm ends the step") for reason in launch.reasons)
    assert "--time=00:20:00" in launch.script()
    assert launch.step == "torchrun"


def test_without_a_limit_the_users_own_srun_time_is_named() -> None:
    launch = plan("srun", "-t", "5", "python", "train.py")
    assert launch.time_limit == "srun --time=5" and launch.step == "rank"
    assert plan("srun", "--pty", "bash").step == "", "an interactive srun is exec'd as before"
    assert plan("python", "train.py").step == ""


def test_a_limit_without_srun_is_refused_with_a_fix() -> None:
    with pytest.raises(UsageError) as raised:
        plan("torchrun", "train.py", step_timeout="10m", source="$ENVRUN_STEP_TIMEOUT")
    assert "$ENVRUN_STEP_TIMEOUT 10m: a step time limit needs srun" in raised.value.message
    assert "envrun srun torchrun train.py" in (raised.value.hint or "") and "timeout 10m envrun" in (raised.value.hint or "")
