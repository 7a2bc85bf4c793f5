"""Plain-text rendering of plans, for --dry-run and golden tests. Credentials in URLs are hidden."""

from __future__ import annotations

from envbuild.builder.plan.actions import Step
from envbuild.builder.plan.plandata import BuildPlan
from envbuild.host.secrets import redact

__all__ = ["redact", "render_build_plan", "render_steps"]


def render_build_plan(plan: BuildPlan) -> str:
    lines = [
        f"# envbuild build plan for {plan.name}",
        f"# output:       {plan.output}",
        f"# work dir:     {plan.work_dir}",
        f"# installer:    {plan.installer}",
        f"# requirements: {' '.join(plan.requirements) or '(none)'}",
        f"# sources:      {' '.join(plan.package_sources) or '(installer defaults)'}",
    ]
    env = f"env {plan.layers.env_entry}, " if plan.layers.env_entry else ""
    lines.append(f"# layers:       {env}image {plan.layers.image_entry}")
    if plan.layers.env_parent:
        lines.append(f"# env parent:   {plan.layers.env_parent} (only the difference is installed)")
    return redact("\n".join(lines)) + "\n" + render_steps("build", plan.steps)


def render_steps(phase: str, steps: tuple[Step, ...]) -> str:
    lines = []
    for number, step in enumerate(steps, 1):
        lines.append("")
        lines.append(f"## {phase} {number}. {step.name}: {step.title}")
        if step.lock:
            lines.append(f"#   holds the store lock {step.lock[0]}-{step.lock[1]}")
        if step.skip_if_exists:
            lines.append(f"#   skipped when {step.skip_if_exists} exists")
        for action in step.actions:
            lines.append(action.describe())
        for action in step.cleanup:
            lines.append(f"#   on failure: {action.describe()}")
    return redact("\n".join(lines)) + "\n"
