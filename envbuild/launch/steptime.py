"""`envrun --step-timeout DURATION`: a time limit for the job step, as srun's own `--time`. Pure and light.

Slurm enforces it on every node of the step, even when envrun itself is gone: at the limit slurmstepd prints
"*** STEP ... CANCELLED AT ... DUE TO TIME LIMIT ***", sends SIGTERM to every task and SIGKILL after the
cluster's KillWait. That also bounds a rank that hangs in a collective: the others wait for it forever
otherwise (gloo's and NCCL's own timeouts are set in the training script's init_process_group, which
envrun cannot change). Slurm counts step limits in whole minutes and checks them about every 30 s
(slurmctld's background loop), so a step ends between the limit and about half a minute plus KillWait after it.
"""

from __future__ import annotations

from envbuild.launch.args import has_option, option_value
from envbuild.shared.durations import format_minutes, parse_duration
from envbuild.shared.errors import UsageError


def srun_time_limit(opts: tuple[str, ...], text: str, where: str) -> tuple[str, str, str]:
    """(srun option, the limit in words for envrun's messages, the note for --explain)."""
    if has_option(opts, "-t", "--time"):
        raise UsageError(f"{where} {text} and srun --time {option_value(opts, '-t', '--time')} both limit the step",
                         f"give one of them (srun's --time takes Slurm's forms; {where} also takes 90s, 30m, 2h)")
    seconds = parse_duration(text, where)
    value = format_minutes(seconds)
    rounded = "" if seconds % 60 == 0 else ", rounded up to whole minutes as Slurm counts them"
    note = (f"--time={value}: {where} {text}{rounded}. Slurm ends the step at the limit on every node (SIGTERM, "
            "SIGKILL after KillWait; it checks about every 30 s), so a rank that hangs in a collective cannot hold "
            "the job until its own time limit")
    return f"--time={value}", f"{where} {text} = srun --time={value}", note
