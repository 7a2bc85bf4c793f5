"""Readers of a batch script's body side by side (issue 38): tree-sitter-bash (what envbuild.slurm.check.shellwords
uses), bashlex, and the regular-expression tokenizer it replaced (read from git at OLD_COMMIT).

For each reader: (a) on the constructs the issue lists, does it give the simple commands bash runs (the program
word and its arguments, quotes removed); (b) on a script of about 1 MiB, its time and peak memory (each reader
in a fresh process: tree-sitter allocates in C, which tracemalloc does not see, so the figure is the process's
peak RSS over one that only imported the reader); and the end-to-end `envrun sbatch --check` of that script.

    .venv/bin/python bench/check_parser.py [--size-mib 1] [--quick]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OLD_COMMIT = "90797b2"  # the last commit with the regular-expression tokenizer

# construct -> (script body, the commands bash runs there: each as its words, quotes removed)
CASES: dict[str, tuple[str, list[list[str]]]] = {
    "array of $(...)": ("nodes=( $(scontrol show hostnames $SLURM_JOB_NODELIST) )\nnodes_array=($nodes)\n"
                        "srun -w ${nodes_array[0]} hostname\n",
                        [["nodes=( $(scontrol show hostnames $SLURM_JOB_NODELIST) )"], ["nodes_array=($nodes)"],
                         ["srun", "-w", "${nodes_array[0]}", "hostname"]]),
    "declare": ('declare -a extra=(--foo "bar baz")\nexport A=1 B\n',
                [["declare", "-a", 'extra=(--foo "bar baz")'], ["export", "A=1", "B"]]),
    "function": ("setup() {\n  module load x\n}\nsetup\n", [["module", "load", "x"], ["setup"]]),
    "case": ('case "$1" in\n  a) echo a ;;\n  *) srun b ;;\nesac\n', [["echo", "a"], ["srun", "b"]]),
    "[[ ]]": ('if [[ -n "$X" && $Y == z* ]]; then srun yes; fi\n', [["srun", "yes"]]),
    "$(( ))": ('SRUN_ARGS="--nodes=$((NUM_NODES - 1)) --ntasks=1"\nsrun $SRUN_ARGS x\n',
               [["SRUN_ARGS=--nodes=$((NUM_NODES - 1)) --ntasks=1"], ["srun", "$SRUN_ARGS", "x"]]),
    "<(...)": ("diff <(echo a) <(echo b) || true\n", [["diff", "<(echo a)", "<(echo b)"], ["true"]]),
    "here-document": ("cat <<EOF > w.sh\nsrun inside\nEOF\nsrun after\n", [["cat"], ["srun", "after"]]),
    "# inside words": ("srun --job-name=a#b x # a comment\n", [["srun", "--job-name=a#b", "x"]]),
    "$(...) with a quote": ('ip=$(srun -w "$h" hostname --ip-address)\n',
                            [['ip=$(srun -w "$h" hostname --ip-address)']]),
}
# one block of a long script: every construct above, repeated to the size asked
BLOCK = "".join(body for body, _ in CASES.values()) + "srun -n 2 python train.py --lr 3\nX=1\n"


def old_reader() -> types.ModuleType:
    source = subprocess.run(["git", "show", f"{OLD_COMMIT}:envbuild/slurm/check/shellwords.py"], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout
    module = types.ModuleType("old_shellwords")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(source, f"{OLD_COMMIT}:shellwords.py", "exec"), module.__dict__)
    return module


def read_tree_sitter(text: str) -> list[list[str]]:
    sys.path.insert(0, str(REPO))
    from envbuild.slurm.check.shellwords import read_commands

    return [list(command.texts) for command in read_commands(text)[0]]


def read_old(text: str) -> list[list[str]]:
    return [list(command.texts) for command in old_reader().read_commands(text)[0]]


def read_bashlex(text: str) -> list[list[str]]:
    import bashlex

    found: list[list[str]] = []

    class Commands(bashlex.ast.nodevisitor):  # type: ignore[misc]
        def visitcommand(self, node: object, parts: list[object]) -> None:
            words = [part.word for part in parts if part.kind in ("word", "assignment")]  # type: ignore[attr-defined]
            if words:
                found.append(words)

        def visitcommandsubstitution(self, node: object, command: object) -> bool:
            return False  # its commands are not the script's own

        def visitprocesssubstitution(self, node: object, command: object) -> bool:
            return False

    for tree in bashlex.parse(text):
        Commands().visit(tree)
    return found


READERS = {"tree-sitter-bash": read_tree_sitter, "bashlex": read_bashlex, "regex tokenizer (old)": read_old}


def measure_one(reader: str, path: str) -> dict[str, float | str]:
    """In this (fresh) process: import, then read the file once; seconds and peak RSS in MiB over the import."""
    import resource

    text = Path(path).read_text()
    function = READERS[reader]
    function("true\n")  # imports and one-time set-up out of the timing
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    try:
        commands = len(function(text))
        outcome = f"{commands} commands"
    except RecursionError:
        outcome = "RecursionError"
    except Exception as exc:  # noqa: BLE001 -- whatever a reader raises is its outcome in the table
        outcome = f"{type(exc).__name__}"
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"seconds": seconds, "rss_mib": (peak - before) / 1024, "outcome": outcome}


def in_fresh_process(reader: str, path: str, timeout: float) -> dict[str, float | str]:
    try:
        done = subprocess.run([sys.executable, __file__, "--measure", reader, path], capture_output=True, text=True,
                              timeout=timeout, cwd=REPO)
    except subprocess.TimeoutExpired:
        return {"seconds": timeout, "rss_mib": 0.0, "outcome": f"over {timeout:.0f} s, stopped"}
    if done.returncode != 0:
        return {"seconds": 0.0, "rss_mib": 0.0, "outcome": f"exit {done.returncode}: {done.stderr.strip()[-80:]}"}
    return dict(json.loads(done.stdout.splitlines()[-1]))


def check_end_to_end(path: str) -> float:
    started = time.perf_counter()
    subprocess.run([str(REPO / "bin" / "envrun"), "sbatch", "--check", path, "--system", "local"],
                   capture_output=True, cwd=REPO, timeout=120)
    return time.perf_counter() - started


def _raises(function: object, body: str) -> bool:
    try:
        function(body)  # type: ignore[operator]
    except Exception:  # noqa: BLE001 -- any failure of a reader counts
        return True
    return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=float, default=1.0)
    parser.add_argument("--quick", action="store_true", help="a 64 KiB script (the tests' run)")
    parser.add_argument("--measure", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure_one(*args.measure)))
        return
    size = 64 * 1024 if args.quick else int(args.size_mib * 1024 * 1024)

    print("(a) the constructs of issue 38: the simple commands each reader gives (ok: as bash runs them)")
    print(f"{'construct':<22}" + "".join(f"{name:<26}" for name in READERS))
    right = dict.fromkeys(READERS, 0)
    for construct, (body, expected) in CASES.items():
        row = f"{construct:<22}"
        for name, function in READERS.items():
            try:
                got = function(body)
                verdict = "ok" if got == expected else f"wrong: {got[0] if got else []}"[:24]
                right[name] += got == expected
            except Exception as exc:  # noqa: BLE001 -- whatever a reader raises is its verdict
                verdict = f"raises {type(exc).__name__}"
            row += f"{verdict:<26}"
        print(row)
    print(f"{'right':<22}" + "".join(f"{f'{right[name]} of {len(CASES)}':<26}" for name in READERS))

    # the same size again from only the constructs bashlex reads, so that every reader has a time
    readable = "".join(body for construct, (body, _) in CASES.items() if not any(
        _raises(function, body) for function in READERS.values())) + "srun -n 2 python train.py --lr 3\nX=1\n"
    with tempfile.TemporaryDirectory() as directory:
        for label, block in (("all the constructs", BLOCK), ("the constructs every reader reads", readable)):
            path = Path(directory) / "long.sh"
            body = block * (size // len(block) + 1)
            path.write_text("#!/bin/bash\n#SBATCH --nodes=1\n" + body[:body.rfind("\n", 0, size) + 1])
            actual = path.stat().st_size
            print(f"\n(b) a script of {actual / 1024 / 1024:.2f} MiB: {label}, {actual // len(block)} times")
            print(f"{'reader':<26}{'seconds':>10}{'peak RSS MiB':>15}  outcome")
            for name in READERS:
                measured = in_fresh_process(name, str(path), timeout=120)
                print(f"{name:<26}{measured['seconds']:>10.3f}{measured['rss_mib']:>15.1f}  {measured['outcome']}")
            seconds = min(check_end_to_end(str(path)) for _ in range(3))
            print(f"`envrun sbatch --check` of it, end to end (best of 3): {seconds:.3f} s")


if __name__ == "__main__":
    main()
