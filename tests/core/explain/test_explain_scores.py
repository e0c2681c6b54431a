"""Grad-weight transfer, the localization protocol and part correspondence on the tiny
synthetic parts dataset (small_cnn, random weights)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dmlviewer.core.data import load_image, open_dataset
from dmlviewer.core.explain import (
    GradWeightBank,
    compute_grad_weights,
    correspond,
    explain_pair,
    localize,
)
from dmlviewer.core.explain.pair import PairExplanation
from dmlviewer.core.models import build_model, default_config
from dmlviewer.core.progress import run_to_end


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build_model(default_config(backbone="small_cnn", pooling="gmp", hidden=32, dim=16, image_size=64)).eval()


@pytest.fixture(scope="module")
def dataset(tiny_demo_root):
    return open_dataset(tiny_demo_root)


def test_grad_transfer_equals_mean_gradcam_over_positives(model, dataset):
    """Seed 002: a bank image's transferred map (its own weights, k=1) is the Grad-CAM (no norm)
    map averaged over the same-class pairs its weights came from (linearity in the weights)."""
    one_class = dataset.subset(np.flatnonzero(dataset.labels == dataset.labels[0]))
    assert len(one_class) == 4
    result = run_to_end(compute_grad_weights(model, one_class, positives=3))
    weights, emb = result["weights"], result["embeddings"]
    assert weights.shape == (4, 128) and np.isfinite(weights).all()
    bank = GradWeightBank(emb, weights, k=1)
    images = [load_image(one_class.abspath(i)) for i in range(4)]
    i = 2
    maps = [explain_pair(model, images[i], images[j]).overall_grid("gradcam_nonorm", "query") for j in range(4) if j != i]
    pair = explain_pair(model, images[i], images[0], grad_bank=bank)
    np.testing.assert_array_equal(bank.weights_for(pair.embedding("query")), weights[i])
    np.testing.assert_allclose(pair.overall_grid("grad_transfer", "query"), np.mean(maps, axis=0), rtol=1e-4, atol=1e-7)
    # k nearest: the mean of the k most similar bank rows
    sims = emb @ emb[1]
    nearest = np.argsort(-sims)[:2]
    np.testing.assert_allclose(bank.weights_for(emb[1], k=2), weights[nearest].mean(0), rtol=1e-6)
    with pytest.raises(ValueError, match="grad_transfer needs"):
        explain_pair(model, images[0], images[1]).overall("grad_transfer", "query")


def test_localize_protocol_with_known_maps(model, dataset, monkeypatch):
    """Maps equal to the ground-truth box give accuracy 1 at every threshold; maps that light
    up the complement of the box give 0."""
    import dmlviewer.core.explain.localization as loc

    test_idx = iter(dataset.indices("test"))  # localize visits the split in order
    current = {}

    def explain_and_track(*args, **kwargs):
        current["box"] = dataset.boxes[next(test_idx)]
        return explain_pair(*args, **kwargs)

    def box_map(self, method, side, sign="signed"):
        x, y, w, h = (int(v) for v in current["box"])
        inside = np.zeros(self.image_shape_query, np.float32)
        inside[y : y + h, x : x + w] = 1.0
        return inside if method == "decomposition" else 1.0 - inside

    monkeypatch.setattr(loc, "explain_pair", explain_and_track)
    monkeypatch.setattr(PairExplanation, "overall", box_map)
    result = run_to_end(localize(model, dataset, ["decomposition", "decomposition_bias"], [0.1, 0.5, 0.9]))
    by_method = {r["method"]: r for r in result}
    assert by_method["decomposition"]["accuracy"] == [1.0, 1.0, 1.0]
    assert by_method["decomposition_bias"]["accuracy"] == [0.0, 0.0, 0.0]
    assert by_method["decomposition"]["num_images"] == len(dataset.indices("test"))
    assert set(by_method["decomposition"]) == {
        "method", "pairing", "thresholds", "accuracy", "best_threshold", "best_accuracy", "num_images"}


@pytest.mark.parametrize("pairing", ["nearest", "same-class"])
def test_localize_runs_every_method_and_pairing(model, dataset, pairing):
    methods = ["decomposition", "decomposition_bias", "gradcam", "gradcam_nonorm", "rgradcam", "grad_transfer"]
    result = run_to_end(localize(model, dataset, methods, [0.2, 0.5], pairing=pairing, limit=4))
    assert [r["method"] for r in result] == methods
    for r in result:
        assert r["pairing"] == pairing and r["num_images"] == 4
        assert all(0.0 <= a <= 1.0 for a in r["accuracy"]) and len(r["accuracy"]) == 2
        assert r["best_accuracy"] == max(r["accuracy"])


def test_correspond_counts_and_baseline_bound(model, dataset):
    from dmlviewer.core.data import load_part_masks
    from dmlviewer.core.explain.correspondence import same_class_pairs

    result = run_to_end(correspond(model, dataset, split="test", max_pairs=6))
    assert set(result) == {"partial_map_accuracy", "overall_map_accuracy", "num_pairs", "num_parts",
                           "chance_accuracy", "matches_on_object", "matches_same_part", "matches_score_on_object",
                           "group_diversity"}
    assert result["num_pairs"] == 6
    assert result["num_parts"] == 3 * 6  # head, body and tail in every demo image
    # the overall map has one peak per pair and the parts are disjoint: at most 1 hit in 3
    assert result["overall_map_accuracy"] <= 1 / 3 + 1e-9
    assert 0.0 <= result["partial_map_accuracy"] <= 1.0
    # chance: the mean share of the reference image that the part covers
    areas = [float(mask.mean()) for _, r in same_class_pairs(dataset, "test", 6, 0)
             for mask in load_part_masks(dataset, r).values()]
    assert result["chance_accuracy"] == pytest.approx(np.mean(areas))
    assert 0.0 <= result["matches_same_part"] <= result["matches_on_object"] <= 1.0
    assert 0.0 <= result["matches_score_on_object"] <= 1.0
    assert result["group_diversity"] is None  # no grouping head


class _GroupedPair:
    """What group_diversity reads from a PairExplanation, with chosen group tensors."""

    def __init__(self, tensors, grid=(2, 2)):
        self.tensors = [np.asarray(t, dtype=np.float32) for t in tensors]
        self.num_groups = len(tensors)
        self.grid_query = self.grid_reference = grid

    def group_point_to_point(self, p):
        return self.tensors[p]


def test_group_diversity_is_zero_for_identical_maps_and_one_for_disjoint_ones():
    from dmlviewer.core.explain.groups import group_diversity, group_maps

    rng = np.random.default_rng(0)
    same = rng.random((4, 4))
    assert group_diversity(_GroupedPair([same, 2 * same, 0.5 * same])) == pytest.approx([0.0, 0.0], abs=1e-6)
    # group p supports only query cell p and reference cell p: disjoint maps on both sides
    disjoint = [np.diag(np.eye(4)[p]) for p in range(4)]
    assert group_diversity(_GroupedPair(disjoint)) == pytest.approx([1.0, 1.0])
    # the maps are the group tensors summed over the other image, and add up to the total
    pair = _GroupedPair([rng.normal(size=(4, 4)) for _ in range(3)])
    np.testing.assert_allclose(group_maps(pair, "query").sum(0).ravel(), sum(pair.tensors).sum(1), rtol=1e-5)
    np.testing.assert_allclose(group_maps(pair, "reference")[1].ravel(), pair.tensors[1].sum(0), rtol=1e-6)
    # negative parts do not count: a group that only opposes has no map and is left out
    only_negative = [np.ones((4, 4)), np.ones((4, 4)), -np.ones((4, 4))]
    assert group_diversity(_GroupedPair(only_negative)) == pytest.approx([0.0, 0.0], abs=1e-6)
