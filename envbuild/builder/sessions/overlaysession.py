"""One `envbuild build` of an overlay spec: the base's digest and Python (cached), the pure overlay plan,
the store entry, the output file. What a build does is decided in envbuild.builder.plan.overlayplan."""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from envbuild.builder.sessions.buildsession import Session
from envbuild.shared import safefiles
from envbuild.shared.errors import UsageError

if TYPE_CHECKING:
    from envbuild.builder.plan.overlayplan import OverlayBasePlan, OverlayPlan
    from envbuild.builder.plan.overlayprobe import BaseProbe
    from envbuild.builder.plan.plandata import BuildRequest
    from envbuild.host.buildhost import HostFacts
    from envbuild.lock.lockmodel import LoadedLock


class OverlaySession(Session):
    def _request(self, facts: HostFacts, lock: LoadedLock | None = None) -> BuildRequest:
        from envbuild.builder.sessions.buildrequest import make_request
        from envbuild.sif.reader import read_sif_layout

        request = make_request(self.loaded, self.options, facts, lock=lock)
        base = request.base.path or ""
        if os.path.isdir(base) or not _is_sif_file(base):
            raise UsageError(
                f"{self.loaded.path}: the overlay's base {base} is not a SIF file; an overlay is mounted over an image "
                "file with --bind NAME.sqsh:/mount:image-src=/",
                f"build a .sif from it first (apptainer build base.sif {base}) and write base: localimage:base.sif")
        header = read_sif_layout(base).header
        return replace(request, base=replace(request.base, sif_id=header.image_id, size=os.path.getsize(base)))

    def dry_run(self) -> str:
        from envbuild.builder.plan.archcheck import architecture_line
        from envbuild.builder.plan.overlayplan import plan_overlay, plan_overlay_base
        from envbuild.builder.plan.planrender import render_steps
        from envbuild.host.buildhost import gather_host_facts

        facts = gather_host_facts(need_runtime=False, cache_dir=self.options.cache_dir)
        request = self._request(facts, self.the_lock())
        base = plan_overlay_base(request)
        text = self.lock_note + architecture_line(request) + self.loaded.torch_variant_note + render_steps("base", base.steps)
        probe = _cached_probe(base)
        if probe is None:
            return text + "\n# the overlay's steps depend on the base's Python, found by the base-python step: " \
                          "run the build (or this dry run again after it) to see them\n"
        request = request.with_base_digest(_read(base.digest_file))
        plan = plan_overlay(request, probe, spec_path=str(self.loaded.path))
        return text + "\n" + render_steps("overlay", plan.steps)

    def build(self) -> Path:
        from envbuild.builder.execute.executor import BuildExecutor
        from envbuild.builder.plan.overlayplan import overlay_key, plan_overlay, plan_overlay_base
        from envbuild.builder.sessions.outputpath import ensure_can_write
        from envbuild.host.buildhost import gather_host_facts
        from envbuild.store.entries import touch_used
        from envbuild.store.layout import StorePaths
        from envbuild.store.locks import entry_lock

        started = self.started
        output = self.options.output
        ensure_can_write(output)
        from envbuild.builder.sessions.localarch import check_spec_architecture

        check_spec_architecture(self.loaded)  # before a lock is resolved or anything fetched
        lock = self.the_lock()  # chosen by envbuild.builder.sessions.buildlock (uv's conventions)
        facts = gather_host_facts(cache_dir=self.options.cache_dir)
        request = self._request(facts, lock)
        base = plan_overlay_base(request)
        probe = _cached_probe(base)
        if probe is not None and os.path.exists(base.digest_file):
            key = overlay_key(request.with_base_digest(_read(base.digest_file)), probe)
            if _overlay_key_of(output) == key:
                self._say(f"{output} is up to date (overlay {key[:16]}); nothing to build ({time.monotonic() - started:.2f} s)",
                          result=True)
                self._note_project(request, output)
                return output
        log_path = (self.options.log_path or output.with_name(output.name + ".build.log")).absolute()
        safefiles.remove_file(log_path)  # one log per build, never a link planted beside the output
        store_root = Path(facts.cache_dir)
        self._sweep_store(store_root)
        self._say(f"building overlay {self.loaded.spec.name} on {request.base.path} -> {output}")
        executor = BuildExecutor(log_path, store_root=store_root, verbose=self.options.verbose,
                                 keep_work=self.options.keep_work, out=self.out, quiet=self.options.quiet,
                                 heartbeat_s=self.options.heartbeat_s, started=started)
        executor.execute_steps(base.steps, None, "base")
        probe = _cached_probe(base)
        assert probe is not None
        from envbuild.builder.sessions.storetrust import record_stored_file, take_stored_file, trusted_file_digest, withdraw_entry

        # Recomputed from the base .sif when others can write the store (the up-to-date check above only
        # ever leaves the user's own output as it is).
        request = request.with_base_digest(trusted_file_digest(store_root, base.entry, request.base.path or "",
                                                               _read(base.digest_file)))
        plan = plan_overlay(request, probe, spec_path=str(self.loaded.path))
        self._report(probe, plan)
        entry = StorePaths(str(store_root)).overlay(plan.entry)
        with entry_lock(store_root, "overlay", plan.entry, on_wait=lambda m: self._say(f"{m}; will reuse its overlay")):
            from envbuild.store.places import refuse_linked_entry

            refuse_linked_entry(store_root, "overlay", plan.entry)  # never written through a member's link
            if _overlay_key_of(output) == plan.key:
                self._say(f"{output} is up to date (overlay {plan.key[:16]})")
                self._note_project(request, output)
                return output
            from envbuild.builder.plan.imageplan import output_partial

            reuse = os.path.exists(entry.complete) and take_stored_file(store_root, "overlay", entry.dir, "overlay.sqsh",
                                                                        output_partial(request), say=self._say)
            if not reuse and os.path.exists(entry.complete):
                withdraw_entry(store_root, "overlay", entry.dir)  # its squash step would be skipped otherwise
            if reuse:
                from envbuild.builder.plan.imageplan import output_step
                from envbuild.builder.plan.overlayplan import overlay_wrappers_step

                # made ahead when it was checked in full as it was copied (envbuild.builder.sessions.storetrust)
                step = output_step(request, plan.store_overlay, f"copy the stored overlay {plan.entry} to {output}",
                                   made_ahead=True)
                # the commands are read from the output's overlay file, the copy that was checked (there is
                # no venv directory now)
                wrappers = overlay_wrappers_step(request, probe, str(output))
                executor.execute_steps((step, wrappers), None, "cached")
                executor.finish(f"overlay unchanged, taken from the store: {output}")
            else:
                executor.execute_steps(plan.steps, plan.work_dir, "overlay")
                record_stored_file(entry.dir, "overlay.sqsh")
                executor.finish(f"built {output}")
        for directory in (base.entry, entry.dir):
            if os.path.isdir(directory):
                touch_used(Path(directory))
        self._note_project(request, output)
        return output

    def _note_project(self, request: BuildRequest, output: Path) -> None:
        from envbuild.builder.sessions.imagesession import note_project_file

        note_project_file(self.loaded, output, image=request.base.path or "", overlays=(str(output),), say=self._say)

    def _report(self, probe: BaseProbe, plan: OverlayPlan) -> None:
        self._say(f"base Python: {probe.python} (Python {probe.version}, {probe.abi or 'no ABI tag'}): {probe.why}")
        for line in plan.kept:
            self._say(f"  kept from the base: {line}")
        if plan.added:
            self._say(f"  to install into the overlay: {' '.join(plan.added)}")
        if plan.constraints:
            self._say(f"  pinned to the base's versions while installing: {' '.join(plan.constraints)}")


def _is_sif_file(path: str) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(42)[32:41] == b"SIF_MAGIC"
    except OSError:
        return False


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8").strip()
    except OSError:
        return ""


def _cached_probe(base: OverlayBasePlan) -> BaseProbe | None:
    from envbuild.builder.plan.overlayprobe import parse_probe

    text = _read(base.probe_file)
    return parse_probe(text, base.probe_file) if text else None


def _overlay_key_of(path: Path) -> str | None:
    """The key recorded in an existing overlay file; None when there is none or it is unreadable."""
    if not path.is_file():
        return None
    from envbuild.inventory.overlayfile import read_overlay_record
    from envbuild.shared.errors import EnvbuildError

    try:
        return read_overlay_record(str(path)).get("key")
    except EnvbuildError:
        return None
