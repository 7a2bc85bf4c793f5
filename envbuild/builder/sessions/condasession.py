"""One `envbuild build` of a spec with `conda:` (or of a plain conda env file): checks the pip part,
finds cotainr, plans (envbuild.builder.plan.condaplan) and runs the plan. `--dry-run` prints the env file and the
plan, whose cotainr step is the exact command that runs."""

from __future__ import annotations

import os
import platform
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from envbuild.builder.sessions.buildsession import Session
from envbuild.shared import safefiles
from envbuild.shared.errors import EnvbuildError, UsageError

if TYPE_CHECKING:
    from envbuild.builder.plan.condaplan import CotainrTool
    from envbuild.builder.plan.plandata import BuildPlan, BuildRequest
    from envbuild.envspec.loadspec import LoadedSpec
    from envbuild.recipes.protocols import SystemRecipe


def find_cotainr() -> CotainrTool:
    """cotainr from the Python envbuild runs in (a dependency in pyproject.toml), run as a module so that
    no PATH entry is needed."""
    from importlib.metadata import PackageNotFoundError, version

    from envbuild.builder.plan.condaplan import CotainrTool

    try:
        found = version("cotainr")
    except PackageNotFoundError:
        raise EnvbuildError("cotainr is not installed in envbuild's Python environment",
                            f"install it: {sys.executable} -m pip install 'cotainr>=2025.7.1,<2026' "
                            "(pip install . of envbuild brings it)") from None
    from envbuild.host.pythonstart import isolation_flags

    # Never with the working directory (a project others may write) on its sys.path.
    return CotainrTool(argv=(sys.executable, *isolation_flags(), "-m", "cotainr"), version=found)


def check_pip_part(loaded: LoadedSpec, recipe: SystemRecipe, base: str) -> list[str]:
    """The env's pip part against the system, before anything is downloaded: refuses what cannot work and
    returns the warnings (one text each, with the fix) for what may not do what is meant. `base`: the
    image cotainr starts from."""
    from envbuild.builder.plan.condacheck import conda_pip_problems, conda_pip_warnings

    spec = loaded.spec
    assert spec.conda is not None
    problems = conda_pip_problems(spec.conda, recipe, spec.system, base)
    if problems:
        raise EnvbuildError(
            f"{loaded.path}: the conda env's pip list does not fit {spec.system}:\n"
            + "\n".join(f"  - {what}" for what, _ in problems),
            "; ".join(dict.fromkeys(fix for _, fix in problems)),
        )
    return [f"{loaded.path}: {what}\n    fix: {fix}" for what, fix in conda_pip_warnings(spec.conda, recipe, spec.system, base)]


def conda_env_warnings(loaded: LoadedSpec) -> list[str]:
    """check_pip_part for `envbuild validate`, which has no build request: the base as the spec names it
    (the recipe's conda base is a docker:// reference, so a local base never compares equal either way)."""
    from envbuild.recipes.loadrecipe import load_recipe

    if loaded.spec.conda is None:
        return []
    return check_pip_part(loaded, load_recipe(loaded.recipe_ref), loaded.spec.base.ref)


def base_digest(request: BuildRequest) -> str:
    """A local base's content digest for the record and labels (a .sif's sha256, a sandbox's tree digest);
    "" for docker:// and oras:// bases, which cotainr pulls itself."""
    from envbuild.shared.treedigest import file_digest

    path = request.base.path
    if not path:
        return ""
    return request.base.fingerprint if os.path.isdir(path) else file_digest(path)


MINIFORGE_LICENSE = "https://github.com/conda-forge/miniforge/blob/main/LICENSE"


def license_problem(loaded: LoadedSpec) -> str | None:
    """cotainr asks on the terminal whether the Miniforge license is accepted unless --accept-licenses is
    given; envbuild runs it without one (its output goes to the log), so the question could not be answered."""
    conda = loaded.spec.conda
    if conda is None or not (conda.dependencies or conda.pip) or conda.accept_licenses:
        return None
    return (f"cotainr installs Miniforge, whose license ({MINIFORGE_LICENSE}) it asks you to accept on the "
            "terminal; envbuild runs cotainr without one")


def license_stop(loaded: LoadedSpec) -> UsageError | None:
    """The error a build stops with when the Miniforge license is not accepted (license_problem), with its fix;
    a dry run ends with it too, after the plan."""
    problem = license_problem(loaded)
    if problem is None:
        return None
    return UsageError(f"{loaded.path}: {problem}", "read the license, then write `accept_licenses: true` under conda: "
                      "in the spec (or pass --accept-licenses with an env file)")


class CondaBuildSession(Session):
    def _request_and_plan(self, *, need_runtime: bool) -> tuple[BuildRequest, BuildPlan, list[str]]:
        """The request, the plan, and the pip part's warnings."""
        from envbuild.builder.plan.condaplan import cotainr_base, plan_conda_build
        from envbuild.builder.sessions.buildrequest import make_request
        from envbuild.host.buildhost import gather_host_facts

        flag = next((f"--{name}" for name in ("locked", "frozen", "upgrade") if getattr(self.options, name)), None)
        if flag:
            raise UsageError(f"{flag} applies to pip specs: a conda environment is resolved by conda when cotainr "
                             f"builds it", f"build without {flag}; the image records every package it got "
                             "(envbuild packages IMAGE), and pin versions in the env file (numpy=1.26.3, torch==2.5.1+rocm6.2)")
        facts = gather_host_facts(need_runtime=need_runtime, cache_dir=self.options.cache_dir)
        request = make_request(self.loaded, self.options, facts, lock=None)
        request = request.with_base_digest(base_digest(request))
        warnings = check_pip_part(self.loaded, request.recipe, cotainr_base(request))
        plan = plan_conda_build(request, find_cotainr(), arch=request.facts.machine or platform.machine() or "x86_64",
                                channel_alias=os.environ.get("CONDA_CHANNEL_ALIAS"))
        return request, plan, warnings

    def dry_run(self) -> str:
        from envbuild.builder.plan.archcheck import architecture_line
        from envbuild.builder.plan.condaplan import env_file_path
        from envbuild.builder.plan.planrender import render_build_plan

        request, plan, warnings = self._request_and_plan(need_runtime=False)
        conda = self.loaded.spec.conda
        assert conda is not None
        problem = license_problem(self.loaded)
        text = "".join("".join(f"# {line}\n" for line in f"warning: {warning}".splitlines()) for warning in warnings)
        text += f"# note: a build would stop here: {problem}\n" if problem else ""
        if conda.dependencies or conda.pip:
            env_file = conda.env_file(self.loaded.spec.name)
            text += f"# conda env file cotainr gets ({env_file_path(request)}):\n" + "".join(
                f"#   {line}\n" for line in env_file.splitlines()) + "\n"
        return architecture_line(request) + text + render_build_plan(plan)

    def build(self) -> Path:
        from envbuild.builder.execute.executor import BuildExecutor
        from envbuild.builder.sessions.imagesession import image_key_of, note_project_file
        from envbuild.builder.sessions.outputpath import ensure_can_write
        from envbuild.store.entries import touch_used
        from envbuild.store.locks import entry_lock

        started = self.started
        output = self.options.output
        ensure_can_write(output)
        request, plan, warnings = self._request_and_plan(need_runtime=True)
        for warning in warnings:
            self._say(f"warning: {warning}")
        stop = license_stop(self.loaded)
        if stop is not None:
            raise stop
        if image_key_of(output) == plan.layers.image_key:
            self._say(f"{output} is up to date (image {plan.layers.image_entry}); nothing to build "
                      f"({time.monotonic() - started:.2f} s)", result=True)
            return output
        log_path = (self.options.log_path or output.with_name(output.name + ".build.log")).absolute()
        safefiles.remove_file(log_path)  # one log per build, never a link planted beside the output
        store_root = Path(request.facts.cache_dir)
        self._sweep_store(store_root)
        self._say(f"building {self.loaded.spec.name} -> {output} with {plan.installer}")
        executor = BuildExecutor(log_path, store_root=store_root, verbose=self.options.verbose,
                                 keep_work=self.options.keep_work, out=self.out, quiet=self.options.quiet,
                                 heartbeat_s=self.options.heartbeat_s, started=started)
        with entry_lock(store_root, "image", plan.layers.image_entry, on_wait=lambda m: self._say(m)):
            from envbuild.store.places import refuse_linked_entry

            refuse_linked_entry(store_root, "image", plan.layers.image_entry)  # never written through a member's link
            executor.execute(plan)
            from envbuild.builder.sessions.storetrust import record_stored_file

            record_stored_file(str(Path(plan.store_image).parent), "image.sif")  # envbuild.store.integrity
        touch_used(Path(plan.store_image).parent)
        note_project_file(self.loaded, output, image=str(output), overlays=(), say=self._say)
        return output
