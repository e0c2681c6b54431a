"""Model diagnosis (issue 24): agreement measures on constructed maps, a model compared with
itself (agreement 1, the figures of ``evaluate``/``localize``/``correspond``), the cascade of
re-initialized layers, and the randomization check on the shipped demo model."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from dmlviewer.core.explain.agreement import common_grid, hot_region, iou, peak_distance, spearman
from dmlviewer.core.progress import CancelToken, Cancelled, run_to_end

DEMO_CHECKPOINT = Path(__file__).resolve().parents[3] / "resources" / "demo_checkpoint.pt"


# --------------------------------------------------------------------------- measures

def _ramp(h: int, w: int) -> np.ndarray:
    rng = np.random.default_rng(h * 100 + w)
    return rng.normal(size=(h, w)).astype(np.float32)


def test_identical_maps_agree_fully():
    m = _ramp(5, 7)
    assert spearman(m, m) == pytest.approx(1.0)
    assert iou(m, m) == 1.0
    assert peak_distance(m, m) == 0.0


def test_reversed_map_has_spearman_minus_one():
    m = _ramp(6, 6)
    assert spearman(m, -m) == pytest.approx(-1.0)
    assert spearman(m, 10.0 - 3.0 * m) == pytest.approx(-1.0)  # any decreasing function of the values
    assert spearman(m, np.exp(m)) == pytest.approx(1.0)  # rank correlation: monotone maps agree fully


def test_spearman_matches_scipy_with_ties():
    from scipy.stats import spearmanr

    rng = np.random.default_rng(3)
    a = rng.integers(0, 4, size=(6, 6)).astype(np.float32)  # many ties
    b = a + rng.integers(0, 3, size=(6, 6))
    assert spearman(a, b) == pytest.approx(spearmanr(a.ravel(), b.ravel()).statistic)


def test_constant_map_has_no_rank_correlation():
    assert math.isnan(spearman(np.ones((4, 4)), _ramp(4, 4)))


def test_shifted_peak_distance_in_diagonals():
    a = np.zeros((4, 4), np.float32)
    b = np.zeros((4, 4), np.float32)
    a[0, 0] = b[3, 3] = 1.0  # cell centres (1/8, 1/8) and (7/8, 7/8): 3/4 of the diagonal
    assert peak_distance(a, b) == pytest.approx(0.75)
    c = np.zeros((4, 4), np.float32)
    c[0, 2] = 1.0  # two cells to the right on a 100 x 200 image: 100 px of a 223.6 px diagonal
    assert peak_distance(a, c, image_shape=(100, 200)) == pytest.approx(100 / math.hypot(100, 200))


def test_iou_of_thresholded_maps():
    a = np.zeros((2, 6), np.float32)
    b = np.zeros((2, 6), np.float32)
    a[0, 0:4] = 1.0
    b[0, 2:6] = 2.0
    assert iou(a, b) == pytest.approx(2 / 6)
    # the threshold is a fraction of each map's own maximum
    a[1, :] = 0.6
    assert iou(a, b, fraction=0.5) == pytest.approx(2 / 12)
    assert iou(a, b, fraction=0.7) == pytest.approx(2 / 6)
    assert not hot_region(-np.ones((3, 3))).any()  # no positive evidence: an empty region
    assert math.isnan(iou(-np.ones((3, 3)), -np.ones((3, 3))))


def test_different_grid_sizes():
    small = _ramp(4, 4)
    a, b = common_grid(small, np.zeros((8, 6), np.float32))
    assert a.shape == b.shape == (8, 6)  # the larger size in each direction
    from dmlviewer.core.explain.grid import upsample

    large = upsample(small, (8, 8))
    assert spearman(small, large) == pytest.approx(1.0)  # the same map on a finer grid
    assert iou(small, large) == pytest.approx(1.0)
    assert spearman(large, small) == pytest.approx(1.0)
    p4 = np.zeros((4, 4), np.float32)
    p8 = np.zeros((8, 8), np.float32)
    p4[1, 2] = 1.0  # centre (0.625, 0.375)
    p8[3, 5] = 1.0  # centre (0.6875, 0.4375)
    assert peak_distance(p4, p8) == pytest.approx(0.0625)


# --------------------------------------------------------------------------- a model with itself

@pytest.fixture(scope="module")
def tiny(tiny_demo_root, tmp_path_factory):
    from dmlviewer.core.data import open_dataset
    from dmlviewer.core.models import build_model, default_config, open_model, save_checkpoint

    folder = tmp_path_factory.mktemp("compare")
    torch.manual_seed(0)
    checkpoint = save_checkpoint(folder / "a.pt", build_model(default_config(backbone="small_cnn", dim=32, image_size=64)))
    torch.manual_seed(1)
    other = save_checkpoint(folder / "b.pt", build_model(default_config(backbone="small_cnn", dim=32, image_size=64)))
    open_ = (lambda path: open_model(path, torch.device("cpu"))[0].eval())  # noqa: E731
    return {"root": tiny_demo_root, "dataset": open_dataset(tiny_demo_root), "checkpoint": str(checkpoint),
            "a": open_(checkpoint), "a_again": open_(checkpoint), "b": open_(other)}


@pytest.fixture(scope="module")
def with_itself(tiny):
    from dmlviewer.core.explain.compare import compare_models

    return run_to_end(compare_models(tiny["a"], tiny["a_again"], tiny["dataset"], "test", pairs=4,
                                     localization_limit=6, correspondence_pairs=3))


def test_a_model_compared_with_itself_agrees_fully(with_itself):
    agreement = with_itself["agreement"]
    assert with_itself["num_pairs"] == 4
    assert agreement["overall_map_spearman"]["mean"] == pytest.approx(1.0)
    assert agreement["iou"]["mean"] == pytest.approx(1.0)
    assert agreement["peak_distance"]["mean"] == pytest.approx(0.0)
    assert agreement["point_to_point_spearman"]["mean"] == pytest.approx(1.0)
    for row in with_itself["pairs"]:
        assert row["similarity"][0] == pytest.approx(row["similarity"][1], abs=1e-6)
        assert row["nearest_same_class"][0] == row["nearest_same_class"][1]
    assert with_itself["retrieval_disagreements"] == []


def test_each_side_has_the_figures_of_evaluate_localize_and_correspond(tiny, with_itself):
    from dmlviewer.core.evaluate import evaluate
    from dmlviewer.core.explain import localize
    from dmlviewer.core.explain import methods as registry
    from dmlviewer.core.explain.correspondence import correspond

    metrics = run_to_end(evaluate(tiny["checkpoint"], tiny["root"], "test", None, num_workers=0))
    located = run_to_end(localize(tiny["a"], tiny["dataset"], registry.methods("diagnosis"), split="test", limit=6))
    parts = run_to_end(correspond(tiny["a"], tiny["dataset"], "test", 3))
    for entry in with_itself["models"]:
        assert entry["recall@1"] == pytest.approx(metrics["recall@1"])
        assert entry["map@r"] == pytest.approx(metrics["map@r"])
        for result in located:
            mine = entry["localization"][result["method"]]
            assert mine["thresholds"] == result["thresholds"]
            assert mine["accuracy"] == result["accuracy"]
            assert mine["best_accuracy"] == result["best_accuracy"]
        assert entry["part_correspondence"] == parts


def test_two_different_models_disagree_and_pairs_are_ranked(tiny):
    from dmlviewer.core.explain.compare import compare_models

    result = run_to_end(compare_models(tiny["a"], tiny["b"], tiny["dataset"], "both", pairs=4,
                                       localization_limit=2, correspondence_pairs=2))
    assert result["agreement"]["overall_map_spearman"]["mean"] < 0.99
    disagreement = [row["disagreement"] for row in result["pairs"]]
    assert disagreement == sorted(disagreement, reverse=True)
    assert [row["rank"] for row in result["pairs"]] == [1, 2, 3, 4]
    assert result["agreement"]["overall_map_spearman"]["per_pair"] == [row["overall_map_spearman"]
                                                                       for row in result["pairs"]]
    assert sorted(row["split"] for row in result["pairs"]) == ["test", "test", "train", "train"]
    assert set(result["models"][0]["by_split"]) == {"train", "test"}
    assert result["models"][0]["recall@1"] == result["models"][0]["by_split"]["test"]["recall@1"]
    for row in result["retrieval_disagreements"]:  # exactly one model has a same-class neighbour
        assert sorted(row["nearest_same_class"]) == [False, True]
        labels = tiny["dataset"].labels
        assert [labels[n] == labels[row["index"]] for n in row["nearest"]] == row["nearest_same_class"]


def test_comparison_can_be_cancelled(tiny):
    from dmlviewer.core.explain.compare import compare_models

    token = CancelToken()
    job = compare_models(tiny["a"], tiny["b"], tiny["dataset"], "test", pairs=4, cancel=token)
    token.cancel()
    with pytest.raises(Cancelled):
        run_to_end(job)


# --------------------------------------------------------------------------- the cascade

def test_cascade_randomizes_the_head_first_then_the_backbone_top_down(tiny):
    from dmlviewer.core.explain.randomization import cascade_steps, randomize_cascade

    import copy

    model = copy.deepcopy(tiny["a"])
    for name, module in model.named_modules():  # trained-looking statistics, to see them reset
        if isinstance(module, torch.nn.BatchNorm2d):
            module.running_mean.fill_(0.5)
            module.running_var.fill_(2.0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    steps = cascade_steps(model)
    assert [s.label for s in steps] == ["head.projection.out", "backbone.net.stages.3", "backbone.net.stages.2",
                                        "backbone.net.stages.1", "backbone.net.stages.0"]
    previous, previous_state = None, {}
    for step, twin in randomize_cascade(model, seed=0):
        state = twin.state_dict()
        for key, value in state.items():
            module = key.rsplit(".", 1)[0]
            changed = not torch.equal(value, before[key])
            if module in step.randomized and key.endswith("weight") and value.dim() > 1:
                assert changed, key
            if module not in step.randomized:
                assert not changed, key  # untouched below the cut
            if previous is not None and module in previous.randomized:
                assert torch.equal(value, previous_state[key]), key  # depths are nested
        previous, previous_state = step, {k: v.clone() for k, v in state.items()}
    bn = "backbone.net.stages.0.1"  # BatchNorm statistics are reset with their convolution
    assert torch.equal(previous_state[f"{bn}.running_mean"], torch.zeros_like(before[f"{bn}.running_mean"]))
    assert torch.equal(previous_state[f"{bn}.running_var"], torch.ones_like(before[f"{bn}.running_var"]))
    for key, value in model.state_dict().items():  # the trained model is never touched
        assert torch.equal(value, before[key])


def test_max_steps_keeps_the_head_alone(tiny):
    from dmlviewer.core.explain.randomization import cascade_steps

    steps = cascade_steps(tiny["a"], max_steps=3)
    assert len(steps) == 3 and steps[0].modules == ("head.projection.out",)
    assert steps[-1].randomized == tuple(n for s in cascade_steps(tiny["a"]) for n in s.modules)


@pytest.mark.skipif(not DEMO_CHECKPOINT.exists(), reason="the demo checkpoint is not shipped in this checkout")
def test_randomization_check_on_the_demo_model(tiny):
    """Decomposition loses its agreement with the trained model's maps once the head is
    re-initialized, and stays low as the backbone is re-initialized (3 pairs at 64 px: a 4 x 4
    grid; README "Model diagnosis" has the numbers at 128 px)."""
    from dmlviewer.core.explain.randomization import randomization_check
    from dmlviewer.core.models import open_model

    model, _ = open_model(str(DEMO_CHECKPOINT), torch.device("cpu"), size=64)
    result = run_to_end(randomization_check(model, tiny["dataset"], 3, ("decomposition", "occlusion"), "test"))
    assert [d["label"] for d in result["depths"]][:2] == ["head", "backbone.net.stages.3"]
    rho = [d["methods"]["decomposition"]["overall_map_spearman"]["mean"] for d in result["depths"]]
    assert all(r < 0.6 for r in rho), rho  # 1 is the trained model's agreement with itself
    assert np.mean(rho[1:]) < rho[0], rho  # the backbone's randomization takes away what the head left
    assert len(result["pairs"]) == 3 and all(len(p["randomized_similarity"]) == len(rho) for p in result["pairs"])
