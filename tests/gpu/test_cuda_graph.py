"""A pair's forward pass replayed from a CUDA graph (core.explain.cuda_graph) gives the eager
pass's numbers, for built-in models and for live modules (whose decomposition is a backward
pass through the head), follows weights changed in place or moved, and leaves earlier pairs
untouched. Marked ``gpu``; skipped without CUDA."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.slow,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _built(backbone: str = "small_cnn", **kw):
    from dmlviewer.core.models import build_model, default_config

    torch.manual_seed(0)
    return build_model(default_config(backbone=backbone, image_size=64, dim=32, **kw), "cuda").eval()


def _module(kind: str):
    from dmlviewer.core.models import open_model

    torch.manual_seed(0)
    if kind == "torchvision":
        import torchvision

        net = torchvision.models.resnet18(num_classes=64)
    else:
        timm = pytest.importorskip("timm")
        net = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=64, img_size=64)
    return open_model(net.eval(), "cuda", size=64)[0]


def _images(seed: int, shapes=((75, 100), (64, 64))):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (*s, 3), dtype=np.uint8) for s in shapes]


def _pair(model, q, r, replayed: bool = True, **kw):
    """The pair prepared with graphs replayed (recorded on the first call) or eagerly."""
    from dmlviewer.core.explain import cuda_graph, explain_pair

    with cuda_graph.replaying(replayed):
        return explain_pair(model, q, r, "cuda", **kw)


def _same(a, b, atol=1e-5):
    assert a.rule == b.rule and a.rule_detail == b.rule_detail
    assert a.similarity == pytest.approx(b.similarity, abs=atol)
    np.testing.assert_allclose(a.point_to_point, b.point_to_point, atol=atol)
    for side in ("query", "reference"):
        np.testing.assert_allclose(a.overall_grid("decomposition_bias", side), b.overall_grid("decomposition_bias", side),
                                   atol=atol)
        np.testing.assert_allclose(a.embedding(side), b.embedding(side), atol=atol)


MODELS = {
    "small_cnn": lambda: _built(),
    "small_cnn gmp grouping a": lambda: _built(pooling="gmp", grouping="a", groups=4),
    "resnet18": lambda: _built("resnet18"),
    "torchvision module": lambda: _module("torchvision"),
    "timm ViT module": lambda: _module("timm"),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_replayed_pairs_equal_the_eager_pass(name):
    from dmlviewer.core.explain import cuda_graph

    model = MODELS[name]()
    for seed in (0, 1, 2):  # the first records, the others replay
        q, r = _images(seed)
        replayed = _pair(model, q, r)
        _same(replayed, _pair(model, q, r, replayed=False))
        total = float(replayed.point_to_point.sum(dtype=np.float64)) + replayed.bias_query + \
            replayed.bias_reference + replayed.bias_both
        assert total == pytest.approx(replayed.similarity, abs=1e-5)  # Eq. 3
    states = list(cuda_graph.state(model).values())
    assert states == ["replayed 3 times"], states  # recorded, not fallen back


def test_an_earlier_pair_keeps_its_numbers_after_the_next_replay():
    model = _built()
    first = _pair(model, *_images(0))
    kept = (first.point_to_point.copy(), first.embedding("query").copy(), first.overall("gradcam", "query").copy())
    second = _pair(model, *_images(5))
    assert not np.allclose(second.point_to_point, kept[0])
    np.testing.assert_array_equal(first.point_to_point, kept[0])
    np.testing.assert_array_equal(first.embedding("query"), kept[1])
    # Grad-CAM is computed later, from the feature map the pair holds: still the first pair's
    np.testing.assert_allclose(first.overall("gradcam", "query"), kept[2], atol=1e-6)


def test_weights_changed_in_place_or_moved_are_followed():
    from dmlviewer.core.explain import cuda_graph

    model = _built()
    q, r = _images(0)
    _pair(model, q, r)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(0.9).add_(0.01)  # in place: the next replay reads the new values
    _same(_pair(model, q, r), _pair(model, q, r, replayed=False))
    model.to("cpu").to("cuda")  # new tensors: recorded again
    with torch.no_grad():
        next(model.parameters()).mul_(1.5)
    _same(_pair(model, q, r), _pair(model, q, r, replayed=False))
    assert list(cuda_graph.state(model).values()) == ["replayed 1 times"]


def test_pairs_of_two_input_sizes_and_a_size_change():
    from dmlviewer.core.explain import cuda_graph

    model = _built()
    q, r = _images(0)
    a = _pair(model, q, r, size=(64, 96))  # two batches of one
    b = _pair(model, q, r, size=96)
    assert a.grid_reference == b.grid_reference and a.grid_query != b.grid_query
    assert len(cuda_graph.state(model)) == 2  # the oldest shape made room
