"""Plain-text rendering of plans, for --dry-run and golden tests. Credentials in URLs are hidden."""

from __future__ import annotations

import re

from envbuild.buildplan import BuildPlan

_USERINFO = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)[^/@\s]+@", re.I)


def redact(text: str) -> str:
    """`https://user:token@host/...` -> `https://***@host/...`."""
    return _USERINFO.sub(r"\g<scheme>***@", text)


def render_build_plan(plan: BuildPlan) -> str:
    lines = [
        f"# envbuild build plan for {plan.name}",
        f"# output:       {plan.output}",
        f"# work dir:     {plan.work_dir}",
        f"# installer:    {plan.installer}",
        f"# requirements: {' '.join(plan.requirements) or '(none)'}",
        f"# sources:      {' '.join(plan.package_sources) or '(installer defaults)'}",
    ]
    for number, step in enumerate(plan.steps, 1):
        lines.append("")
        lines.append(f"## {number}. {step.name}: {step.title}")
        if step.skip_if_exists:
            lines.append(f"#   skipped when {step.skip_if_exists} exists")
        for action in step.actions:
            lines.append(action.describe())
        for action in step.cleanup:
            lines.append(f"#   on failure: {action.describe()}")
    return redact("\n".join(lines)) + "\n"
