"""`--layered` without a sandbox (envbuild.builder.plan.upperplan): when it applies, and its plan against a golden file.

The golden file shows the user layer written to a directory, the tests run over a hard-linked view of it
(`--overlay DIR:ro` on the env layer), the record written through a bind, and the layered helper given
`--upper`. The real build runs in tests/e2e/test_layered_plus_one.py (as root: this form) and
tests/integration/test_layered_build.py (SOURCE_DATE_EPOCH: the sandbox form)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from envbuild.builder.plan.actions import CopyTree, MergeJson, Run, StartBeside
from envbuild.builder.plan.plandata import BuildRequest
from envbuild.builder.plan.planrender import render_build_plan
from envbuild.builder.plan.upperplan import plan_upper_build, user_layer_over_env
from tests.support.golden import check_golden
from tests.support.plan_fixtures import fixed_request

UPPER_PLAN_GOLDEN = "local-cpu-pytorch.layered-upper.plan.txt"
PARENT = "local-cpu-pytorch-0123456789abcdef"


def golden_names() -> set[str]:
    return {UPPER_PLAN_GOLDEN}


def layered_request(**overrides: object) -> BuildRequest:
    request = fixed_request("envs/local-cpu-pytorch.yaml", **overrides)
    return replace(request, squash_parent=PARENT, options=replace(request.options, layered=True))


def test_upper_plan_matches_golden() -> None:
    check_golden(UPPER_PLAN_GOLDEN, render_build_plan(plan_upper_build(layered_request())))


def test_it_applies_only_where_the_sandbox_would_hold_nothing_else() -> None:
    request = layered_request()
    assert user_layer_over_env(request)
    assert not user_layer_over_env(replace(request, squash_parent=None))  # nothing to layer over: a full squash
    assert not user_layer_over_env(replace(request, options=replace(request.options, source_date_epoch=0)))
    assert not user_layer_over_env(replace(request, options=replace(request.options, as_root=False)))
    spec = request.source.spec.model_copy(update={"post": ("echo hi > /etc/motd",)})
    assert not user_layer_over_env(replace(request, source=replace(request.source, spec=spec)))
    with pytest.raises(ValueError, match="needs a sandbox"):
        plan_upper_build(replace(request, squash_parent=None))


def test_the_tests_see_the_user_layer_through_links_made_before_the_record_replaces_files() -> None:
    plan = plan_upper_build(layered_request())
    record = next(step for step in plan.steps if step.name == "record")
    kinds = [type(action) for action in record.actions]
    assert kinds == [CopyTree, StartBeside, Run]
    view = record.actions[0]
    assert isinstance(view, CopyTree) and view.hardlink and view.dest.endswith("/upper-for-tests")
    tests = record.actions[1]
    assert isinstance(tests, StartBeside)
    assert all(("--overlay", f"{view.dest}:ro") == run.argv[run.argv.index("--overlay"):][:2] for run in tests.runs)
    record_run = record.actions[2]
    assert isinstance(record_run, Run) and "--writable" not in record_run.argv
    assert f"{view.src}/.envbuild:/.envbuild" in record_run.argv


def test_labels_start_from_the_env_layers_file_and_no_sandbox_is_made() -> None:
    plan = plan_upper_build(layered_request())
    merge = next(a for step in plan.steps for a in step.actions if isinstance(a, MergeJson))
    assert merge.path.endswith("/upper/.singularity.d/labels.json")
    assert merge.base is not None and merge.base.endswith("/rootfs/.singularity.d/labels.json")
    after_env = render_build_plan(plan).split("## build 2.")[1]
    copies = [line for line in after_env.splitlines() if line.startswith("cp ")]
    assert copies == [f"cp -al {plan.sandbox} {plan.sandbox}-for-tests"]  # only the tests' view of the few upper files
    assert "/sandbox" not in after_env and "--writable" not in after_env


def test_merged_labels_keep_the_env_layers_labels_and_mode(tmp_path: Path) -> None:
    import json

    from envbuild.builder.execute.fsactions import merge_json

    below, above = tmp_path / "below.json", tmp_path / "upper/labels.json"
    below.write_text(json.dumps({"org.label-schema.build-date": "then", "org.envbuild.spec-name": "old"}))
    below.chmod(0o640)
    above.parent.mkdir()
    merge_json(None, None, MergeJson(str(above), (("org.envbuild.spec-name", "new"),), base=str(below)))  # type: ignore[arg-type]
    assert json.loads(above.read_text()) == {"org.label-schema.build-date": "then", "org.envbuild.spec-name": "new"}
    assert above.stat().st_mode & 0o777 == 0o640
    assert json.loads(below.read_text())["org.envbuild.spec-name"] == "old"  # the env layer's file is untouched
