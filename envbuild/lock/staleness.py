"""Whether a lock still fits its spec: the reasons a lock is stale against the spec's current inputs."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from envbuild.lock.lockmodel import Lock, LockInputs


def stale_reasons(lock: Lock, current: LockInputs) -> list[str]:
    """Why the lock no longer matches the spec, one line per change; empty when it still does."""
    reasons: list[str] = []
    locked = _by_project(lock.inputs.requirements)
    wanted = _by_project(current.requirements)
    for project, texts in wanted.items():
        if project not in locked:
            reasons += [f"requirement added: {text}" for text in texts]
        elif not _same_requirements(locked[project], texts):
            reasons.append(f"requirement changed: {', '.join(locked[project])} -> {', '.join(texts)}")
    for project, texts in locked.items():
        if project not in wanted:
            reasons += [f"requirement removed: {text}" for text in texts]
    if lock.inputs.base != current.base:
        reasons.append(f"base changed: {lock.inputs.base} -> {current.base}")
    if lock.inputs.system != current.system:
        reasons.append(f"system changed: {lock.inputs.system} -> {current.system}")
    if lock.inputs.torch_index != current.torch_index:
        reasons.append(f"torch index changed: {_index_text(lock.inputs.torch_index)} -> {_index_text(current.torch_index)}")
    if lock.inputs.interpreter != current.interpreter:
        reasons.append(f"interpreter changed: {lock.inputs.interpreter} -> {current.interpreter}")
    if lock.inputs.python_target != current.python_target:
        reasons.append(f"python.target changed: {lock.inputs.python_target} -> {current.python_target}")
    return reasons


def _by_project(requirements: Iterable[str]) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for text in requirements:
        project: str
        try:
            project = canonicalize_name(Requirement(text).name)
        except InvalidRequirement:
            project = text  # the spec validates requirements; an odd one still compares as text
        groups.setdefault(project, []).append(text)
    return groups


def _same_requirements(old: list[str], new: list[str]) -> bool:
    # Compared as parsed requirements: `Rich >= 13` and `rich>=13` ask uv for the same thing.
    def parsed(text: str) -> Requirement | str:
        try:
            return Requirement(text)
        except InvalidRequirement:
            return text

    return Counter(map(parsed, old)) == Counter(map(parsed, new))


def _index_text(url: str | None) -> str:
    return url if url is not None else "none (host configuration only)"
