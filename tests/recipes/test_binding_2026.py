"""LUMI-G's 2026 binding as recipe data: srun's own GPU binding (--gpu-bind=map with allow-task-sharing, from
the Slurm that has it) and torchrun's NUMA binding (from the torch the AI guide runs it with). What envrun
makes of them is in tests/launch/test_binding_choice.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from envbuild.recipes.loadrecipe import load_recipe, recipes_dir
from envbuild.shared.errors import UsageError


def test_lumi_g_states_the_user_guides_map_and_the_slurm_that_has_task_sharing() -> None:
    bind = load_recipe("lumi-g").launch.gpu_bind
    assert bind is not None
    assert ",".join(map(str, bind.map)) == "4,5,2,3,6,7,0,1"  # the LUMI user guide's map (lumi-userguide #277)
    assert bind.task_sharing_since == "23.11.4"  # SchedMD's 23.11 changelog
    numa = load_recipe("lumi-g").launch.numa_binding
    assert numa is not None and (numa.mode, numa.torch_since) == ("exclusive", "2.11")


def test_the_sources_are_cited_in_the_recipe() -> None:
    text = (recipes_dir() / "lumi-g.yaml").read_text()
    assert "lumi-userguide/pull/277" in text and "slurm-23.11.md" in text and "LUMI-AI-Guide/pull/100" in text
    assert "docs.pytorch.org/docs/2.11/elastic/numa.html" in text
    for tag in ("[bind26]", "[slurm2311]", "[numa]"):
        assert text.count(tag) >= 2, f"{tag} is defined and used"


def _recipe_with_map(tmp_path: Path, gpu_map: str) -> Path:
    text = (recipes_dir() / "lumi-g.yaml").read_text().replace("map: [4, 5, 2, 3, 6, 7, 0, 1]", f"map: {gpu_map}")
    (tmp_path / "lumi-g.yaml").write_text(text)
    return tmp_path


@pytest.mark.parametrize(("gpu_map", "message"), [
    ("[0, 1, 2, 3, 4, 5, 6, 7]", "does not follow node.gpu_cores"),  # task 0 on cores 1-7 would get GCD 0 (49-55)
    ("[4, 5, 2, 3, 6, 7, 0]", "must name each GPU 0..7 once"),
    ("[4, 4, 2, 3, 6, 7, 0, 1]", "must name each GPU 0..7 once"),
])
def test_a_map_that_does_not_fit_the_node_is_refused(tmp_path: Path, gpu_map: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        load_recipe("lumi-g", _recipe_with_map(tmp_path, gpu_map))


def test_versions_are_checked(tmp_path: Path) -> None:
    text = (recipes_dir() / "lumi-g.yaml").read_text().replace('task_sharing_since: "23.11.4"',
                                                             "task_sharing_since: twenty-three")
    (tmp_path / "lumi-g.yaml").write_text(text)
    with pytest.raises(UsageError, match="not a Slurm version"):
        load_recipe("lumi-g", tmp_path)
