"""`envrun --step-timeout DURATION`: a time limit for the job step, as srun's own `--time`. Pure and light.

Slurm enforces it on every node of the step, even when envrun itself is gone: at the limit slurmstepd prints
"*** STEP ... CANCELLED AT ... DUE TO TIME LIMIT ***", sends SIGTERM to every task and SIGKILL after the
cluster's KillWait. That also bounds a rank that hangs in a collective: the others wait for it forever
otherwise (gloo's and NCCL's own timeouts are set in the training script's init_process_group, which
envrun cannot change). Slurm counts step limits in whole minutes and checks them about every 30 s
(slurmctld's background loop), so a step ends between the limit and about half a minute plus KillWait after it.
"""

from __future__ import annotations

from envbuild.errors import UsageError
from envbuild.launch.args import has_option, option_value

FORMS = "90s, 30m, 2h, 1d, or Slurm's MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS (a bare number is minutes)"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_step_timeout(text: str, where: str = "--step-timeout") -> int:
    """'90s' -> 90, '30m' -> 1800, '2h' -> 7200, '45' -> 2700 (minutes, as srun), '1:30:00' -> 5400,
    '1-12' -> 129600 (days-hours, as srun)."""
    value = text.strip().lower()
    try:
        if value[-1:] in _UNITS:
            seconds = int(value[:-1]) * _UNITS[value[-1]]
        else:
            days = 0
            clock = value
            if "-" in value:
                day_text, _, clock = value.partition("-")
                days = int(day_text)
            parts = [int(p) for p in clock.split(":")]
            if any(p < 0 for p in parts) or days < 0 or not 1 <= len(parts) <= 3:
                raise ValueError
            if "-" in value:  # D-HH, D-HH:MM, D-HH:MM:SS
                hours, minutes, secs = [*parts, 0, 0][:3]
            else:  # MM, MM:SS, HH:MM:SS
                hours, minutes, secs = [[0, parts[0], 0], [0, *parts], parts][len(parts) - 1]
            seconds = ((days * 24 + hours) * 60 + minutes) * 60 + secs
    except (ValueError, IndexError):
        raise UsageError(f"{where} {text!r} is not a duration", f"write it as {FORMS}") from None
    if seconds <= 0:
        raise UsageError(f"{where} {text!r} is no time at all", "give a positive duration, e.g. --step-timeout 30m")
    return seconds


def slurm_minutes(seconds: int) -> str:
    """srun's --time value for `seconds`, in whole minutes (Slurm's unit), rounded up: 90 -> '00:02:00'."""
    minutes = -(-seconds // 60)
    days, minutes = divmod(minutes, 24 * 60)
    clock = f"{minutes // 60:02d}:{minutes % 60:02d}:00"
    return f"{days}-{clock}" if days else clock


def srun_time_limit(opts: tuple[str, ...], text: str, where: str) -> tuple[str, str, str]:
    """(srun option, the limit in words for envrun's messages, the note for --explain)."""
    if has_option(opts, "-t", "--time"):
        raise UsageError(f"{where} {text} and srun --time {option_value(opts, '-t', '--time')} both limit the step",
                         f"give one of them (srun's --time takes Slurm's forms; {where} also takes 90s, 30m, 2h)")
    seconds = parse_step_timeout(text, where)
    value = slurm_minutes(seconds)
    rounded = "" if seconds % 60 == 0 else ", rounded up to whole minutes as Slurm counts them"
    note = (f"--time={value}: {where} {text}{rounded}. Slurm ends the step at the limit on every node (SIGTERM, "
            "SIGKILL after KillWait; it checks about every 30 s), so a rank that hangs in a collective cannot hold "
            "the job until its own time limit")
    return f"--time={value}", f"{where} {text} = srun --time={value}", note
