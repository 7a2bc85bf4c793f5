"""What verifying a shared store costs (issue 28): the same build taken from a store only the user can write
(sizes compared, no tree digested) and from a group-writable one (the output's copy hashed, the base digest
recomputed, an env layer's tree digested again before its files are used), side by side, each as a whole
`envbuild build` process, alternating run by run; then `envbuild cache verify` of the whole store. Both stores
are made from the reference image's entries in SOURCE (hard links, nothing copied).

Cases: a no-op (output up to date); the image taken from the store (output deleted); a +1 build (the spec
plus one small package, its lock now stale, as a user edits it: resolved again, the reference env layer taken
as the parent, `--layered` by default: the fastest +1, where a check weighs most). Between +1 runs the +1's
env layer and image are removed and the stale lock put back. Also printed: the tree digest of the reference
env layer alone (what the check of a parent costs), and the +1 env step's own digest action (the record every
env layer now gets, in either store), read from the build logs.

    .venv/bin/python bench/store_verify.py [--source /var/tmp/envbuild-test-cache] [--spec envs/local-cpu-pytorch.yaml]
        [--runs 7] [--plus-one-runs 5] [--plus-one-args=--layered] [--work /var/tmp/envbuild-bench-verify]
        [--envbuild OTHER-CHECKOUT/bin/envbuild] [--quick]

SOURCE must hold the spec's base, env layer and image (build it once: ENVBUILD_CACHE_DIR=SOURCE bin/envbuild
build SPEC), and the packages' indexes must be at hand (the +1 build resolves again).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench")]  # envbuild, and bench/plus_one.py beside this script

from plus_one import EXTRA, entries, forget  # noqa: E402 - bench/plus_one.py, beside this script: the same +1
from quick import QUICK_LAST_PACKAGE, seed_store, write_quick_spec  # noqa: E402 - bench/quick.py, likewise

from envbuild.shared.treedigest import tree_digest, write_file_digests  # noqa: E402
from envbuild.store.integrity import (  # noqa: E402
    env_layer_problem,
    is_private_group,
    others_can_write,
    write_content_record,
)
from envbuild.store.layout import kind_dir  # noqa: E402


def make_store(source: Path, target: Path, *, shared: bool,
               env_digests: dict[str, tuple[str, dict[tuple[int, int, int], str]]]) -> None:
    """The complete base, env and image entries of SOURCE under TARGET, their files hard-linked (same inodes,
    so the same bytes and modes); only the directories of the store, its kinds and entries differ in mode.
    `env_digests`: env layers' tree digests (and per-file digests) by name, filled on first use: an env layer
    SOURCE's envbuild made before env digests were recorded gets what its env step would have written."""
    if target.exists():
        shutil.rmtree(target)
    for kind in ("bases", "envs", "images"):
        for entry in sorted((source / kind).glob("*")):
            if not (entry / "complete").exists():
                continue
            copy = target / kind / entry.name
            copy.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(["cp", "-al", str(entry), str(copy)], check=True)
            for name in ("content.json", "last-used", *(("digest", "file-digests") if kind == "envs" else ())):
                if name:
                    (copy / name).unlink(missing_ok=True)  # not shared with SOURCE: written fresh below
            if kind == "images":
                write_content_record(copy, files=("image.sif",))
            elif kind == "envs":
                if entry.name not in env_digests:
                    found: dict[tuple[int, int, int], str] = {}
                    env_digests[entry.name] = (tree_digest(str(copy / "rootfs"), found=found), found)
                digest, found = env_digests[entry.name]
                (copy / "digest").write_text(digest + "\n")
                write_file_digests(str(copy / "file-digests"), found)  # same inodes: valid for both stores
            else:
                write_content_record(copy, trees={"rootfs": (copy / "digest").read_text().strip()})
    gid = _project_gid() if shared else os.getegid()
    for directory in (target, *target.glob("*"), *target.glob("*/*")):
        os.chown(directory, -1, gid)
        os.chmod(directory, 0o2775 if shared else 0o755)


def _project_gid() -> int:
    """A group besides the user's own private one (which counts as the user's: envbuild.store.integrity)."""
    import grp

    if os.geteuid() == 0:
        return grp.getgrnam("users").gr_gid
    for gid in os.getgroups():
        if not is_private_group(gid):
            return gid
    raise SystemExit("the group-writable store needs a group besides your own: join one, or run as root")


def timed(argv: list[str], store: Path, expect: str, *, refuse: str = "warning") -> float:
    env = {**os.environ, "ENVBUILD_CACHE_DIR": str(store)}
    started = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, cwd="/")
    elapsed = time.perf_counter() - started
    text = proc.stdout + proc.stderr
    if expect not in text or refuse in text:
        raise SystemExit(f"expected {expect!r} and no {refuse!r} from {' '.join(argv)}:\n{text[-3000:]}")
    return elapsed


def plus_one_spec(spec: Path, work: Path, marker: str) -> tuple[Path, str]:
    """SPEC plus one package (after the line MARKER) in WORK, beside the lock SPEC ships (stale for it);
    (the spec, that lock's text)."""
    text = spec.read_text()
    if marker not in text:
        raise SystemExit(f"{spec} changed: cannot find {marker!r} to add a package after")
    plus = work / spec.name
    plus.write_text(text.replace(marker, f"{marker}\n    - {EXTRA}", 1))
    lock = spec.with_suffix(".lock").read_text()
    plus.with_suffix(".lock").write_text(lock)
    return plus, lock


def env_record_seconds(log: Path) -> float | None:
    """The env step's digest action (`record the sha256 of .../envs/.../rootfs`) in a build log: its time;
    None when there is none (an envbuild from before env layers were recorded)."""
    lines = log.read_text().splitlines()
    for number, line in enumerate(lines[:-1]):
        if line.startswith("$ record the sha256 of ") and "/envs/" in line:
            return float(lines[number + 1].strip().strip("()").split()[0])
    return None


def quick_source(work: Path, envbuild: str) -> Path:
    """A SOURCE store for --quick: the test store's base, and the quick spec (WORK/bench-quick.yaml, named so that
    its env layer's name starts with the spec's stem) locked and built."""
    source = work / "quick-source"
    shutil.rmtree(source, ignore_errors=True)
    seed_store(source)
    spec = write_quick_spec(work, "bench-quick.yaml")
    env = {**os.environ, "ENVBUILD_CACHE_DIR": str(source)}
    for argv in (["lock", str(spec)], ["build", str(spec), "-o", str(work / "quick-source.sif")]):
        subprocess.run([envbuild, *argv], env=env, check=True, capture_output=True)
    return source


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=Path("/var/tmp/envbuild-test-cache"))
    parser.add_argument("--spec", type=Path, default=REPO / "envs/local-cpu-pytorch.yaml")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--plus-one-runs", type=int, default=5, help="0: no +1 builds")
    parser.add_argument("--plus-one-args", default="--layered", help="options of the +1 builds ('--full' for a full one)")
    parser.add_argument("--work", type=Path, default=Path("/var/tmp/envbuild-bench-verify"))
    parser.add_argument("--envbuild", default=str(REPO / "bin/envbuild"),
                        help="the envbuild timed (another checkout's bin/envbuild: the same runs with that code)")
    parser.add_argument("--quick", action="store_true", help="tiny input (bench/quick.py: SOURCE is a store made in "
                        "--work from the test store's base and one small package): shows the script runs to its end, "
                        "not the reference figures")
    args = parser.parse_args()
    envbuild = args.envbuild
    marker = "    - accelerate"
    if args.quick:
        args.source, args.spec, marker = quick_source(args.work, envbuild), args.work / "bench-quick.yaml", QUICK_LAST_PACKAGE
    stores = {"private": args.work / "private", "group-writable": args.work / "shared"}
    env_digests: dict[str, tuple[str, dict[tuple[int, int, int], str]]] = {}
    for name, store in stores.items():
        make_store(args.source, store, shared=name != "private", env_digests=env_digests)
        entry = next(kind_dir(store, "image").iterdir())
        if (others_can_write(store, entry, ("image.sif",)) is None) != (name == "private"):
            raise SystemExit(f"the {name} store {store} is not seen as {name} by envbuild.store.integrity")
    outputs = {name: args.work / f"out-{name}" / "ref.sif" for name in stores}
    for output in outputs.values():
        output.parent.mkdir(parents=True, exist_ok=True)
    reference_env = next(e for e in kind_dir(stores["group-writable"], "env").iterdir() if e.name.startswith(f"{args.spec.stem}-"))
    digest_times = []
    for _ in range(3):
        started = time.perf_counter()
        problem, _found = env_layer_problem(reference_env)
        digest_times.append(time.perf_counter() - started)
        if problem:
            raise SystemExit(f"{reference_env}: {problem}")

    def build(name: str, *, reuse: bool) -> float:
        output = outputs[name]
        if reuse:
            output.unlink(missing_ok=True)
        return timed([envbuild, "build", str(args.spec.absolute()), "-o", str(output)], stores[name],
                     "taken from the store" if reuse else "up to date")

    times: dict[tuple[str, str], list[float]] = {}
    for name in stores:  # warm the page cache and the byte code once
        build(name, reuse=True)
        build(name, reuse=False)
    for _ in range(args.runs):
        for case in ("no-op (output up to date)", "reuse (image taken from the store)"):
            for name in stores:
                times.setdefault((case, name), []).append(build(name, reuse=case.startswith("reuse")))
        times.setdefault(("cache verify (whole store)", "group-writable"), []).append(
            timed([envbuild, "cache", "verify"], stores["group-writable"], "0 mismatch"))

    loads = [os.getloadavg()[0]]
    record_times: list[float] = []
    plus_case = f"+1 {args.plus_one_args or 'full'} (parent env layer from the store)"
    if args.plus_one_runs:
        plus_dir = args.work / "plus-one"
        plus_dir.mkdir(parents=True, exist_ok=True)
        plus, stale_lock = plus_one_spec(args.spec, plus_dir, marker)
        keep = {name: entries(store) for name, store in stores.items()}

        def plus_one(name: str) -> float:
            forget(stores[name], keep[name])
            plus.with_suffix(".lock").write_text(stale_lock)
            output = args.work / f"out-{name}" / "plus.sif"
            output.unlink(missing_ok=True)
            seconds = timed([envbuild, "build", str(plus), "-o", str(output), *args.plus_one_args.split()], stores[name],
                            "reusing env layer")
            recorded = env_record_seconds(output.with_name(output.name + ".build.log"))
            if recorded is not None:
                record_times.append(recorded)
            return seconds

        for name in stores:  # the uv cache and the index pages, once
            plus_one(name)
        record_times.clear()
        for _ in range(args.plus_one_runs):
            for name in stores:
                times.setdefault((plus_case, name), []).append(plus_one(name))
            loads.append(os.getloadavg()[0])
        for name, store in stores.items():
            forget(store, keep[name])

    image = next(kind_dir(stores["private"], "image").glob("*/image.sif"))
    print(f"reference image {args.spec.name}: {image.stat().st_size / 2**20:.0f} MiB; medians of {args.runs} runs "
          f"({args.plus_one_runs} for the +1)")
    print(f"{'':<52}{'private (s)':>13}{'group-writable (s)':>20}{'ratio':>8}")
    cases = ["no-op (output up to date)", "reuse (image taken from the store)"] + ([plus_case] if args.plus_one_runs else [])
    for case in cases:
        private, shared = (statistics.median(times[(case, n)]) for n in stores)
        print(f"{case:<52}{private:>13.3f}{shared:>20.3f}{shared / private:>7.2f}x (+{shared - private:.2f} s)")
    print(f"tree digest of the reference env layer {reference_env.name} (warm): "
          + ", ".join(f"{t:.2f}" for t in digest_times) + " s")
    if record_times:
        print(f"the +1 env step's digest action (both stores): median {statistics.median(record_times):.2f} s, "
              f"range {min(record_times):.2f}-{max(record_times):.2f} s")
    print(f"load average (1 min) during the +1 runs: {' '.join(f'{x:.2f}' for x in loads)}")
    verify = statistics.median(times[("cache verify (whole store)", "group-writable")])
    reuse = statistics.median(times[("reuse (image taken from the store)", "private")])
    print(f"{'cache verify (whole store)':<52}{'':>13}{verify:>20.3f}{verify / reuse:>7.2f}x of a private reuse")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(json.dumps({f"{case} / {name}": round(statistics.median(v), 3) for (case, name), v in times.items()}))


if __name__ == "__main__":
    main()
