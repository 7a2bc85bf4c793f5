"""Read the inventories of many images at once, one worker process per core: what `envbuild packages` does
for the images its index does not know. Each image is read as envbuild.inventory.image reads one (its
directory tables and the metadata files of its environments); the work is decompression and parsing, so
processes, not threads, spread it over the cores.

The workers are forked (no interpreter to start, nothing to import again) and send back plain data
(marshal, as the index stores it): per image its inventory as inventorycache.inventory_to_dict makes it, with
"arch", or the ImageFormatError that says why it could not be read. An image a worker could not answer for
(any other exception, a worker that died) is read again in this process, so it fails exactly as it would
have alone.

A worker sends its answers first and only then writes them to the index, while this process shows them:
the listing is on the screen before the index is written. This process still waits for its workers before it
exits (wait_for_index_writes, also at exit), so a command that ended has written its index."""

from __future__ import annotations

import marshal
import os
import sys

from envbuild.inventory.image import image_arch, read_inventory
from envbuild.inventory.inventorycache import InventoryCache, inventory_to_dict
from envbuild.shared.errors import ImageFormatError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_READ_SIZE = 1 << 16


_writing: list[int] = []  # workers that sent their answers and may still be writing the index


def read_listing(path: str, cache: InventoryCache) -> dict[str, Any] | ImageFormatError:
    """The inventory of the image at `path` as plain data with its architecture under "arch", remembered in
    `cache`; or the ImageFormatError that says why it could not be read."""
    entry = cache.entry_name(path)
    answer = _read(path)
    if entry is not None and not isinstance(answer, ImageFormatError):
        cache.store_listings([(entry, answer)])
    return answer


def _read(path: str) -> dict[str, Any] | ImageFormatError:
    try:
        data = inventory_to_dict(read_inventory(path))
    except ImageFormatError as exc:
        return exc
    data["arch"] = image_arch(path)
    return data


def read_listings(paths: list[str], cache: InventoryCache) -> dict[str, dict[str, Any] | ImageFormatError]:
    """read_listing of each of `paths`, spread over this machine's cores (in this process where forking
    would not help, or is not safe: one image or core, or other threads running here)."""
    workers = min(len(paths), _cores())
    answers: dict[str, dict[str, Any] | ImageFormatError] = {}
    if workers > 1 and _may_fork():
        answers = _read_in_workers(paths, cache, workers)
    for path in paths:
        if path not in answers:
            answers[path] = read_listing(path, cache)
    return answers


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _may_fork() -> bool:
    """fork copies only the calling thread: with other threads running (a thread pool, a test runner's watchdog)
    a lock one of them held would stay held in the worker."""
    if not hasattr(os, "fork"):
        return False
    threading = sys.modules.get("threading")
    return threading is None or threading.active_count() == 1


def _read_in_workers(paths: list[str], cache: InventoryCache, workers: int) -> dict[str, dict[str, Any] | ImageFormatError]:
    """Fork `workers` processes, each reading every workers-th image; collect what they send back."""
    children: list[tuple[int, int]] = []  # (pid, read end)
    for index in range(workers):
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the worker: never returns into the caller's code
            os.close(read_end)
            _work(paths[index::workers], cache, write_end)
        os.close(write_end)
        children.append((pid, read_end))
    sent = _collect([fd for _, fd in children])  # each pipe to its end: a worker closes it before its index writes
    if not _writing:  # none left to wait for: wait_for_index_writes is registered at most once
        import atexit

        atexit.unregister(wait_for_index_writes)
        atexit.register(wait_for_index_writes)
    _writing.extend(pid for pid, _ in children)
    answers: dict[str, dict[str, Any] | ImageFormatError] = {}
    for data in sent:
        try:
            for path, kind, value in marshal.loads(data):  # noqa: S302 - written by our own child just now
                if kind == "read":
                    answers[path] = value
                elif kind == "error":
                    error = ImageFormatError(path, "")
                    error.args, error.message, error.hint, error.reason = (value[0],), value[0], value[1], value[2]
                    answers[path] = error
        except (ValueError, EOFError, TypeError):
            continue  # a worker that died mid-way: its images are read here
    return answers


def wait_for_index_writes() -> None:
    """Wait for the workers of read_listings to finish writing the index (at exit at the latest)."""
    while _writing:
        pid = _writing.pop()
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
        except KeyboardInterrupt:  # Ctrl-C after the listing: the workers, interrupted too, remove what they began
            _writing.clear()


def _work(paths: list[str], cache: InventoryCache, write_end: int) -> None:
    status = 1
    try:
        answers: list[tuple[str, str, Any]] = []
        to_store: list[tuple[tuple[str, str], dict[str, Any]]] = []
        for path in paths:
            try:
                entry = cache.entry_name(path)
                answer = _read(path)
            except Exception:  # noqa: BLE001, S112 - the parent reads it again, and fails as it would alone
                continue
            if isinstance(answer, ImageFormatError):
                answers.append((path, "error", (answer.message, answer.hint, answer.reason)))
            else:
                answers.append((path, "read", answer))
                if entry is not None:
                    to_store.append((entry, answer))
        view = memoryview(marshal.dumps(answers))
        while view:
            view = view[os.write(write_end, view):]
        os.close(write_end)  # the parent has its answers: it shows them while this worker writes the index
        status = 0
        cache.store_listings(to_store)
    finally:
        os._exit(status)


def _collect(fds: list[int]) -> list[bytes]:
    """Everything written to each pipe, read as it comes (a worker blocked on a full pipe would wait for the
    others otherwise)."""
    import select

    chunks: dict[int, list[bytes]] = {fd: [] for fd in fds}
    open_fds = list(fds)
    while open_fds:
        ready, _, _ = select.select(open_fds, [], [])
        for fd in ready:
            chunk = os.read(fd, _READ_SIZE)
            if chunk:
                chunks[fd].append(chunk)
            else:
                os.close(fd)
                open_fds.remove(fd)
    return [b"".join(chunks[fd]) for fd in fds]
