"""`envbuild validate`: each spec (or conda env file) checked as `envbuild build` reads it, its problems and
warnings located, as text or as JSON (the schema VALIDATION_JSON says, in `envbuild validate --help`), and
exiting as `envbuild build` would on the same file; and `envbuild schema`, the spec format for editors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envbuild.shared.errors import EXIT_CLEAN, EnvbuildError, SpecError, SpecProblem

VALIDATION_JSON = ('{"ok", "files": [{"file", "ok", "name", "system", "problems": [P], "warnings": [P]}]}, '
                   'P = {"line", "column", "field", "message", "fix"} (null where a problem has no place)')


class FileValidation:
    """One file's verdict: `name` and `system` of a spec that loaded, else None; the rendered_* texts are what
    the text output says (the error and the warnings as the CLI renders them). A plain class: the CLI imports
    this module for its help text, and `envbuild build` should not pay for dataclasses at start-up."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.name: str | None = None
        self.system: str | None = None
        self.problems: list[dict[str, Any]] = []
        self.warnings: list[dict[str, Any]] = []
        self.rendered_problems = ""
        self.rendered_warnings: list[str] = []
        self.exit_code = EXIT_CLEAN  # the problem's, as `envbuild build` exits on it (a spec's problems: usage)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "ok": self.ok, "name": self.name, "system": self.system,
                "problems": self.problems, "warnings": self.warnings}


def validate_file(path: Path, system: str | None) -> FileValidation:
    from envbuild.builder.sessions.condasession import conda_env_warnings
    from envbuild.envspec.loadspec import load_build_input

    result = FileValidation(str(path))
    try:
        loaded = load_build_input(path, system=system)
        conda_warnings = conda_env_warnings(loaded)
    except SpecError as exc:
        result.problems = [_located(problem) for problem in exc.problems]
        result.rendered_problems, result.exit_code = exc.render(), exc.exit_code
        return result
    except EnvbuildError as exc:
        result.problems = [_unlocated(exc.message, exc.hint)]
        result.rendered_problems, result.exit_code = exc.render(), exc.exit_code
        return result
    result.name, result.system = loaded.spec.name, loaded.spec.system
    result.warnings = [_located(warning) for warning in loaded.warnings] + [_unlocated(text) for text in conda_warnings]
    result.rendered_warnings = [f"warning: {w.render()}" for w in loaded.warnings] + [f"warning: {t}" for t in conda_warnings]
    return result


def validation_to_dict(results: list[FileValidation]) -> dict[str, Any]:
    return {"ok": all(result.ok for result in results), "files": [result.to_dict() for result in results]}


def validation_status(results: list[FileValidation]) -> int:
    """The exit status: EXIT_CLEAN when every file is fine, else the highest a file's problem carries (the
    kinds of envbuild.shared.errors; a spec's problems are a usage error, as from `envbuild build`)."""
    return max((result.exit_code for result in results), default=EXIT_CLEAN)


def spec_schema_text() -> str:
    """`envbuild schema`: the spec format's JSON Schema (for editors, e.g. yaml-language-server)."""
    import json

    from envbuild.envspec.jsonschema import spec_json_schema

    return json.dumps(spec_json_schema(), indent=2) + "\n"


def _located(problem: SpecProblem) -> dict[str, Any]:
    return {"line": problem.line, "column": problem.column, "field": problem.field, "message": problem.message,
            "fix": problem.hint}


def _unlocated(message: str, fix: str | None = None) -> dict[str, Any]:
    return {"line": None, "column": None, "field": None, "message": message, "fix": fix}
