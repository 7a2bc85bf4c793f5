"""The live line of a step or wait, with a fake clock: plain `still running:` lines at the interval and no
control character off a terminal; a line redrawn in place on one; nothing with -q."""

from __future__ import annotations

import io

import pytest

from envbuild.shared.progress import LiveLine, heartbeat_interval


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_off_a_terminal_a_plain_line_comes_at_each_interval() -> None:
    out, clock = io.StringIO(), Clock()
    with LiveLine("[build 3/7] install", out, interval=30, terminal=False, thread=False, clock=clock) as live:
        for _ in range(7):
            clock.now += 10
            live.detail("Collecting six")
            live.tick()
        live.say("[build 3/7] install: a lasting line")
    assert out.getvalue().splitlines() == [
        "still running: [build 3/7] install, 30 s",
        "still running: [build 3/7] install, 60 s",
        "[build 3/7] install: a lasting line",
    ]
    assert "\x1b" not in out.getvalue() and "\r" not in out.getvalue()


def test_on_a_terminal_the_line_is_redrawn_with_the_time_and_the_latest_output_then_cleared() -> None:
    out, clock = io.StringIO(), Clock()
    with LiveLine("[base 1/2] debootstrap", out, terminal=True, thread=False, clock=clock) as live:
        clock.now += 65
        live.detail("I: Extracting libc6...")
        live.tick()
    text = out.getvalue()
    assert "\r\x1b[K[base 1/2] debootstrap  65 s  I: Extracting libc6..." in text
    assert text.endswith("\r\x1b[K"), "the live line is gone when the step ends"


def test_quiet_prints_nothing_and_an_interval_of_zero_no_heartbeat() -> None:
    for kwargs in ({"quiet": True, "interval": 1}, {"interval": 0}):
        out, clock = io.StringIO(), Clock()
        with LiveLine("step", out, terminal=False, thread=False, clock=clock, **kwargs) as live:
            clock.now += 100
            live.tick()
        assert out.getvalue() == ""


def test_the_thread_beats_while_the_caller_is_blocked() -> None:
    import time

    out = io.StringIO()
    with LiveLine("slow", out, interval=0.05, terminal=False, words="still waiting"):
        time.sleep(0.3)
    assert out.getvalue().count("still waiting: slow, ") >= 2


@pytest.mark.parametrize(("value", "env", "expected"), [(None, None, 30.0), (None, "5", 5.0), (2.0, "5", 2.0),
                                                        (None, "soon", 30.0), (None, "0", 0.0)])
def test_the_interval_comes_from_the_option_then_the_environment(value: float | None, env: str | None,
                                                                 expected: float, monkeypatch: pytest.MonkeyPatch) -> None:
    if env is None:
        monkeypatch.delenv("ENVBUILD_HEARTBEAT", raising=False)
    else:
        monkeypatch.setenv("ENVBUILD_HEARTBEAT", env)
    assert heartbeat_interval(value) == expected
