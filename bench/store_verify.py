"""What verifying a shared store costs (issue 28): the same build taken from a store only the user can write
(sizes compared) and from a group-writable one (the output's copy hashed, the base digest recomputed), side by
side, each as a whole `envbuild build` process, alternating run by run; then `envbuild cache verify` of the
whole store. Both stores are made from the reference image's entries in SOURCE (hard links, nothing copied).

    .venv/bin/python bench/store_verify.py [--source /var/tmp/envbuild-test-cache] [--spec envs/local-cpu-pytorch.yaml]
        [--runs 7] [--work /var/tmp/envbuild-bench-verify]

SOURCE must hold the spec's base and image (build it once: ENVBUILD_CACHE_DIR=SOURCE bin/envbuild build SPEC).
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
sys.path.insert(0, str(REPO))

from envbuild.store.integrity import is_private_group, others_can_write, write_content_record  # noqa: E402


def make_store(source: Path, target: Path, *, shared: bool) -> None:
    """The complete base and image entries of SOURCE under TARGET, their files hard-linked (same inodes, so
    the same bytes and modes); only the directories of the store, its kinds and entries differ in mode."""
    if target.exists():
        shutil.rmtree(target)
    for kind in ("bases", "images"):
        for entry in sorted((source / kind).glob("*")):
            if not (entry / "complete").exists():
                continue
            copy = target / kind / entry.name
            copy.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(["cp", "-al", str(entry), str(copy)], check=True)
            for name in ("content.json", "last-used"):
                (copy / name).unlink(missing_ok=True)  # not shared with SOURCE: written fresh below
            if kind == "images":
                write_content_record(copy, files=("image.sif",))
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


def timed(argv: list[str], store: Path, expect: str) -> float:
    env = {**os.environ, "ENVBUILD_CACHE_DIR": str(store)}
    started = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, cwd="/")
    elapsed = time.perf_counter() - started
    if expect not in proc.stdout + proc.stderr:
        raise SystemExit(f"expected {expect!r} from {' '.join(argv)}:\n{(proc.stdout + proc.stderr)[-3000:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=Path("/var/tmp/envbuild-test-cache"))
    parser.add_argument("--spec", type=Path, default=REPO / "envs/local-cpu-pytorch.yaml")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--work", type=Path, default=Path("/var/tmp/envbuild-bench-verify"))
    args = parser.parse_args()
    envbuild = str(REPO / "bin/envbuild")
    stores = {"private": args.work / "private", "group-writable": args.work / "shared"}
    for name, store in stores.items():
        make_store(args.source, store, shared=name != "private")
        entry = next((store / "images").iterdir())
        if (others_can_write(store, entry, ("image.sif",)) is None) != (name == "private"):
            raise SystemExit(f"the {name} store {store} is not seen as {name} by envbuild.store.integrity")
    outputs = {name: args.work / f"out-{name}" / "ref.sif" for name in stores}
    for output in outputs.values():
        output.parent.mkdir(parents=True, exist_ok=True)

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

    image = next((stores["private"] / "images").glob("*/image.sif"))
    print(f"reference image {args.spec.name}: {image.stat().st_size / 2**20:.0f} MiB; medians of {args.runs} runs")
    print(f"{'':<38}{'private (s)':>13}{'group-writable (s)':>20}{'ratio':>8}")
    for case in ("no-op (output up to date)", "reuse (image taken from the store)"):
        private, shared = (statistics.median(times[(case, n)]) for n in stores)
        print(f"{case:<38}{private:>13.3f}{shared:>20.3f}{shared / private:>7.2f}x")
    verify = statistics.median(times[("cache verify (whole store)", "group-writable")])
    reuse = statistics.median(times[("reuse (image taken from the store)", "private")])
    print(f"{'cache verify (whole store)':<38}{'':>13}{verify:>20.3f}{verify / reuse:>7.2f}x of a private reuse")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(json.dumps({f"{case} / {name}": round(statistics.median(v), 3) for (case, name), v in times.items()}))


if __name__ == "__main__":
    main()
