"""The one duration grammar (envbuild/shared/durations.py) of every time option of both tools (issue 31): units,
Slurm's forms, Slurm's forms alone for what Slurm reads, and written back in Slurm's form."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from envbuild.shared.durations import UNITS, format_duration, format_minutes, parse_duration, parse_slurm_time
from envbuild.shared.errors import UsageError


@pytest.mark.parametrize(("text", "seconds"), [
    ("90s", 90), ("30m", 1800), ("2h", 7200), ("1d", 86400), ("2w", 14 * 86400), (" 10M ", 600), ("1.5h", 5400),
    (".5m", 30), ("0.1s", 1), ("30 d", 30 * 86400),
    # Slurm's forms (a bare number is minutes)
    ("45", 2700), ("1:30", 90), ("1:30:00", 5400), ("02:00:00", 7200), ("2-0", 172800), ("1-12", 129600),
    ("1-12:30", 131400), ("0-0:0:20", 20), ("2-00:00:00", 172800),
])
def test_every_form_of_the_grammar(text: str, seconds: int) -> None:
    assert parse_duration(text, "--time") == seconds


@pytest.mark.parametrize("text", ["", "x", "s", "10x", "1:2:3:4", "-5", "1:-1", "1-2-3", "0", "0s", "1e3s", "infh",
                                  "1_0m", "+5", "1..5h", "UNLIMITED", "٣m"])
def test_what_is_not_a_duration_is_refused_where_and_with_the_forms(text: str) -> None:
    with pytest.raises(UsageError) as raised:
        parse_duration(text, "--step-timeout")
    assert raised.value.message.startswith(f"--step-timeout: {text!r} ")
    assert raised.value.hint and ("30m" in raised.value.hint)


def test_a_bare_number_is_minutes_seconds_or_refused_and_zero_can_be_allowed() -> None:
    """cache prune --older-than: a bare 30 (days? minutes?) chooses what to delete, so it is asked again;
    sbatch --signal-before counts seconds, as Slurm's --signal=SIG@TIME does."""
    with pytest.raises(UsageError) as raised:
        parse_duration("30", "--older-than", bare=None)
    assert "has no unit" in raised.value.message and "30d" in (raised.value.hint or "")
    assert parse_duration("0s", "--older-than", bare=None, allow_zero=True) == 0
    assert parse_duration("1:00:00", "--older-than", bare=None) == 3600
    assert parse_duration("90", "--signal-before", bare="s") == 90 and parse_duration("2m", "--signal-before", bare="s") == 120
    assert parse_duration("1.5", "--time") == 90 and parse_duration("45", "--time") == 2700


def test_what_slurm_reads_takes_slurms_forms_only() -> None:
    assert parse_slurm_time("90", "--time") == 5400 and parse_slurm_time("2-00:00:00", "--time") == 172800
    for bad in ("2h", "1.5", "", "INFINITE", "0"):
        with pytest.raises(UsageError, match=r"is not a Slurm time|no time at all"):
            parse_slurm_time(bad, "--time")


def test_written_back_in_slurms_form() -> None:
    assert format_duration(5400) == "01:30:00" and format_duration(172800) == "2-00:00:00"
    assert format_duration(parse_duration("2h", "--time")) == "02:00:00"
    assert [format_minutes(s) for s in (20, 90, 7200, 86400 * 2 + 61)] == ["00:01:00", "00:02:00", "02:00:00",
                                                                           "2-00:02:00"]


def test_time_units_have_one_home() -> None:
    """The seconds of each unit live in envbuild/shared/durations.py (UNITS); a table of them anywhere else in
    envbuild/ ({"h": 3600, ...}) is a second home that can drift from it."""
    home = Path(__file__).resolve().parent.parent / "envbuild" / "shared" / "durations.py"
    copies = []
    for path in sorted(home.parent.parent.rglob("*.py")):
        if path == home:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Dict):
                continue
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and isinstance(value, ast.Constant) and \
                        isinstance(key.value, str) and key.value.lower() in UNITS and value.value == UNITS[key.value.lower()]:
                    copies.append(f"{path.relative_to(home.parents[2])}:{node.lineno}: {key.value!r}: {value.value}")
    assert copies == [], "read envbuild.shared.durations.UNITS instead:\n" + "\n".join(copies)
