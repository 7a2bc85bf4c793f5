"""Slurm's time formats (--time, partition limits): parse to seconds and write back. Pure."""

from __future__ import annotations

from envbuild.errors import UsageError

FORMS = "MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS"


def parse_duration(text: str, where: str) -> int:
    """'90' -> 5400 (minutes), '1:30:00' -> 5400, '2-00:00:00' -> 172800; 'UNLIMITED'/'INFINITE' refused."""
    value = text.strip()
    try:
        days = 0
        if "-" in value:
            day_text, _, value = value.partition("-")
            days = int(day_text)
            parts = [int(p) for p in value.split(":")]
            if not 1 <= len(parts) <= 3:
                raise ValueError
            hours, minutes, seconds = [*parts, 0, 0][:3]
        else:
            parts = [int(p) for p in value.split(":")]
            if len(parts) == 1:
                hours, minutes, seconds = 0, parts[0], 0
            elif len(parts) == 2:
                hours, minutes, seconds = 0, parts[0], parts[1]
            elif len(parts) == 3:
                hours, minutes, seconds = parts
            else:
                raise ValueError
        if min(days, hours, minutes, seconds) < 0:
            raise ValueError
    except ValueError:
        raise UsageError(f"{where}: {text!r} is not a Slurm time", f"write it as {FORMS}, e.g. 02:00:00") from None
    total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    if total <= 0:
        raise UsageError(f"{where}: {text!r} is no time at all", "e.g. --time 02:00:00")
    return total


def format_duration(seconds: int) -> str:
    """5400 -> '01:30:00', 172800 -> '2-00:00:00'."""
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    clock = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{days}-{clock}" if days else clock
