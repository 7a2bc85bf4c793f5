"""One `envbuild build` of an image spec: takes the build's request (envbuild.builder.sessions.buildrequest: host facts,
file and base digests, the lock), finds what the store holds (a parent env layer, with --layered an image
to layer over), holds the store locks, checks what it takes from the store against the entries' records
(envbuild.builder.sessions.storetrust), and hands the plans to the executor; an up-to-date output ends it before any
planner is loaded. Nothing here decides what a build does; envbuild.builder.plan.imageplan does."""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from envbuild.builder.sessions.buildrequest import make_request, read_digest, read_digest_file
from envbuild.builder.sessions.buildsession import Session
from envbuild.builder.sessions.envparent import find_env_parent
from envbuild.builder.sessions.localarch import check_spec_architecture
from envbuild.shared import safefiles
from envbuild.shared.errors import EnvbuildError

if TYPE_CHECKING:
    from collections.abc import Callable

    from envbuild.builder.execute.executor import BuildExecutor
    from envbuild.builder.plan.plandata import BuildPlan, BuildRequest, Layers
    from envbuild.builder.sessions.prefetch import ParentPrefetch
    from envbuild.envspec.loadspec import LoadedSpec
    from envbuild.lock.lockmodel import LoadedLock
    from envbuild.store.layout import EntryPaths, StorePaths


def image_key_of(path: Path) -> str | None:
    """The image key recorded in an envbuild image, read from the file (no runtime); None if unreadable."""
    if not path.is_file():
        return None
    try:
        from envbuild.builder.plan.sandbox import RECORD_DIR
        from envbuild.inventory.image import open_image

        with open_image(str(path)) as image:
            data = image.tree.read(f"{RECORD_DIR}/build.json", 1 << 20)
        record = json.loads(data or b"{}")
        image_key: str | None = record.get("layers", {}).get("image")  # a record that is no mapping: AttributeError
        return image_key
    except (EnvbuildError, ValueError, OSError, AttributeError):
        return None


class BuildSession(Session):
    _prefetch: ParentPrefetch | None = None

    def prefetch_parent(self, stale: LoadedLock) -> None:
        """Called as the stale lock is resolved again: copy its env layer meanwhile (envbuild.builder.sessions.prefetch)."""
        from envbuild.builder.sessions.prefetch import start_parent_prefetch
        from envbuild.shared.errors import EnvbuildError

        try:
            self._prefetch = start_parent_prefetch(self.loaded, self.options, stale, uses=self._uses, use=self._use)
        except (EnvbuildError, OSError):
            self._prefetch = None  # only a guess: the build itself reports what is wrong, after the lock

    def while_resolving(self) -> Callable[[LoadedLock], None]:
        return self.prefetch_parent

    def dry_run(self) -> str:
        from envbuild.builder.plan.archcheck import architecture_line
        from envbuild.builder.plan.imageplan import plan_base, plan_build
        from envbuild.builder.plan.layers import plan_layers
        from envbuild.builder.plan.planrender import render_build_plan, render_steps
        from envbuild.host.buildhost import gather_host_facts

        facts = gather_host_facts(need_runtime=False, cache_dir=self.options.cache_dir)
        which, lock = self.lock_note, self.the_lock()
        request = make_request(self.loaded, self.options, facts, lock=lock)
        base = plan_base(request)
        digest = read_digest(base)
        request = request.with_base_digest(digest or "<digest recorded by the base step>")
        notes: list[str] = []
        if digest:  # the store has the base: plan as the build would, with the parents the store holds now
            plan = self._plan(request, plan_layers(request), use=lambda *_: None, say=notes.append, verify=False)
        else:
            plan = plan_build(request)
        return (which + architecture_line(request) + self.loaded.torch_variant_note + "".join(f"# {note}\n" for note in notes)
                + render_steps("base", base.steps) + "\n" + render_build_plan(plan))

    def build(self) -> Path:
        # Shared use locks on the base and env layers this build reads, held to its end: a concurrent
        # `cache prune` or `cache rm` skips them instead of pulling them out from under the copy.
        with self._uses:
            return self._build()

    def _use(self, store_root: Path, kind: str, entry_dir: str) -> None:
        from envbuild.store.locks import use_lock

        self._uses.enter_context(use_lock(store_root, kind, os.path.basename(entry_dir.rstrip("/")),
                                          on_wait=self._say))

    def _build(self) -> Path:
        from envbuild.builder.plan.layers import base_cache_key
        from envbuild.builder.sessions.outputpath import ensure_can_write
        from envbuild.host.buildhost import gather_host_facts
        from envbuild.store.entries import touch_used
        from envbuild.store.layout import StorePaths
        from envbuild.store.locks import entry_lock

        started = self.started
        output = self.options.output
        ensure_can_write(output)
        check_spec_architecture(self.loaded)  # before a lock is resolved or anything fetched
        # The user's input first: a missing or stale lock is reported before any tool is looked for (a stale
        # one was resolved again before this session started: envbuild.commands.build).
        lock = self.the_lock()
        facts = gather_host_facts(cache_dir=self.options.cache_dir)
        request = make_request(self.loaded, self.options, facts, lock=lock)
        self._note_compression()
        store_root = Path(facts.cache_dir)
        store = StorePaths(str(store_root))
        base_entry = store.base(base_cache_key(request.spec.base, facts, request.base.fingerprint))
        self._use(store_root, "base", base_entry.dir)
        digest = read_digest_file(base_entry.digest)
        if digest and os.path.exists(base_entry.complete):
            request, layers = self._take_whole_image_where_stored(request.with_base_digest(digest), store, output)
            if image_key_of(output) == layers.image_key:
                self._finish_up_to_date(request, layers, started, base_entry)
                return output
        # Only a build needs the planner (an up-to-date output is known from the layer keys alone).
        from envbuild.builder.plan.imageplan import plan_base

        base = plan_base(request)
        log_path = (self.options.log_path or output.with_name(output.name + ".build.log")).absolute()
        safefiles.remove_file(log_path)  # one log per build; the previous build's log is not appended to
        self._sweep_store(store_root)
        self._say(f"building {self.loaded.spec.name} -> {output}")
        # Not before: an up-to-date output needs none, and a no-op build should not pay for its import.
        from envbuild.builder.execute.executor import BuildExecutor

        executor = BuildExecutor(log_path, store_root=store_root, verbose=self.options.verbose,
                                 keep_work=self.options.keep_work, out=self.out, quiet=self.options.quiet,
                                 heartbeat_s=self.options.heartbeat_s, started=started)
        made_now = not os.path.exists(base_entry.complete)
        executor.execute_base(base)
        from envbuild.builder.sessions.storetrust import base_digest_source, trusted_base_digest

        # Recomputed from the base when others can write the store (the up-to-date check above may read it:
        # it only ever leaves the user's own output as it is, and nothing from the store reaches it).
        digest = trusted_base_digest(store_root, base.entry, base.rootfs, base_digest_source(base), read_digest(base),
                                     made_now=made_now)
        if lock is not None and lock[0].base_digest is not None and lock[0].base_digest != digest:
            self._say(f"note: the base's content differs from the one {lock[2].name} was made with "
                      f"({lock[0].base_digest[:19]} vs {digest[:19]}); every Python package is still pinned. "
                      f"Run `envbuild lock {self.loaded.path}` to record the new base.")
        request, layers = self._take_whole_image_where_stored(request.with_base_digest(digest), store, output)
        self._use(store_root, "env", store.env(layers.env_entry).dir)
        touch_used(Path(base.entry))
        # One build per image: concurrent builds of the same spec wait here, then reuse the result.
        with entry_lock(store_root, "image", layers.image_entry, on_wait=lambda m: self._say(f"{m}; will reuse its image")):
            from envbuild.store.places import refuse_linked_entry

            refuse_linked_entry(store_root, "image", layers.image_entry)  # never written through a member's link
            if image_key_of(output) == layers.image_key:
                # Not remembered: this command made the base first, and printed so.
                self._finish_up_to_date(request, layers, started, None)
                return output
            image_entry = store.image(layers.image_entry)
            # Before planning: a build that takes the stored image uses no env layer, so it checks none.
            reuse = os.path.exists(image_entry.complete) and self._may_reuse_image(store_root, request, image_entry.image)
            try:
                plan = self._plan(request, layers, use=self._use, say=self._say, check_env=not reuse)
            except BaseException:
                if reuse:  # the checked copy made ahead for the output
                    from envbuild.builder.plan.imageplan import output_partial

                    safefiles.remove_file(output_partial(request))
                raise
            if reuse:
                self._reuse_stored_image(executor, request, plan, started)
            else:
                from envbuild.builder.sessions.storetrust import record_stored_file, withdraw_entry

                if os.path.exists(image_entry.complete):
                    withdraw_entry(store_root, "image", image_entry.dir)  # it did not match its record
                executor.execute(plan)
                record_stored_file(image_entry.dir, "image.sif")
        for entry in (store.env(layers.env_entry), store.image(layers.image_entry)):
            if os.path.isdir(entry.dir):
                touch_used(Path(entry.dir))
        note_project_file(self.loaded, output, image=str(output), overlays=(), say=self._say)
        return output

    def _take_whole_image_where_stored(self, request: BuildRequest, store: StorePaths,
                                       output: Path) -> tuple[BuildRequest, Layers]:
        """The request and its layers, in the form the image is taken in. A default build may layer (its key says
        so: a layered image is never reused for --full); where the output or the store already holds the image of
        the same inputs squashed whole (--full, which every runtime reads), the default takes that one instead of
        building again."""
        from envbuild.builder.plan.layers import plan_layers

        layers = plan_layers(request)
        if self.options.layered is not None or not request.options.layered:
            return request, layers  # --layered or --full as asked, or a default that does not layer
        whole = replace(request, options=replace(request.options, layered=False))
        whole_layers = plan_layers(whole)
        if image_key_of(output) == whole_layers.image_key or (
                not os.path.exists(store.image(layers.image_entry).complete)
                and os.path.exists(store.image(whole_layers.image_entry).complete)):
            return whole, whole_layers
        return request, layers

    def _plan(self, request: BuildRequest, layers: Layers, *, use: Callable[[Path, str, str], None],
              say: Callable[[str], None], verify: bool = True, check_env: bool = True) -> BuildPlan:
        """The plan over what the store holds: the env layer to install the difference on and, with
        --layered, the image to layer over, each held by `use` (a no-op for --dry-run) and said by `say`;
        `verify`: what the plan takes from the store is checked against its record first (not for --dry-run):
        the image layered over, and with `check_env` the build's env layer or the parent chosen for it."""
        from envbuild.builder.plan.imageplan import plan_build
        from envbuild.store.layout import StorePaths

        store_root = Path(request.facts.cache_dir)
        check_env = check_env and verify
        env_entry = StorePaths(str(store_root)).env(layers.env_entry)
        if check_env and os.path.exists(env_entry.complete):
            _check_env_layer(store_root, env_entry.dir, say=say, ahead=self._prefetch)
        if not os.path.exists(env_entry.complete):
            parent = _choose_env_parent(store_root, layers, request, use=use, say=say, check=check_env,
                                        ahead=self._prefetch)
            if parent:
                say(f"reusing env layer {parent}: installing only the difference")
                made_ahead = self._prefetch.take() if self._prefetch and self._prefetch.parent == parent else None
                request = replace(request, env_parent=parent, env_parent_copy=made_ahead)
        if request.options.layered:
            from envbuild.builder.sessions.squashparent import with_squash_parent

            request = with_squash_parent(request, layers, use=use, say=say, asked=self.options.layered is True)
            if request.squash_parent and verify:
                from envbuild.builder.sessions.storetrust import take_stored_file

                parent = StorePaths(str(store_root)).image(request.squash_parent).dir
                if not take_stored_file(store_root, "image", parent, "image.sif", None, say=say,
                                        instead="squashing the whole tree"):
                    request = replace(request, squash_parent=None)
            from envbuild.builder.plan.upperplan import plan_upper_build, user_layer_over_env

            if user_layer_over_env(request):
                return plan_upper_build(request)
        return plan_build(request)

    def _may_reuse_image(self, store_root: Path, request: BuildRequest, store_image: str) -> bool:
        """The stored image checked against its record (envbuild.builder.sessions.storetrust); from a store others can
        write, the checked copy is left where the output step renames it from."""
        from envbuild.builder.plan.imageplan import output_partial
        from envbuild.builder.sessions.storetrust import take_stored_file

        return take_stored_file(store_root, "image", os.path.dirname(store_image), os.path.basename(store_image),
                                output_partial(request), say=self._say)

    def _reuse_stored_image(self, executor: BuildExecutor, request: BuildRequest, plan: BuildPlan, started: float) -> None:
        from envbuild.builder.plan.imageplan import output_step, wrappers_step

        copy = output_step(request, plan.store_image, f"copy the stored image {plan.layers.image_entry} to {plan.output}",
                           made_ahead=True)  # made ahead when it was checked in full as it was copied
        # The commands are read from the output, the copy that was checked, not from the store.
        executor.execute_steps((copy, wrappers_step(request, plan.output)), None, "cached")
        executor.finish(f"image unchanged, taken from the store: {plan.output}")

    def _finish_up_to_date(self, request: BuildRequest, layers: Layers, started: float,
                           base_entry: EntryPaths | None) -> None:
        """The result line; with the `base_entry` the verdict read (not when this command made it), what it was
        made from, for the light check's record (envbuild.commands.uptodate)."""
        result = f"{request.options.output} is up to date (image {layers.image_entry}); nothing to build"
        self._say(f"{result} ({time.monotonic() - started:.2f} s)", result=True)
        if base_entry is not None:
            from envbuild.builder.sessions.noopinputs import noop_inputs

            self.up_to_date = (result, noop_inputs(self.loaded, request, base_entry))
        note_project_file(self.loaded, Path(request.options.output), image=request.options.output, overlays=(), say=self._say)

    def _note_compression(self) -> None:
        from envbuild.sif.compression import compression_note

        note = compression_note(self.options.compression)
        if note:
            self._say(f"note: --compression {self.options.compression}: {note}")


def _check_env_layer(store_root: Path, entry_dir: str, *, say: Callable[[str], None],
                     ahead: ParentPrefetch | None = None) -> None:
    """The build's own env layer, complete in the store, checked before the sandbox is made from it
    (envbuild.builder.sessions.storetrust.take_env_layer); one that does not match is withdrawn, under its lock, so the
    env step makes it again instead of finding it "cached"."""
    from envbuild.builder.sessions.storetrust import take_env_layer, withdraw_entry
    from envbuild.store.layout import EntryPaths
    from envbuild.store.locks import entry_lock

    entry = EntryPaths(entry_dir)
    with entry_lock(store_root, "env", os.path.basename(entry_dir), on_wait=say):
        from envbuild.store.places import refuse_linked_entry

        refuse_linked_entry(store_root, "env", os.path.basename(entry_dir))  # never written through a member's link
        checked = ahead.verdict(os.path.basename(entry_dir)) if ahead else None
        if os.path.exists(entry.complete) and not take_env_layer(store_root, entry_dir, say=say, checked=checked,
                                                                 instead="building it again"):
            withdraw_entry(store_root, "env", entry_dir)


def _choose_env_parent(store_root: Path, layers: Layers, request: BuildRequest, *,
                       use: Callable[[Path, str, str], None], say: Callable[[str], None], check: bool,
                       ahead: ParentPrefetch | None = None) -> str | None:
    """The env layer to install the difference on (envbuild.builder.sessions.envparent), held by `use`; with `check`, one
    that does not match its record is passed over for the next best (each is digested once at most, the one
    `ahead` checked while the lock was resolved not again)."""
    from envbuild.builder.sessions.storetrust import take_env_layer
    from envbuild.store.layout import StorePaths

    passed_over: set[str] = set()
    while parent := find_env_parent(store_root, layers, request, passed_over=passed_over):
        use(store_root, "env", parent)
        entry = StorePaths(str(store_root)).env(parent)
        if not os.path.exists(entry.complete):
            return None  # removed between choosing and locking it: build without it
        if not check or take_env_layer(store_root, entry.dir, say=say, checked=ahead.verdict(parent) if ahead else None,
                                       instead="installing on another env layer or from the base"):
            return parent
        passed_over.add(parent)
    return None


def note_project_file(loaded: LoadedSpec, output: Path, *, image: str, overlays: tuple[str, ...],
                      say: Callable[[str], None]) -> None:
    """When the build wrote into the working directory (a project), record it in ./envrun.yaml, so that a
    plain `envrun srun torchrun train.py` there runs in it. Values the user set by hand are kept."""
    from envbuild.launch.projectfile import update_project_file

    here = Path.cwd()
    if output.parent.resolve() != here.resolve():
        return
    for message in update_project_file(here, image=image, overlays=overlays, spec=str(loaded.path.absolute())):
        say(message)
