"""`--via-runtime`: list an image by starting it once, for images whose file system cannot be read
from the file (encrypted), and to check the direct reader against the runtime's view.

One `apptainer exec` per image runs a POSIX sh script that prints the paths the inventory looks for
and the header of each distribution's metadata; the same walk (pyenvs.py) then runs on that listing,
so both paths give the same rows. The script evaluates $WITH_CONDA first, as users' loops do."""

from __future__ import annotations

import os
import selectors
import subprocess
import time

from envbuild.host.runtime import require_runtime
from envbuild.inventory.pyenvs import Inventory, take_inventory
from envbuild.inventory.trees import ListedTree
from envbuild.shared.errors import ImageFormatError
from envbuild.shared.terminaltext import printable

_NO_FIND = 97
# The listing of a large conda image is a few MiB (10 MiB at 2,000 packages); more is refused, not read into memory.
MAX_LISTING_BYTES = 64 << 20
_STDERR_KEPT = 64 << 10

# Output lines: "D path" directory, "F path" file, "L path" symlink, "C path" then "|line"... the
# header of that metadata file (or the whole conda record, for one not named <name>-<version>-<build>.json,
# whose name cannot be parsed). Paths with a newline in them are not supported.
LISTING_SCRIPT = r"""
PATH="${PATH:+$PATH:}/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
if [ -n "${WITH_CONDA:-}" ]; then eval "$WITH_CONDA" >/dev/null 2>&1 || true; fi
command -v find >/dev/null 2>&1 || exit 97
find / \( -path /proc -o -path /sys -o -path /dev -o -path /run -o -path /tmp -o -name __pycache__ \) -prune -o \
  \( -name pyvenv.cfg -o -name conda-meta -o -name site-packages -o -name dist-packages -o -name lib -o -name lib64 \
     -o -name bin -o -name 'python[0-9]*' -o -name '*.dist-info' -o -name '*.egg-info' -o -path '*/conda-meta/*.json' \) \
  -print 2>/dev/null |
while IFS= read -r p; do
  if [ -L "$p" ]; then echo "L $p"; elif [ -d "$p" ]; then echo "D $p"; else echo "F $p"; fi
  case "$p" in
    *.dist-info) f="$p/METADATA" ;;
    *.egg-info) if [ -d "$p" ] && [ ! -L "$p" ]; then f="$p/PKG-INFO"; else f="$p"; fi ;;
    */conda-meta/*-*-*.json) continue ;;
    */conda-meta/*.json) echo "C $p"; sed -e 's/^/|/' "$p"; echo; continue ;;
    *) continue ;;
  esac
  [ -f "$f" ] || continue
  echo "C $f"
  sed -n -e '/^$/q' -e 's/^/|/p' "$f"
  echo  # in case the file does not end in a newline
done
"""


def runtime_command(runtime: str, image: str) -> list[str]:
    """The container start: no home, no host bind paths, empty /tmp, so only the image is seen."""
    return [runtime, "exec", "--contain", "--no-home", "--no-mount", "bind-paths", image, "/bin/sh", "-c", LISTING_SCRIPT]


def parse_listing(output: str) -> ListedTree:
    """Turn the script's output into a tree the walk can read."""
    tree = ListedTree()
    kinds = {"D": "dir", "F": "file", "L": "symlink"}
    content_path: str | None = None
    content: list[str] = []

    def flush() -> None:
        if content_path is not None:
            tree.add(content_path, "file", ("\n".join(content) + "\n\n").encode("utf-8", "surrogateescape"))

    for line in output.split("\n"):
        tag, _, rest = line.partition(" ")
        if line.startswith("|"):
            content.append(line[1:])
            continue
        if tag == "C":
            flush()
            content_path, content = rest, []
            continue
        if tag in kinds and rest.startswith("/"):
            tree.add(rest, kinds[tag])
    flush()
    return tree


class _ListingTooLong(Exception):
    pass


def _run_bounded(command: list[str], timeout: float) -> tuple[int, bytes, bytes]:
    """(exit code, stdout, the end of stderr) of `command`, killed past `timeout` seconds
    (subprocess.TimeoutExpired) or MAX_LISTING_BYTES of output (_ListingTooLong)."""
    deadline = time.monotonic() + timeout
    proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stdout, stderr = proc.stdout, proc.stderr
    assert stdout is not None and stderr is not None  # both are PIPE
    out, err = bytearray(), bytearray()
    with selectors.DefaultSelector() as selector:
        selector.register(stdout, selectors.EVENT_READ, out)
        selector.register(stderr, selectors.EVENT_READ, err)
        try:
            while selector.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise subprocess.TimeoutExpired(command, timeout)
                for key, _ in selector.select(left):
                    chunk = os.read(key.fd, 1 << 20)
                    if not chunk:
                        selector.unregister(key.fileobj)
                        continue
                    key.data.extend(chunk)
                    if len(out) > MAX_LISTING_BYTES:
                        raise _ListingTooLong
                    del err[:-_STDERR_KEPT]
            return proc.wait(max(deadline - time.monotonic(), 1)), bytes(out), bytes(err)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            stdout.close()
            stderr.close()


def read_inventory_via_runtime(image: str, runtime: str | None = None, timeout: int = 600) -> Inventory:
    """Start `image` once with `runtime` (apptainer or singularity; found on PATH when None) and list it."""
    runtime = runtime or require_runtime().path
    name = os.path.basename(runtime)
    try:
        returncode, stdout, stderr_bytes = _run_bounded(runtime_command(runtime, image), timeout)
    except subprocess.TimeoutExpired:
        raise ImageFormatError(image, f"{name} exec did not finish in {timeout} s", "check that the image starts") from None
    except _ListingTooLong:
        raise ImageFormatError(image, f"the listing printed inside the container passed {MAX_LISTING_BYTES >> 20} MiB "
                                      "(an image with millions of matching paths, or metadata files without end)",
                               "list it without --via-runtime (reads the file directly)") from None
    stderr = stderr_bytes.decode("utf-8", "replace").strip()
    if returncode == _NO_FIND:
        raise ImageFormatError(image, "the image has no `find` command, which --via-runtime needs",
                               "list it without --via-runtime (reads the file directly)")
    if returncode != 0:
        last = stderr.splitlines()[-1] if stderr else f"exit code {returncode}"
        raise ImageFormatError(image, f"{name} exec failed: {printable(last)}", f"check that `{name} exec IMAGE true` works")
    return take_inventory(parse_listing(stdout.decode("utf-8", "surrogateescape")))
