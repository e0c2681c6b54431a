"""The one method registry (issue 30 item 5): every place that offers methods offers the
registry's rows for its use, and every offered method is one the core computes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dmlviewer.core.explain import methods as registry
from dmlviewer.core.models import build_model, default_config

SIZE = 48


@pytest.fixture(scope="module")
def pair():
    from dmlviewer.core.explain import GradWeightBank, explain_pair

    torch.manual_seed(0)
    model = build_model(default_config(backbone="small_cnn", dim=16, image_size=SIZE)).eval()
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (SIZE, SIZE, 3), dtype=np.uint8) for _ in range(2)]
    out = model(torch.rand(3, 3, SIZE, SIZE))
    bank = GradWeightBank(out.embedding.detach().numpy(), np.random.default_rng(1).normal(
        size=(3, out.feature_map.shape[1])).astype(np.float32), k=1)
    return model, explain_pair(model, images[0], images[1], grad_bank=bank)


def test_every_explain_method_is_computed_on_both_sides(pair):
    _, expl = pair
    for key in registry.methods("explain"):
        for side in ("query", "reference"):
            grid = expl.overall_grid(key, side)
            assert grid.shape == tuple(expl.grid_query if side == "query" else expl.grid_reference)
            assert np.isfinite(grid).all() and np.abs(grid).max() > 0, (key, side)
    with pytest.raises(ValueError, match="choose from decomposition, decomposition_bias, gradcam"):
        expl.overall_grid("occlusion", "query")  # not built in: served only once added


def test_the_gradcam_use_is_what_one_backward_pass_computes(pair):
    from dmlviewer.core.explain.decomposition import head_function
    from dmlviewer.core.explain.gradcam import gradcam_maps

    model, expl = pair
    side = expl._sides["query"]
    maps = gradcam_maps(head_function(model, side.out, side.index), side.out.feature_map[:1],
                        expl._sides["reference"].embedding_raw)
    assert tuple(k for k in maps if not k.startswith("weights_")) == registry.methods("gradcam")


def test_faithfulness_maps_follow_the_registry(pair):
    from tiny_two_branch import tiny_two_branch

    from dmlviewer.core.explain.faithfulness import available_methods

    model, _ = pair
    assert available_methods(model) == list(registry.methods("faithfulness"))
    two = available_methods(tiny_two_branch([32, 64], 32, 0, pooling="gap"))
    assert "grad_transfer" not in two and two == [m for m in registry.methods("faithfulness")
                                                  if m in registry.methods("two_branch")]


def test_randomization_check_offers_the_sanity_check_use(tiny_demo_root):
    from dmlviewer.core.data import open_dataset
    from dmlviewer.core.explain.randomization import randomization_check
    from dmlviewer.core.progress import run_to_end

    model = build_model(default_config(backbone="small_cnn", dim=8, image_size=32)).eval()
    with pytest.raises(ValueError) as caught:
        run_to_end(randomization_check(model, open_dataset(tiny_demo_root), 1, ["grad_transfer"]))
    assert str(caught.value).endswith("choose from " + ", ".join(registry.methods("sanity_check")))


@pytest.mark.parametrize("argv, offered", [
    (["compare", "--method", "grad_transfer"], "compare"),
    (["compare", "--randomize", "--method", "nonsense"], "sanity_check"),
    (["localize", "--method", "nonsense"], "explain"),
])
def test_commands_refuse_with_the_registry_choices(argv, offered, tiny_demo_root, capsys):
    from dmlviewer.cli import main

    model = ["--checkpoint", "c.pt"] if argv[0] == "localize" else ["--checkpoint", "a.pt", "--checkpoint", "b.pt"]
    if "--randomize" in argv:
        model = ["--checkpoint", "a.pt"]
    assert main([*argv, *model, "--dataset", str(tiny_demo_root)]) == 2
    err = capsys.readouterr().err
    assert ", ".join(registry.methods(offered)) in err and len(err.strip().splitlines()) == 1, err


def test_labels_and_keys_are_unique_and_every_use_is_offered():
    keys = [m.key for m in registry.REGISTRY]
    labels = [m.label for m in registry.REGISTRY]
    assert len(set(keys)) == len(keys) and len(set(labels)) == len(labels)
    uses = {use for m in registry.REGISTRY for use in m.uses}
    assert {"explain", "pair_view", "compare_row", "sanity_check", "faithfulness", "python", "diagnosis", "compare",
            "gradcam", "two_branch", "localization_checked"} == uses
    assert set(registry.methods("python")) <= set(registry.methods("explain"))  # the Python door explains them
    assert set(registry.methods("localization_checked")) <= set(registry.methods("explain"))
