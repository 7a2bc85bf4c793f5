"""What `envbuild build` does with the lock file next to the spec, after uv's conventions (`uv sync`):

| situation                               | build                                                   |
|-----------------------------------------|---------------------------------------------------------|
| SPEC.lock matches the spec              | installs exactly it                                     |
| the spec changed since (stale)          | says what changed, resolves again (keeping the other    |
|                                         | pins), rewrites SPEC.lock, installs it                  |
| no SPEC.lock                            | resolves from the spec, as before; says that            |
|                                         | `envbuild lock SPEC` makes one                          |
| --locked                                | installs the lock; refuses a missing or stale one       |
| --frozen                                | installs the lock as it is, unchecked; refuses none     |
| --upgrade                               | resolves every package anew, rewrites SPEC.lock         |

Unlike `uv sync`, a build does not write a missing lock: that would add a second pass over the base and a
resolution before every first build, and a file next to the spec that nobody asked for (a shared,
read-only checkout); the interrupted-build tests, which pause inside the base step, showed the cost.

Pure: the caller reads the files and passes what it found; nothing here touches the filesystem.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from envbuild.shared.errors import UsageError

Action = Literal["use", "use-unchecked", "resolve", "unlocked"]


@dataclass(frozen=True)
class LockFlags:
    locked: bool = False
    frozen: bool = False
    upgrade: bool = False

    def check(self) -> None:
        """Mutually exclusive flags, as uv has them: a usage error naming both."""
        chosen = [f"--{name}" for name in ("locked", "frozen", "upgrade") if getattr(self, name)]
        if len(chosen) > 1:
            raise UsageError(f"{' and '.join(chosen)} exclude each other",
                             "--locked: install the lock, refuse a stale one; --frozen: install the lock unchecked; "
                             "--upgrade: resolve every package anew and rewrite the lock")


@dataclass(frozen=True)
class LockState:
    """What the session found: the lock file's name, whether it exists and reads, why it is stale."""

    path: str
    exists: bool
    readable: bool = True
    stale: tuple[str, ...] = ()  # stale_reasons(); empty when the lock matches the spec
    packages: int = 0
    lockable: bool = True  # the spec has Python packages to pin (a conda spec never has a lock)


@dataclass(frozen=True)
class LockDecision:
    action: Action
    message: str  # one line for the user: what applies and why
    upgrade: bool = False  # resolve ignoring the existing pins


def decide_lock(state: LockState, flags: LockFlags, *, spec_path: str) -> LockDecision:
    flags.check()
    path = state.path
    if flags.locked or flags.frozen:
        flag = "--locked" if flags.locked else "--frozen"
        if not state.exists:
            raise UsageError(f"{flag}: there is no lock file {path} for {spec_path}",
                             f"create it with: envbuild lock {spec_path}")
        if flags.frozen:
            return LockDecision("use-unchecked", f"--frozen: installing {path} as it is, not checked against the spec")
        if state.stale:  # --locked with a stale lock: the caller raises the detailed error (installed_lock)
            return LockDecision("use", f"--locked: {path} is stale")
        return LockDecision("use", f"using {path} ({state.packages} packages)")
    if not state.lockable:
        return LockDecision("unlocked", "the spec installs no Python packages: no lock")
    if flags.upgrade:
        return LockDecision("resolve", f"--upgrade: resolving every package anew, then writing {path}", upgrade=True)
    if not state.exists:
        return LockDecision("unlocked", f"no lock file {path}: resolving from the spec (`envbuild lock {spec_path}` "
                                        f"pins every package with hashes; later builds install exactly it)")
    if not state.readable:
        return LockDecision("resolve", f"{path} is unreadable: resolving from scratch and rewriting it")
    if state.stale:
        changed = "; ".join(state.stale)
        return LockDecision("resolve", f"{path} is stale ({changed}): resolving again, keeping the other pins, "
                                       f"and rewriting it")
    return LockDecision("use", f"using {path} ({state.packages} packages)")
