"""A program cannot forge the report's records (issue 40): envrun's step supervisor, the host shim's sampler lines
and the real sampler, with a program that prints records of its own on stderr: without a key, with guessed keys,
with whatever key its environment holds. The report shows the real node only; the forged lines reach the user as
the program's own text; what the records name is escaped in the summary.

No Slurm: /bin/sh stands for srun and runs the host shim as one task would (run_step does not care what srun is)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SUMMARY = "envrun report:"
NODE = "real\x1b[2Jnode\nenvrun report: fake line"  # the sampler's node name, from $SLURMD_NODENAME

# envrun's side: the step's report and key, srun's environment with the key, the host shim's sampler lines.
DRIVER = """\
import os, sys
from envbuild.launch.shims import REPORT_KEY_VARIABLE, sampler_start_lines, sh_quote
from envbuild.launch.supervise import run_step
from envbuild.report.stepreport import StepReport

report = StepReport(command=("srun", "python", "forger.py"), environ={}, directory="")
env = dict(os.environ)
if sys.argv[2] == "with-key":
    env[REPORT_KEY_VARIABLE] = report.key
sampler = " ".join(sh_quote(word) for word in (sys.executable, "-m", "envbuild.report.sampler", "--interval", "0.3"))
shim = "\\n".join([*sampler_start_lines(sampler), 'exec "$@"'])
sys.exit(run_step(("/bin/sh", "-c", shim, "envrun-task", sys.executable, "-c", sys.argv[1]), env, step="0",
                  report=report))
"""

# The program: rank 0 for the sampler; on stderr, records of a fake node with a fake GPU, framed as the old wire
# did (no key), with guessed keys and with whatever key it can find in its environment; and terminal escapes.
FORGER = """\
import json, os, sys, time
marker = "\\x1eenvrun-sample\\x1f"
found = os.environ.get("ENVRUN_REPORT_KEY", "") + "".join(v for k, v in os.environ.items() if "KEY" in k)
guesses = ["", "0" * 32, "f" * 32, found, found[:32]]
def record(kind, seq, **fields):
    return json.dumps({"v": 1, "kind": kind, "node": "fake-node", "seq": seq, "t": time.time() + seq, **fields})
for seq in range(5):
    for key in guesses:
        sys.stderr.write(marker + key + record("start", 0, interval=1.0, cpus=999, gpu_source="nvidia-smi",
                         gpu_note="", gpu_names=[{"index": 0, "name": "FAKE-GPU", "mem_total": 1}]) + "\\n")
        sys.stderr.write(marker + key + record("sample", seq + 1, gpus=[{"index": 0, "util": 1.0}], ranks=[]) + "\\n")
    sys.stderr.write("\\x1b[2Jprogram text\\n")
    sys.stderr.flush()
    end = time.time() + 0.4
    while time.time() < end:
        pass
"""


def run(mode: str) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "RANK": "0", "LOCAL_RANK": "0", "SLURMD_NODENAME": NODE,
           "SLURM_LOCALID": "0"}
    for name in ("SLURM_JOB_ID", "SLURM_JOB_NAME", "SLURM_JOB_NODELIST", "ENVRUN_REPORT_KEY"):
        env.pop(name, None)
    return subprocess.run([sys.executable, "-c", DRIVER, FORGER, mode], env=env, capture_output=True, timeout=60,
                          check=False, cwd=REPO)


def test_forged_records_are_the_programs_text_and_the_report_shows_the_real_node_escaped() -> None:
    result = run("with-key")
    stderr = result.stderr.decode("utf-8", "replace")
    assert result.returncode == 0, stderr
    at = stderr.index(SUMMARY)
    passed, summary = stderr[:at], stderr[at:]
    # The forged lines reached the user as they were printed, every one; none counted as a record.
    assert passed.count('"node": "fake-node"') == 5 * 5 * 2, passed
    assert passed.count("\x1b[2Jprogram text\n") == 5  # the program's own output is its own: passed on unchanged
    assert "\x1e" in passed and "envrun-sample" in passed
    # The report: one node, the real one, named with its escapes shown; no fake node, GPU or CPU count.
    assert "1 node," in summary.split("\n")[0], summary
    assert "real\\x1b[2Jnode\\nenvrun report: fake line" in summary, summary
    assert "fake-node" not in summary and "FAKE-GPU" not in summary and "999" not in summary, summary
    assert "\x1b" not in summary and all(line.isprintable() for line in summary.split("\n")), summary
    assert [line for line in summary.split("\n") if line.startswith(SUMMARY)] == [summary.split("\n")[0]]


def test_without_the_key_no_sampler_starts_and_nothing_is_forged() -> None:
    """srun --export that drops the key, or a --dry-run script run by hand: no sampler, so no record reaches the
    user's terminal; the forged lines are still the program's text."""
    result = run("without-key")
    stderr = result.stderr.decode("utf-8", "replace")
    assert result.returncode == 0, stderr
    assert "envrun: report: no sampler reported" in stderr, stderr
    assert stderr.count('"node": "fake-node"') == 5 * 5 * 2 and "envrun report:" not in stderr
    assert '"node":"real' not in stderr  # no record of the real sampler leaked through
