"""The kept plan in the form a program without Python reads: envbuild/launch/repeatlaunch.c (built by
provision/python-env.sh as .venv/libexec/envrun-repeat, which a checkout's bin/envrun runs first) execs it
on a repeat launch without Python's ~11 ms start.

Written beside the marshal plan (PlanRecorder.store in envbuild.launch.planrecord), from the same facts and the same plan,
in the user's own cache (envbuild.host.usercache's rules: 0600, renamed into place) as `repeat-XX.plan`,
XX the key's crc32 modulo PLAN_SLOTS. The file is netstrings (`LEN:BYTES,`), one after another:

    MAGIC, KEY, N, then N facts (KIND, the question's words, ANSWER), then COUNT and the argv's words,
    COUNT and the names unset, COUNT and NAME, VALUE for each variable set, COUNT and the warnings.

KEY is REPEAT_FORMAT, the launcher's canonical path (the checkout's bin/envrun: sys.argv[0]), the user,
the working directory and the arguments, NUL between them. Each ANSWER is the recorded one rendered as the
C program renders what it observes (`render_answer`): a stat "s" and its numbers, an errno "e" and the
number, a listing "l" and the names in byte order with NUL between, a variable "=" and its value or "-".
Paths, names and values are os.fsencode'd: the bytes Python was given. A plan with a fact of a kind the C
program cannot ask (a pwd or grp lookup, a descriptor's realpath) gets no such file: its repeat launches
start Python and are served by envbuild.launch.plancache.

The key leaves out what the marshal plan's key has of Python (its version, sys.executable): both plans have
the stat of sys.executable and of the launcher script among their facts (launcher_facts), so a replaced
interpreter or an edited bin/envrun is a miss of both, and the plan made again is written to both.
"""

from __future__ import annotations

import os
import sys

from envbuild.launch.plancache import PLAN_SLOTS, signature

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

# Bump with MAGIC in repeatlaunch.c when the file's form or a fact's rendering changes.
REPEAT_FORMAT = 1
MAGIC = b"envrun-repeat-plan %d" % REPEAT_FORMAT
# The fact kinds repeatlaunch.c asks (plancache.observe knows these and more).
REPEAT_KINDS = frozenset({"env", "stat", "lstat", "access", "listdir", "readlink", "content", "names", "affinity",
                          "cpu_count", "uname"})


def repeat_key(argv: Sequence[str], cwd: str, launcher: str) -> bytes:
    """What a repeat plan is for, as repeatlaunch.c computes it: this command line in this directory, by this
    user, through this launcher (its canonical path)."""
    words = [str(REPEAT_FORMAT), os.path.realpath(launcher), str(os.geteuid()), cwd, *argv]
    return b"\0".join(os.fsencode(word) for word in words)


def repeat_slot_name(key: bytes) -> str:
    import zlib

    return f"repeat-{zlib.crc32(key) % PLAN_SLOTS:02x}.plan"


def netstring(item: bytes) -> bytes:
    return b"%d:%s," % (len(item), item)


def render_answer(kind: str, answer: Any) -> bytes:
    """A recorded answer as repeatlaunch.c renders what it observes; ValueError for one it cannot."""
    if kind == "env":
        return b"-" if answer is None else b"=" + os.fsencode(answer)
    if type(answer) is int and kind in ("stat", "lstat", "listdir", "readlink", "content"):
        return b"e%d" % answer
    if kind in ("stat", "lstat"):
        return b"s" + b" ".join(b"%d" % number for number in answer)
    if kind == "access":
        return b"1" if answer else b"0"
    if kind == "listdir" or kind == "names":
        names = b"\0".join(sorted(os.fsencode(name) for name in answer))
        return names if kind == "names" else b"l" + names
    if kind == "readlink":
        return b"l" + os.fsencode(answer)
    if kind == "content":
        crc, length = answer
        return b"c%d %d" % (crc, length)
    if kind == "affinity":
        return b",".join(b"%d" % cpu for cpu in answer)
    if kind == "cpu_count":
        return b"none" if answer is None else b"%d" % answer
    if kind == "uname":
        return b"\0".join(os.fsencode(field) for field in answer)
    raise ValueError(kind)


def _question_words(fact: Sequence[Any]) -> list[bytes]:
    kind = fact[0]
    if kind in ("names", "affinity", "cpu_count", "uname"):
        if len(fact) != 2:
            raise ValueError(kind)
        return []
    if kind == "access":
        if len(fact) != 4 or type(fact[2]) is not int:
            raise ValueError(kind)
        return [os.fsencode(fact[1]), b"%d" % fact[2]]
    if len(fact) != 3 or type(fact[1]) is not str:
        raise ValueError(kind)
    return [os.fsencode(fact[1])]


def repeat_plan_bytes(key: bytes, facts: Sequence[Sequence[Any]], argv: Sequence[str],
                      env: Sequence[Sequence[str]], unset: Sequence[str], warnings: Sequence[str]) -> bytes:
    """The file's bytes; ValueError where a fact or the plan cannot be put in it (then none is written)."""
    parts = [netstring(MAGIC), netstring(key), netstring(b"%d" % len(facts))]
    for fact in facts:
        kind = fact[0]
        if kind not in REPEAT_KINDS:
            raise ValueError(kind)
        parts.append(netstring(kind.encode()))
        parts.extend(netstring(word) for word in _question_words(fact))
        parts.append(netstring(render_answer(kind, fact[-1])))
    settings: dict[str, str] = {}
    for name, value in env:  # a name set twice: its last value, as dict.update gives the exec'd environment
        settings[name] = value
    sections: list[list[bytes]] = [
        [os.fsencode(word) for word in argv],
        [os.fsencode(name) for name in unset],
        [os.fsencode(word) for pair in settings.items() for word in pair],
        [warning.encode("utf-8", "backslashreplace") for warning in warnings],  # as sys.stderr writes them
    ]
    for position, words in enumerate(sections):
        if any(b"\0" in word for word in words):
            raise ValueError("a NUL byte")
        parts.append(netstring(b"%d" % (len(words) // 2 if position == 2 else len(words))))
        parts.extend(netstring(word) for word in words)
    return b"".join(parts)


def launcher_facts() -> list[tuple[Any, ...]]:
    """What the marshal plan's key holds of this process and the repeat key does not: the interpreter the
    launcher falls back to and the launcher script itself (its Python program)."""
    facts: list[tuple[Any, ...]] = []
    for path in (sys.executable, sys.argv[0]):
        try:
            facts.append(("stat", path, signature(os.stat(path))))
        except OSError as exc:
            facts.append(("stat", path, exc.errno))
    facts.append(("access", sys.executable, os.X_OK, os.access(sys.executable, os.X_OK)))
    return facts


def write_repeat_plan(argv: Sequence[str], cwd: str, facts: Sequence[Sequence[Any]], plan_argv: Sequence[str],
                      env: Sequence[Sequence[str]], unset: Sequence[str], warnings: Sequence[str]) -> None:
    """Keep the plan for repeatlaunch.c too, when every fact is one it can ask and the launcher is a file.
    `facts` are the marshal plan's, launcher_facts() among them."""
    if not sys.argv or not os.path.isabs(sys.argv[0]) or not sys.executable:
        return
    key = repeat_key(argv, cwd, sys.argv[0])
    try:
        data = repeat_plan_bytes(key, facts, plan_argv, env, unset, warnings)
    except (ValueError, TypeError, UnicodeError):
        return
    from envbuild.host.usercache import write_cached_bytes

    write_cached_bytes(repeat_slot_name(key), data)
