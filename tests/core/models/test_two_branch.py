"""Two-branch (cross-view) models: each image through its own branch at its own input shape,
exact decompositions between two different grids, checkpoints and the Python door (issue 25)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from dmlviewer.core.data.transforms import Preprocess
from dmlviewer.core.explain import explain_pair
from dmlviewer.core.models import CheckpointError, ModelError, load_checkpoint, open_model, save_checkpoint
from dmlviewer.core.models.model import default_config
from dmlviewer.core.models.two_branch import TwoBranchModel, build_two_branch, check_two_branch_config

PANORAMA, AERIAL = (32, 128), (48, 48)  # a 1:4 street panorama against a square aerial image

#: every head type the decomposition has an exact rule for
HEADS = {
    "gap": {"pooling": "gap"},
    "gmp": {"pooling": "gmp"},
    "gem": {"pooling": "gem"},
    "flatten": {"pooling": "flatten"},
    "bn_hidden": {"pooling": "gap", "bn": True, "hidden": 16},
    "m_grouping": {"grouping": "m"},
    "g_grouping": {"grouping": "g"},
    "c_grouping": {"grouping": "c"},
    "a_grouping": {"grouping": "a"},
    "multilayer": {"multilayer": ["stage3"]},
}


def two_branch_config(head: dict, query_shape=PANORAMA, reference_shape=AERIAL) -> dict:
    branch = default_config(backbone="small_cnn", dim=16, groups=4, **head)
    return {"branches": {"query": branch, "reference": dict(branch)},
            "input_shapes": {"query": list(query_shape), "reference": list(reference_shape)}}


def make_two_branch(head: dict, seed: int = 0, **shapes) -> TwoBranchModel:
    """Random weights; BatchNorm given non-trivial statistics so that folding it is exercised."""
    torch.manual_seed(seed)
    model = build_two_branch(two_branch_config(head, **shapes))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.running_mean.copy_(torch.randn(m.num_features, generator=gen) * 0.3)
                m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
    return model.eval()


def images(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 256, (50, 200, 3), dtype=np.uint8),  # the panorama, 1:4
            rng.integers(0, 256, (70, 70, 3), dtype=np.uint8))


def branch_embedding(model: TwoBranchModel, side: str, rgb: np.ndarray) -> torch.Tensor:
    x = model.preprocess_of(side)(rgb)[None]
    with torch.no_grad():
        return model.branch(side)(x).embedding[0]


@pytest.mark.parametrize("name", sorted(HEADS))
def test_completeness_between_two_grids_for_every_head(name):
    """Eq. 3 of seed 000 holds exactly between the two branches' different feature grids."""
    model = make_two_branch(HEADS[name])
    q, r = images()
    e = explain_pair(model, q, r)
    assert e.rule == "exact"
    total = float(e.point_to_point.sum(dtype=np.float64)) + e.bias_query + e.bias_reference + e.bias_both
    assert total == pytest.approx(e.similarity, abs=1e-5)
    # each image went through its own branch at its own input shape
    eq, er = branch_embedding(model, "query", q), branch_embedding(model, "reference", r)
    assert e.similarity == pytest.approx(float(eq @ er), abs=1e-5)
    np.testing.assert_allclose(e.embedding("query"), eq.numpy(), atol=1e-5)
    np.testing.assert_allclose(e.embedding("reference"), er.numpy(), atol=1e-5)
    hq, wq = e.grid_query
    assert wq == 4 * hq and e.grid_reference[0] == e.grid_reference[1]  # the panorama's grid is 1:4
    assert e.point_to_point_4d().shape == (*e.grid_query, *e.grid_reference)


def test_branches_have_separate_weights():
    """The reference branch is not the query branch: swapping them changes the similarity."""
    model = make_two_branch(HEADS["gap"], query_shape=AERIAL)
    q, r = images()
    swapped = TwoBranchModel(model.reference, model.query, input_shapes=model.input_shapes).eval()
    assert explain_pair(model, q, r).similarity != pytest.approx(explain_pair(swapped, q, r).similarity, abs=1e-4)


@pytest.mark.parametrize("shapes", [((32, 128), (48, 48)), ((48, 48), (32, 64)), ((40, 40), (56, 56))])
def test_partial_maps_and_matches_across_shapes(shapes):
    """Hover (partial maps both ways), matches and the groups' tensors work between images and
    grids of different shapes."""
    model = make_two_branch(HEADS["m_grouping"], query_shape=shapes[0], reference_shape=shapes[1])
    q, r = images(1)
    e = explain_pair(model, q, r)
    assert e.partial_map("query", 10.0, 20.0).shape == tuple(e.grid_reference)
    assert e.partial_map("reference", 30.0, 5.0).shape == tuple(e.grid_query)
    assert e.partial_map_image("query", 10.0, 20.0).shape == r.shape[:2]
    groups = sum(e.group_point_to_point(p) for p in range(e.num_groups))
    np.testing.assert_allclose(groups, e.point_to_point, atol=1e-6)
    assert e.correspondences(3)


def test_explain_pair_size_override_per_branch():
    model = make_two_branch(HEADS["gap"])
    q, r = images()
    e = explain_pair(model, q, r, size=((16, 64), 32))
    assert e.grid_query[1] == 4 * e.grid_query[0]
    assert e.grid_query[0] < explain_pair(model, q, r).grid_query[0]


def test_gradcam_uses_each_sides_branch():
    model = make_two_branch(HEADS["gap"])
    q, r = images()
    e = explain_pair(model, q, r)
    assert e.overall_grid("gradcam", "query").shape == tuple(e.grid_query)
    assert e.overall_grid("gradcam", "reference").shape == tuple(e.grid_reference)


def test_checkpoint_round_trip(tmp_path):
    model = make_two_branch(HEADS["flatten"])
    path = save_checkpoint(tmp_path / "two.pt", model)
    data = torch.load(path, weights_only=True)
    assert set(data["config"]["branches"]) == {"query", "reference"}
    assert data["config"]["input_shapes"] == {"query": list(PANORAMA), "reference": list(AERIAL)}
    assert all(k.startswith(("query.", "reference.")) for k in data["state_dict"])
    loaded, info = load_checkpoint(path)
    assert isinstance(loaded, TwoBranchModel)
    q, r = images()
    assert explain_pair(loaded, q, r).similarity == pytest.approx(explain_pair(model, q, r).similarity, abs=1e-6)
    opened, info = open_model(str(path))
    assert isinstance(opened, TwoBranchModel) and info["source"] == "checkpoint"


def test_checkpoint_with_a_bad_branch_config_is_one_line(tmp_path):
    model = make_two_branch(HEADS["gap"])
    path = save_checkpoint(tmp_path / "two.pt", model)
    data = torch.load(path, weights_only=True)
    data["config"]["branches"]["reference"]["dim"] = 8
    torch.save(data, tmp_path / "bad.pt")
    with pytest.raises(CheckpointError, match="one space"):
        load_checkpoint(tmp_path / "bad.pt")
    data["config"]["input_shapes"]["query"] = [32, 999999]
    torch.save(data, tmp_path / "bad2.pt")
    with pytest.raises(CheckpointError, match="query branch"):
        load_checkpoint(tmp_path / "bad2.pt")


def test_config_checks():
    with pytest.raises(ValueError, match="exactly"):
        check_two_branch_config({"branches": {"query": {}}})
    with pytest.raises(ValueError, match="unknown"):
        check_two_branch_config({**two_branch_config({}), "extra": 1})
    config = check_two_branch_config(two_branch_config({}))
    assert config["branches"]["query"]["image_size"] == max(PANORAMA)


class _Net(nn.Module):
    """A user's small embedding network (conv features, GAP, linear)."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(),
                                      nn.Conv2d(8, 8, 3, stride=2, padding=1), nn.ReLU())
        self.fc = nn.Linear(8, 12)

    def forward(self, x):
        return self.fc(self.features(x).mean((2, 3)))


def test_python_door_with_two_modules():
    import dmlviewer

    q_net, r_net = _Net(0), _Net(1)
    r_net.train()
    q, r = images()
    e = dmlviewer.explain((q_net, r_net), q, r, feature_layer="features", size=((32, 128), 48))
    # both modules handed back as they came: no hooks left, the reference still in training mode
    assert not any(m._forward_hooks or m._forward_pre_hooks for net in (q_net, r_net) for m in net.modules())
    assert r_net.training and all(m.training for m in r_net.modules())
    r_net.eval()
    assert e.rule == "exact"
    assert e.grid_query == (8, 32) and e.grid_reference == (12, 12)
    assert e.completeness_error < 1e-5
    with torch.no_grad():
        eq = nn.functional.normalize(q_net(Preprocess(48, shape=(32, 128))(q)[None]), dim=1)[0]
        er = nn.functional.normalize(r_net(Preprocess(48)(r)[None]), dim=1)[0]
    assert e.similarity == pytest.approx(float(eq @ er), abs=1e-5)


def test_python_door_refuses_branches_of_different_dims():
    class Wide(_Net):
        def __init__(self) -> None:
            super().__init__(2)
            self.fc = nn.Linear(8, 5)

    with pytest.raises(ModelError, match="one space"):
        open_model((_Net(0), Wide()), feature_layer="features")


def test_preprocess_rectangular_shape_keeps_square_path():
    rgb = np.random.default_rng(0).integers(0, 256, (30, 50, 3), dtype=np.uint8)
    square = Preprocess(40)
    assert tuple(square(rgb).shape) == (3, 40, 40)
    wide = Preprocess(40, shape=(16, 64))
    assert tuple(wide(rgb).shape) == (3, 16, 64)
    assert tuple(wide(rgb, 24).shape) == (3, 24, 24)
    assert tuple(wide(rgb, (8, 32)).shape) == (3, 8, 32)
    assert wide.input_shape == (16, 64) and square.input_shape == (40, 40)
    with pytest.raises(ValueError, match="height, width"):
        Preprocess(40, shape=(4, 64))


def test_two_single_branch_checkpoints_open_as_one_two_branch_model(tmp_path):
    """Two weights files, one per branch (e.g. trained elsewhere): a (query, reference) pair of paths."""
    model = make_two_branch(HEADS["gap"])
    save_checkpoint(tmp_path / "q.pt", model.query)
    save_checkpoint(tmp_path / "r.pt", model.reference)
    opened, info = open_model((str(tmp_path / "q.pt"), str(tmp_path / "r.pt")), size=(PANORAMA, None))
    assert isinstance(opened, TwoBranchModel) and info["source"] == "checkpoint"
    assert opened.input_shapes == {"query": PANORAMA, "reference": (max(AERIAL), max(AERIAL))}
    q, r = images()
    e = explain_pair(opened, q, r)
    assert e.similarity == pytest.approx(float(branch_embedding(model, "query", q)
                                               @ branch_embedding(model, "reference", r)), abs=1e-5)
