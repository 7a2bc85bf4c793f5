"""One doctor finding (ok, warn, fail or info, with the reason and the fix), and the report of a run."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from envbuild.shared.errors import EXIT_CLEAN, EXIT_PROBLEMS

LEVELS = ("ok", "info", "warn", "fail")


@dataclass(frozen=True)
class Finding:
    level: str  # one of LEVELS
    area: str  # allocation, gpu, torch, interconnect, binds, caches, scratch, probe
    what: str  # what was found, in one line
    why: str = ""  # the reason it matters (with its source where a recipe or document says so)
    fix: str = ""  # what to do; empty for ok/info
    node: str = ""  # the node it was found on, when checked per node

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ValueError(f"unknown finding level {self.level!r}")


def ok(area: str, what: str, why: str = "", node: str = "") -> Finding:
    return Finding("ok", area, what, why, "", node)


def info(area: str, what: str, why: str = "", node: str = "") -> Finding:
    return Finding("info", area, what, why, "", node)


def warn(area: str, what: str, why: str, fix: str, node: str = "") -> Finding:
    return Finding("warn", area, what, why, fix, node)


def fail(area: str, what: str, why: str, fix: str, node: str = "") -> Finding:
    return Finding("fail", area, what, why, fix, node)


@dataclass
class DoctorReport:
    system: str
    headline: str  # system (and why), image, job
    findings: list[Finding] = field(default_factory=list)

    def count(self, level: str) -> int:
        return sum(1 for finding in self.findings if finding.level == level)

    def exit_code(self, strict: bool = False) -> int:
        """0 clean (warnings allowed); 1 a failure, or a warning with --strict: problems found, as every command
        of both tools says it (envbuild.shared.errors.EXIT_PROBLEMS; 2 is a usage error, never a finding)."""
        return EXIT_PROBLEMS if self.count("fail") or (strict and self.count("warn")) else EXIT_CLEAN

    def render(self) -> str:
        lines = [f"envrun doctor: {self.headline}"]
        for finding in self.findings:
            where = f" [{finding.node}]" if finding.node else ""
            lines.append(f"  {finding.level:<5} {finding.area:<12} {finding.what}{where}")
            if finding.why:
                lines.append(f"{'':20}why: {finding.why}")
            if finding.fix:
                lines.append(f"{'':20}fix: {finding.fix}")
        counts = ", ".join(f"{self.count(level)} {level}" for level in ("ok", "warn", "fail"))
        lines.append(f"envrun doctor: {counts} ({self.system})")
        return "\n".join(lines) + "\n"

    def to_json(self) -> str:
        return json.dumps({"system": self.system, "headline": self.headline,
                           "findings": [asdict(finding) for finding in self.findings]}, indent=1)
