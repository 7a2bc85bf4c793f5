"""The 2026 state of the site recipes (issue 19): LUMI-G as the LUMI AI Factory images run, and the GH200
(aarch64) systems CSC Roihu and JSC JUPITER. The facts themselves are cited in recipes/*.yaml."""

from __future__ import annotations

from envbuild.recipes.loadrecipe import load_recipe, recipes_dir


def test_lumi_g_forces_no_gdr_level_and_sets_the_mr_cache_monitor() -> None:
    recipe = load_recipe("lumi-g")
    assert "NCCL_NET_GDR_LEVEL" not in recipe.env  # hangs torch.distributed with the ROCm 7 LAIF images
    assert recipe.env["FI_MR_CACHE_MONITOR"] == "userfaultfd"
    assert recipe.pytorch.default_variant == "rocm7.0"


def test_the_dropped_gdr_level_stays_as_a_comment_with_its_sources() -> None:
    """A fact dropped upstream because it broke jobs stays in the file as a comment, so nobody adds it back."""
    text = (recipes_dir() / "lumi-g.yaml").read_text()
    comment = text[text.index("DROPPED UPSTREAM"):text.index("FI_MR_CACHE_MONITOR:")]
    assert "NCCL_NET_GDR_LEVEL" in comment and "DO NOT ADD BACK" in comment
    assert "#28" in comment and "#30" in comment and "PR #97" in comment and "[gdr]" in comment
    assert "instinct.docs.amd.com" in text and "#118" in text


def test_gh200_systems_are_aarch64_with_four_gpus_and_72_cores_each() -> None:
    for name, request in (("roihu", "--gres=gpu:gh200:{gpus}"), ("jupiter", "--gres=gpu:{gpus}")):
        recipe = load_recipe(name)
        assert recipe.architecture == "aarch64"
        assert (recipe.node.gpus, recipe.node.cores, recipe.node.cores_per_gpu) == (4, 288, 72)
        assert recipe.node.gpu_vendor == "nvidia" and recipe.runtime.flags == ("--nv",)
        assert recipe.launch.gpu_request == request
        assert recipe.network.fabric == "infiniband" and recipe.network.nccl_net == "IB"
        assert recipe.pytorch.default_variant == "cuda130"


def test_roihu_partitions_and_local_disk() -> None:
    recipe = load_recipe("roihu")
    assert list(recipe.partitions) == ["gpumedium", "gpularge", "gputest"]
    assert recipe.partitions["gpumedium"].max_nodes == 4 and recipe.partitions["gputest"].test
    assert recipe.batch.staging.dir == "$TMPDIR" and recipe.batch.staging.max_gb == 150
