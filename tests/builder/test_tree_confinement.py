"""A base whose tree links out of itself cannot make a build write or read on the host: the configure step of a
real plan, carried out by the executor on a sandbox whose /.envbuild, labels file and a files[] destination's
parent are links to a host directory (issue 28)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest

from envbuild.builder.execute.executor import BuildExecutor
from envbuild.builder.plan.imageplan import configure_step, plan_build
from envbuild.builder.plan.layers import choose_installer, plan_layers
from envbuild.builder.plan.upperplan import plan_upper_build
from envbuild.envspec.specmodel import FileCopy
from tests.support.plan_fixtures import FIXED_FACTS, fixed_request, with_overrides


def host_snapshot(directory: Path) -> dict[str, tuple[int, int, bytes]]:
    return {str(p.relative_to(directory)): (p.lstat().st_mode, p.lstat().st_mtime_ns, p.read_bytes() if p.is_file() else b"")
            for p in sorted(directory.rglob("*"))}


@pytest.fixture
def hostile(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(sandbox, host directory the links point at, spec directory with a 0640 file)."""
    host = tmp_path / "host"
    host.mkdir()
    (host / "labels.json").write_text(json.dumps({"host.secret": "from the host"}))
    (host / "build.json").write_text("host's own file\n")
    sandbox = tmp_path / "work" / "sandbox"
    (sandbox / ".singularity.d" / "env").mkdir(parents=True)
    (sandbox / ".envbuild").symlink_to(host)  # absolute: the host directory
    (sandbox / ".singularity.d" / "labels.json").symlink_to(host / "labels.json")
    (sandbox / "opt").symlink_to("../../../../../../../../../" + str(host).lstrip("/"))  # relative, climbing out
    spec_dir = tmp_path / "project"
    spec_dir.mkdir()
    (spec_dir / "vocab.txt").write_text("a b c\n")
    (spec_dir / "vocab.txt").chmod(0o640)
    return sandbox, host, spec_dir


def test_the_configure_step_writes_and_reads_only_inside_a_hostile_sandbox(hostile: tuple[Path, Path, Path], tmp_path: Path) -> None:
    sandbox, host, spec_dir = hostile
    request = fixed_request("envs/local-cpu-pytorch.yaml", spec_dir=str(spec_dir))
    spec = request.spec.model_copy(update={"files": (FileCopy(src="vocab.txt", dest="/opt/data/vocab.txt"),)})
    request = with_overrides(request, spec=spec)
    before = host_snapshot(host)
    step = configure_step(request, str(sandbox), choose_installer(spec, FIXED_FACTS), plan_layers(request))
    executor = BuildExecutor(tmp_path / "build.log", store_root=tmp_path / "store", quiet=True)
    executor.execute_steps((step,), None, "build")

    assert host_snapshot(host) == before, "the build wrote on the host"
    labels = json.loads((sandbox / ".singularity.d" / "labels.json").read_text())
    assert "host.secret" not in labels and labels["org.envbuild.spec-name"] == spec.name
    assert not (sandbox / ".singularity.d" / "labels.json").is_symlink()
    # /.envbuild -> <host> resolves to <sandbox>/<host> inside: the record is there, in the tree
    inside_record = sandbox / str(host).lstrip("/")
    assert json.loads((inside_record / "build.json").read_text())["spec"]["name"] == spec.name
    # /opt -> ../../..<host> is clamped at the root: <sandbox>/<host> as well
    copied = inside_record / "data" / "vocab.txt"
    assert copied.read_text() == "a b c\n" and stat.S_IMODE(copied.stat().st_mode) == 0o640


def test_every_write_of_the_build_plans_into_a_tree_is_confined_to_it() -> None:
    """The planners mark what they do in a tree with its root (MakeDirs/WriteFile/MergeJson/CopyFile/Touch/Remove/
    Rename); a path in a sandbox, an env layer being made or a debootstrap tree without one would be resolved by
    the host kernel, links and all."""
    from envbuild.builder.plan.actions import CopyTree, Run
    from envbuild.builder.plan.imageplan import plan_base

    request = fixed_request("envs/local-cpu-pytorch.yaml", spec_dir="/specs")
    spec = request.spec.model_copy(update={"files": (FileCopy(src="vocab.txt", dest="/opt/data/vocab.txt"),)})
    request = with_overrides(request, spec=spec)
    plan, base = plan_build(request), plan_base(request)
    steps = (*base.steps, *plan.steps)
    trees = {plan.sandbox, *(a.dest for s in steps for a in s.actions if isinstance(a, CopyTree)),
             *(a.argv[4] for s in steps for a in s.actions if isinstance(a, Run) and a.argv[0] == "debootstrap")}
    assert len(trees) == 3
    unconfined = []
    for step in steps:
        for action in step.actions:
            paths = [getattr(action, name) for name in ("path", "dest", "src") if isinstance(getattr(action, name, None), str)]
            paths += list(getattr(action, "paths", ()))
            roots = {getattr(action, name, None) for name in ("root", "dest_root", "src_root")}
            for path in paths:
                tree = next((t for t in trees if path.startswith(t + "/")), None)
                if tree and tree not in roots:
                    unconfined.append(f"{step.name}: {action.describe()}")
    assert unconfined == []


def test_a_user_layer_reads_the_env_layers_labels_inside_that_layer(tmp_path: Path) -> None:
    request = fixed_request("envs/local-cpu-pytorch.yaml", squash_parent="parent", as_root=True)
    plan = plan_upper_build(request)
    merge = next(a for s in plan.steps for a in s.actions if type(a).__name__ == "MergeJson")
    assert merge.root == plan.sandbox and merge.base_root and merge.base.startswith(merge.base_root + "/")


def test_an_action_refuses_a_path_outside_the_root_it_names() -> None:
    from envbuild.builder.plan.actions import WriteFile

    with pytest.raises(ValueError, match="not under the tree"):
        WriteFile("/elsewhere/x", "", root="/work/sandbox")
    assert os.path.basename(WriteFile("/work/sandbox/x", "", root="/work/sandbox").path) == "x"


def test_a_local_base_directory_is_checked_for_links_out_before_apptainer_unpacks_it_and_every_base_after() -> None:
    """apptainer build --sandbox writes the runtime's files by host paths, through a link out of the tree."""
    from envbuild.builder.plan.actions import CheckLinksInside, Run
    from envbuild.builder.plan.imageplan import plan_base
    from envbuild.envspec.specmodel import BaseImage

    request = fixed_request("envs/local-cpu-pytorch.yaml")
    local = with_overrides(request, spec=request.spec.model_copy(update={"base": BaseImage(kind="localimage", ref="/bases/tree")}),
                           base_path="/bases/tree")
    actions = plan_base(local).steps[0].actions
    kinds = [type(a).__name__ for a in actions]
    first_check = kinds.index("CheckLinksInside")
    assert isinstance(actions[first_check], CheckLinksInside) and actions[first_check].root == "/bases/tree"
    assert first_check < next(i for i, a in enumerate(actions) if isinstance(a, Run))
    for plan in (plan_base(local), plan_base(request)):
        checks = [a for a in plan.steps[0].actions if isinstance(a, CheckLinksInside)]
        assert checks[-1].root.endswith("rootfs.partial") and "/.singularity.d/labels.json" in checks[-1].paths


def test_merging_a_user_layer_replaces_a_lower_link_out_instead_of_writing_through_it(tmp_path: Path) -> None:
    """The --layered fallback merges the user layer over the env layer: /.envbuild linked to a host directory in
    the lower tree becomes the upper's directory (as the overlay shows it), the host directory untouched."""
    from envbuild.sif.layeredwriter import merge_upper

    host = tmp_path / "host"
    host.mkdir()
    (host / "build.json").write_text("the host's\n")
    lower, upper = tmp_path / "lower", tmp_path / "upper"
    (lower / "usr").mkdir(parents=True)
    (lower / ".envbuild").symlink_to(host)
    (upper / ".envbuild").mkdir(parents=True)
    (upper / ".envbuild" / "build.json").write_text("ours\n")
    merge_upper(str(lower), str(upper), str(tmp_path / "merged"))
    assert (host / "build.json").read_text() == "the host's\n"
    merged = tmp_path / "merged" / ".envbuild"
    assert not merged.is_symlink() and (merged / "build.json").read_text() == "ours\n"


def test_a_link_loop_in_the_base_is_a_step_failure_naming_the_tree(tmp_path: Path) -> None:
    from envbuild.builder.execute.executor import StepFailed
    from envbuild.builder.plan.actions import MakeDirs, Step, WriteFile

    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    (sandbox / ".envbuild").symlink_to("/.envbuild")  # a loop, inside the tree
    step = Step("configure", "write the record", (MakeDirs((f"{sandbox}/.envbuild",), root=str(sandbox)),
                                                   WriteFile(f"{sandbox}/.envbuild/build.json", "{}", root=str(sandbox))))
    executor = BuildExecutor(tmp_path / "build.log", store_root=tmp_path / "store", quiet=True)
    with pytest.raises(StepFailed, match="failed inside the tree") as raised:
        executor.execute_steps((step,), None, "build")
    assert "link loop" in (raised.value.hint or "")


def test_mkdir_makes_a_missing_tree_root_as_mkdir_p_does(tmp_path: Path) -> None:
    """The debootstrap step on a cold store: its tree is removed, then `mkdir -p TREE/etc/dpkg/dpkg.cfg.d` made
    inside it. The root is envbuild's own path, so it is made; what lies below it is made inside the tree."""
    from envbuild.builder.execute import fsactions
    from envbuild.builder.plan.actions import MakeDirs

    root = tmp_path / "store" / "bases" / "entry" / "debootstrap.partial"
    executor = SimpleNamespace(store_root=tmp_path / "store")
    fsactions.make_dirs(executor, None, MakeDirs((f"{root}/etc/dpkg/dpkg.cfg.d",), 0o755, root=str(root)))
    assert (root / "etc/dpkg/dpkg.cfg.d").is_dir()
    assert (root / "etc").stat().st_mode & 0o777 == 0o755
