"""The shell text envrun runs inside the container before the program: activating the image's conda
environment ($WITH_CONDA), putting venv overlays on PATH, the recipe's per-task variables.

The shim is two words: BOOT, run by the image's /bin/sh, and BODY, passed to it as $1:

    /bin/sh -c BOOT envrun-task BODY program args...

BOOT re-executes BODY under bash when $WITH_CONDA is set and the image has bash, else evaluates BODY in
/bin/sh. $WITH_CONDA is written for bash (LUMI's images set `source /opt/miniconda3/bin/activate
pytorch`, which dash, Debian's /bin/sh, does not know: it printed "source: not found" and the program
ran with the image's system Python). BODY stops with a clear message when the activation fails instead
of running the program in the wrong environment. The program's arguments stay separate argv words
throughout (`exec "$@"`), never parsed by a shell.
"""

from __future__ import annotations

# $0 of the shims, shown by ps
TASK_SHIM_NAME = "envrun-task"

BOOT = (
    'body=$1; shift\n'
    'if [ -n "${WITH_CONDA:-}" ] && command -v bash >/dev/null 2>&1; then exec bash -c "$body" envrun-task "$@"; fi\n'
    'eval "$body"'
)


def sh_quote(text: str) -> str:
    """`text` as one word for a POSIX shell (shlex.quote without shlex, which costs envrun its re import)."""
    if text and all(c.isalnum() or c in "@%+=:,./-_" for c in text):
        return text
    return "'" + text.replace("'", "'\"'\"'") + "'"


def activation_lines(env_prefix: str) -> list[str]:
    """Evaluate $WITH_CONDA in a function, so that a `source .../activate` without arguments sees no
    positional parameters (bash would hand it the program's arguments), and stop when it fails."""
    override = f"or set {env_prefix}WITH_CONDA on the host to a command that works (empty: run without activating)"
    return [
        'envrun_activate() { eval "$WITH_CONDA"; }',
        'if [ -n "${WITH_CONDA:-}" ]; then',
        '    envrun_activate || {',
        '        status=$?',
        '        if [ -n "${BASH_VERSION:-}" ]; then how=bash; fix="check that the environment it activates exists in the image"',
        '        else how="/bin/sh, as this image has no bash"; fix="make it a command /bin/sh understands (. instead of source)"; fi',
        "        printf 'envrun: %s\\n' >&2 \\",
        '            "could not activate the image\'s environment: WITH_CONDA=$WITH_CONDA failed in $how (exit status $status)" \\',
        '            "stopping here instead of running the program with the image\'s other Python" \\',
        f'            "fix: $fix, {override}"',
        "        exit 1",
        "    }",
        "fi",
    ]


def overlay_lines(mounts: tuple[str, ...]) -> list[str]:
    """Each overlay's bin/ first on PATH, a later overlay (which sits on top) before an earlier one, and
    VIRTUAL_ENV naming the top one, as the venv's own activate script would set them."""
    if not mounts:
        return []
    path = ":".join(sh_quote(f"{mount}/bin") for mount in reversed(mounts))
    return [f'export PATH={path}:"$PATH" VIRTUAL_ENV={sh_quote(mounts[-1])}']


# The checkpoint signal of `envrun sbatch --requeue` jobs (envbuild.slurm.batch.requeue).
CHECKPOINT_SIGNAL = "USR1"


def signal_record_line(kind: str) -> str:
    """Record this process for `envrun signal-ranks` (envbuild.slurm.batch.forward) when the batch script asks for
    it ($ENVRUN_SIGNAL_DIR, set by `envrun sbatch --requeue`): an empty file named <node>.<pid>.<kind>. The
    pid stays the program's, as everything after it is exec'd. The signal is set to be ignored first, which
    survives exec: a program that installs its own handler gets the signal, one that does not is not killed
    by it (it still sees $ENVRUN_CHECKPOINT_FILE), nor is a rank that is already exiting."""
    return (f"trap '' {CHECKPOINT_SIGNAL}; "
            f'[ -z "${{ENVRUN_SIGNAL_DIR:-}}" ] || : > "$ENVRUN_SIGNAL_DIR/${{SLURMD_NODENAME:-node}}.$$.{kind}" || '
            "echo \"envrun: cannot record this process in $ENVRUN_SIGNAL_DIR: it will not get the checkpoint signal\" >&2")


# The rank's own record and ignored signal (see signal_record_line), written in Python: torchrun passes --no-python arguments
# through string.Template (its ${local_rank} macro), which turns the shell's $$ into a plain $.
_RANK_RECORD = (
    'import signal\n'
    f'signal.signal(signal.SIG{CHECKPOINT_SIGNAL}, signal.SIG_IGN)\n'
    'd = os.environ.get("ENVRUN_SIGNAL_DIR")\n'
    'if d:\n'
    '    try: open(os.path.join(d, "%s.%d.rank" % (os.environ.get("SLURMD_NODENAME", "node"), os.getpid())), "w").close()\n'
    '    except OSError as e: print("envrun: cannot record this rank in %s (%s): it will not get the checkpoint signal" '
    '% (d, e), file=sys.stderr)\n'
)


def rank_affinity_script(record: bool = False) -> str:
    """torchrun --no-python runs this before each rank's Python (see _Planner.rank_affinity); with `record`,
    the rank also records itself for `envrun signal-ranks`. No `$$` here: see _RANK_RECORD."""
    return (
        'py=$(command -v python || command -v python3)\n'
        'exec "$py" -c \'import os, sys\n'
        'have = sorted(os.sched_getaffinity(0))\n'
        'rank, ranks = int(os.environ.get("LOCAL_RANK", 0)), int(os.environ.get("LOCAL_WORLD_SIZE", 1))\n'
        'if sys.argv[1]:\n'
        '    table = dict(e.split(":") for e in sys.argv[1].split(";"))\n'
        '    want = {int(c) for c in table.get(str(rank), "").split(",") if c} & set(have)\n'
        'else:\n'
        '    share = max(1, len(have) // max(1, ranks))\n'
        '    want = set(have[rank * share % len(have):][:share])\n'
        'if want: os.sched_setaffinity(0, want)\n'
        + (_RANK_RECORD if record else "") +
        'os.execvp(sys.argv[2], sys.argv[2:])\' "$ENVRUN_RANK_CORES" "$py" -u "$@"'
    )


# The step's report key (envbuild.report.wire): envrun puts it in srun's environment, and the host shim takes it
# out again before anything of the program's starts.
REPORT_KEY_VARIABLE = "ENVRUN_REPORT_KEY"


def sampler_start_lines(sampler: str) -> list[str]:
    """The host shim's lines that start the job report's sampler (`sampler`: its words, quoted for the shell) in
    the node's first task, with its own pid (the task's root) and its parent's (slurmstepd) to watch.

    The key that frames its records (envbuild.report.wire) leaves the environment in every task, first, so that
    the program never has it: not in its environment, not on any argv (ps shows those to every user), not in a
    file. The sampler reads it on its stdin, a here-document (a pipe in dash and newer bash; older bash writes a
    0600 file in $TMPDIR that it removes before the sampler runs). Without a key (a --dry-run script run by hand,
    `srun --export` that drops it) no sampler starts: nobody would take its records out of the stderr."""
    return [
        f'envrun_report_key=${{{REPORT_KEY_VARIABLE}:-}}; unset {REPORT_KEY_VARIABLE}',
        'if [ -n "$envrun_report_key" ] && [ "${SLURM_LOCALID:-0}" = 0 ]; then '
        f'{sampler} --task-pid $$ --step-pid "$PPID" >/dev/null <<envrun_report_key &',
        "$envrun_report_key",
        "envrun_report_key",
        "fi",
        "unset envrun_report_key",
    ]
