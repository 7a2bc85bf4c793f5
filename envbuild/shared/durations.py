"""Durations: one grammar for every time option of both tools (`envrun sbatch --time`, `envrun sweep --time`,
`envrun --step-timeout`, `envbuild cache prune --older-than`), parsed to whole seconds and written back in
Slurm's form. Pure and light: envrun's launch path reads --step-timeout with it (no re, no typing).

The grammar: a number with a unit (`90s`, `30m`, `2h`, `1d`, `2w`; `1.5h` too, rounded up to whole seconds;
the unit in either case), or one of Slurm's forms (`MM`, `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM`,
`D-HH:MM:SS`; a bare number is minutes, as Slurm reads it). What Slurm itself reads (a script's
`#SBATCH --time`, a partition's limit, scontrol's RunTime) takes Slurm's forms only: parse_slurm_time.
"""

from __future__ import annotations

from envbuild.shared.errors import UsageError

SLURM_FORMS = "MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS"
FORMS = f"90s, 30m, 2h, 1d or 2w (s, m, h, d, w), or Slurm's {SLURM_FORMS}"
_BARE = {"m": " (a bare number is minutes)", "s": " (a bare number is seconds)", None: ""}
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str, where: str, *, bare: str | None = "m", allow_zero: bool = False) -> int:
    """'90s' -> 90, '30m' -> 1800, '1.5h' -> 5400, '2w' -> 1209600, and Slurm's forms: '45' -> 2700 (minutes),
    '1:30:00' -> 5400, '1-12' -> 129600 (days-hours). `where` names the option in the error.
    bare: the unit of a bare number: "m" as Slurm's --time reads it; "s" where Slurm counts seconds (sbatch
    --signal's @TIME); None: refused (where minutes-or-days would be a costly guess, e.g. what to delete).
    allow_zero: '0s' is a duration (else it is refused as no time at all)."""
    value = text.strip().lower()
    unit = UNITS.get(value[-1:])
    if unit is not None:
        seconds = _with_unit(value[:-1].strip(), unit)
    elif _with_unit(value, 1) is not None:  # a bare number
        if bare is None:
            raise UsageError(f"{where}: {text!r} has no unit",
                             f"write the unit, e.g. {value}d (days), {value}h (hours) or {value}m (minutes)")
        seconds = _with_unit(value, UNITS[bare])
    else:
        seconds = _slurm_seconds(value)
    if seconds is None:
        raise UsageError(f"{where}: {text!r} is not a duration", f"write it as {FORMS}{_BARE.get(bare, '')}")
    return _positive(seconds, text, where, allow_zero)


def parse_slurm_time(text: str, where: str, *, allow_zero: bool = False) -> int:
    """Slurm's own forms only (what sbatch and slurmctld read): '90' -> 5400, '1:30:00' -> 5400,
    '2-00:00:00' -> 172800; 'UNLIMITED'/'INFINITE' and '2h' refused."""
    seconds = _slurm_seconds(text.strip())
    if seconds is None:
        raise UsageError(f"{where}: {text!r} is not a Slurm time", f"write it as {SLURM_FORMS}, e.g. 02:00:00")
    return _positive(seconds, text, where, allow_zero)


def format_duration(seconds: int) -> str:
    """Slurm's form: 5400 -> '01:30:00', 172800 -> '2-00:00:00'."""
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    clock = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{days}-{clock}" if days else clock


def format_minutes(seconds: int) -> str:
    """Slurm's form in whole minutes (the unit Slurm counts step and job limits in), rounded up:
    20 -> '00:01:00', 90 -> '00:02:00'."""
    return format_duration(-(-seconds // 60) * 60)


def _positive(seconds: int, text: str, where: str, allow_zero: bool) -> int:
    if seconds > 0 or (allow_zero and seconds == 0):
        return seconds
    raise UsageError(f"{where}: {text!r} is no time at all", f"give a positive duration, e.g. {where} 30m")


def _is_number(text: str) -> bool:
    return text.isascii() and text.isdigit()


def _with_unit(number: str, unit: int) -> int | None:
    """'1.5' with 3600 -> 5400; None unless `number` is digits with at most one decimal point (float() would
    also take '1e3', 'inf' and '1_0')."""
    whole, point, fraction = number.partition(".")
    if not (whole or fraction) or not all(_is_number(part) for part in (whole, fraction) if part):
        return None
    if not point:
        return int(whole) * unit
    scale: int = 10 ** len(fraction)  # typed Any: int ** int is a float for a negative exponent
    exact = (int(whole or "0") * scale + int(fraction or "0")) * unit
    return -(-exact // scale)  # rounded up to whole seconds


def _slurm_seconds(value: str) -> int | None:
    """MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS -> seconds; None for anything else."""
    days_text, dash, clock = value.rpartition("-") if "-" in value else ("0", "", value)
    parts = clock.split(":")
    if not 1 <= len(parts) <= 3 or not all(_is_number(part) for part in (days_text, *parts)):
        return None
    numbers = [int(part) for part in parts]
    if dash:  # D-HH, D-HH:MM, D-HH:MM:SS
        hours, minutes, seconds = [*numbers, 0, 0][:3]
    else:  # MM, MM:SS, HH:MM:SS
        hours, minutes, seconds = [[0, numbers[0], 0], [0, *numbers], numbers][len(numbers) - 1]
    return ((int(days_text) * 24 + hours) * 60 + minutes) * 60 + seconds
