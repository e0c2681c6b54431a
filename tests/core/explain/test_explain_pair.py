"""PairExplanation on real models (small_cnn, random weights): completeness of Eq. 3 for every
head the models package builds, the Grad-CAM relations of seed 000 Sec. 4.3, group tensors,
partial maps, cross-view sizes, image conversions and the generic fallback."""

from __future__ import annotations

import itertools
import logging

import numpy as np
import pytest
import torch

from dmlviewer.core.data import to_tensor
from dmlviewer.core.explain import decompose, explain_pair, head_function, region_feature, region_query
from dmlviewer.core.explain import decomposition as decomposition_module
from dmlviewer.core.explain.grid import grid_to_pixel, upsample
from dmlviewer.core.models.jacobian import jacobian_decomposition
from dmlviewer.core.models import build_model, default_config
from dmlviewer.core.models.heads import Head, _output

SIZE = 48  # small_cnn: stride 16 -> 3 x 3 grid


def _model(**cfg) -> torch.nn.Module:
    torch.manual_seed(cfg.pop("seed", 0))
    model = build_model(default_config(backbone="small_cnn", dim=cfg.pop("dim", 24), groups=4, image_size=SIZE, **cfg))
    for m in model.modules():  # non-trivial eval statistics so folded BatchNorm matters
        if isinstance(m, torch.nn.BatchNorm1d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    return model.eval()


def _images(seed=0, shapes=((50, 70), (90, 40))):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (*s, 3), dtype=np.uint8) for s in shapes]


def _check_completeness(pair, tol=2e-5):
    total = float(pair.point_to_point.astype(np.float64).sum()) + pair.bias_query + pair.bias_reference + pair.bias_both
    assert total == pytest.approx(pair.similarity, abs=tol)
    p = pair.point_to_point.astype(np.float64)
    for side, axis, bias in (("query", 1, pair.bias_query), ("reference", 0, pair.bias_reference)):
        np.testing.assert_allclose(pair.overall_grid("decomposition", side).ravel(), p.sum(axis), atol=1e-5)
        assert float(pair.overall_grid("decomposition_bias", side).sum()) == pytest.approx(p.sum() + bias, abs=tol)


HEADS = [
    dict(pooling=pooling, grouping=grouping, hidden=hidden, bn=bn)
    for pooling, grouping, (hidden, bn) in itertools.product(
        ("gap", "gmp", "gem", "flatten"), ("none", "m", "g", "c", "a"), ((0, False), (16, True))
    )
] + [dict(pooling="gap", multilayer=["stage2", "stage3"]), dict(pooling="gmp", multilayer=["stage3"], hidden=16)]


@pytest.mark.parametrize("cfg", HEADS, ids=lambda c: "-".join(f"{v}" for v in c.values()))
def test_completeness_for_every_head(cfg):
    model = _model(**cfg)
    a, b = _images()
    pair = explain_pair(model, a, b)
    _check_completeness(pair)
    with torch.no_grad():
        out = model(torch.stack([to_tensor(a, SIZE), to_tensor(b, SIZE)]))
    assert pair.similarity == pytest.approx(float(out.embedding[0] @ out.embedding[1]), abs=1e-5)
    assert pair.point_to_point.shape == (9, 9) and pair.point_to_point.flags.c_contiguous
    assert pair.overall("decomposition", "query").shape == (50, 70)
    assert pair.overall("decomposition_bias", "reference").shape == (90, 40)
    # group tensors (one per group; the whole tensor for no grouping) sum to the whole
    total = sum(pair.group_point_to_point(p).astype(np.float64) for p in range(pair.num_groups))
    np.testing.assert_allclose(total, pair.point_to_point, atol=1e-6)
    if cfg.get("grouping", "none") != "none":
        assert pair.num_groups == 4


@pytest.mark.parametrize(
    "cfg",
    [dict(pooling=p, hidden=h, bn=bn) for p in ("gap", "gmp", "flatten") for h, bn in ((0, False), (16, True))]
    + [dict(pooling="gmp", grouping="m", hidden=16)],
    ids=lambda c: "-".join(f"{v}" for v in c.values()),
)
def test_jacobian_fallback_matches_exact_rule_of_models(cfg):
    model = _model(**cfg)
    x = torch.stack([to_tensor(im, SIZE) for im in _images(1)])
    with torch.no_grad():
        out = model(x)
    lin = model.linearize(out)
    for i in range(2):
        fmap = out.feature_map[i : i + 1]
        c, b = jacobian_decomposition(head_function(model, out, i), fmap, budget=7 * fmap.numel() * 4)
        torch.testing.assert_close(c, lin.contributions[i], atol=2e-5, rtol=1e-4)
        torch.testing.assert_close(b, lin.bias[i], atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize(
    "cfg", [dict(pooling=p, hidden=h, bn=bn) for p in ("gap", "gmp", "flatten") for h, bn in ((0, False), (16, True))],
    ids=lambda c: "-".join(f"{v}" for v in c.values()),
)
def test_rgradcam_equals_decomposition_bias_and_gradcam_differs_for_gmp(cfg):
    model = _model(**cfg)
    pair = explain_pair(model, *_images(2))
    for side in ("query", "reference"):
        rgrad = pair.overall_grid("rgradcam", side)
        dbias = pair.overall_grid("decomposition_bias", side)
        np.testing.assert_allclose(rgrad, dbias, atol=1e-6 + 1e-4 * np.abs(dbias).max())
        nonorm = pair.overall_grid("gradcam_nonorm", side)
        gap = np.abs(nonorm - dbias).max()
        if cfg["pooling"] == "gap":
            assert gap <= 1e-6 + 1e-4 * np.abs(dbias).max()
        else:
            assert gap > 1e-3 * np.abs(dbias).max()
        assert pair.overall("gradcam", side).shape == pair.overall("decomposition", side).shape


def test_partial_map_at_cell_centre_is_a_row_of_the_tensor():
    model = _model(pooling="gap")
    a, b = _images(3)
    pair = explain_pair(model, a, b)
    (hq, wq), (hr, wr) = pair.grid_query, pair.grid_reference
    for i, j in itertools.product(range(hq), range(wq)):
        x, y = grid_to_pixel(j, 70, wq), grid_to_pixel(i, 50, hq)
        np.testing.assert_allclose(pair.partial_map("query", x, y).ravel(), pair.point_to_point[i * wq + j], atol=1e-7)
    x, y = grid_to_pixel(2, 40, wr), grid_to_pixel(1, 90, hr)
    np.testing.assert_allclose(pair.partial_map("reference", x, y).ravel(), pair.point_to_point[:, 1 * wr + 2], atol=1e-7)
    # between cells: consistent with upsampling the tensor's query axes (cv2 INTER_LINEAR)
    x, y = 33, 17
    cube = pair.point_to_point.T.reshape(hr * wr, hq, wq)
    expect = np.array([upsample(cube[k], (50, 70))[y, x] for k in range(hr * wr)])
    np.testing.assert_allclose(pair.partial_map("query", x, y).ravel(), expect, atol=1e-6)
    assert pair.partial_map_image("query", x, y).shape == (90, 40)
    # the shares of all cell centres add up to sum(P) / similarity
    shares = sum(pair.share("query", grid_to_pixel(j, 70, wq), grid_to_pixel(i, 50, hq))
                 for i, j in itertools.product(range(hq), range(wq)))
    assert shares == pytest.approx(float(pair.point_to_point.sum()) / pair.similarity, rel=1e-4)
    # hover renderer rows agree with partial_map
    r = pair.hover_renderer("reference", shape=(30, 20))
    np.testing.assert_allclose(r.grid_map(10.0, 60.0), pair.partial_map("reference", 10.0, 60.0), atol=1e-7)
    assert r.render(10.0, 60.0).shape == (30, 20, 4)


@pytest.mark.parametrize("point", [(-3.0, 10.0), (10.0, 50.0), (70.0, 1.0), (np.inf, 0.0)])
def test_points_outside_the_image_raise_value_error(point):
    pair = explain_pair(_model(pooling="gap"), *_images(4))
    for call in (pair.partial_map, pair.partial_map_image, pair.share):
        with pytest.raises(ValueError):
            call("query", *point)
    with pytest.raises(ValueError, match="side"):
        pair.partial_map("left", 1.0, 1.0)


def test_cross_view_input_sizes_give_different_grids():
    model = _model(pooling="gmp", hidden=16)
    a, b = _images(5, shapes=((60, 60), (40, 120)))
    pair = explain_pair(model, a, b, size=(SIZE, 2 * SIZE))
    assert pair.grid_query == (3, 3) and pair.grid_reference == (6, 6)
    assert pair.point_to_point.shape == (9, 36)
    _check_completeness(pair)
    assert pair.partial_map("query", 10.0, 10.0).shape == (6, 6)
    assert pair.partial_map("reference", 100.0, 30.0).shape == (3, 3)
    assert pair.point_to_point_4d().shape == (3, 3, 6, 6)
    assert len(pair.correspondences(5)) >= 1


def test_grayscale_and_rgba_inputs():
    model = _model(pooling="gap")
    a, b = _images(6)
    gray = a[..., 0]
    rgba = np.dstack([b, np.full(b.shape[:2], 255, np.uint8)])
    p1 = explain_pair(model, gray, rgba)
    p2 = explain_pair(model, np.dstack([gray] * 3), b)
    np.testing.assert_allclose(p1.point_to_point, p2.point_to_point, atol=1e-6)
    half = np.dstack([b, np.full(b.shape[:2], 0, np.uint8)])  # fully transparent: white
    p3 = explain_pair(model, gray, half)
    p4 = explain_pair(model, gray, np.full_like(b, 255))
    np.testing.assert_allclose(p3.point_to_point, p4.point_to_point, atol=1e-6)
    with pytest.raises(ValueError):
        explain_pair(model, a.astype(np.float32), b)


class _TanhHead(Head):
    """GAP -> Linear -> tanh: no exact rule (tanh is not piecewise linear)."""

    def __init__(self, channels: int, dim: int) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(channels, dim)
        self.dim = dim

    def forward(self, features):
        a = features["last"]
        return _output(torch.tanh(self.fc(a.mean((2, 3)))), a)


def test_fallback_for_a_head_without_exact_rule_warns_once(caplog):
    model = _model(pooling="gap")
    model.head = _TanhHead(128, 10)
    decomposition_module._warned.discard("_TanhHead")
    a, b = _images(7)
    with caplog.at_level(logging.WARNING, logger="dmlviewer.core.explain.decomposition"):
        pair = explain_pair(model, a, b)
        explain_pair(model, b, a)
    warnings = [r for r in caplog.records if "no exact decomposition rule" in r.getMessage()]
    assert len(warnings) == 1 and "_TanhHead" in warnings[0].getMessage()
    _check_completeness(pair)
    # the fallback is the first-order decomposition: for a GAP head the contributions are
    # tanh'(z) * W A_ij / hw
    x = torch.stack([to_tensor(a, SIZE)])
    with torch.no_grad():
        out = model(x)
        z = model.head.fc(out.feature_map.mean((2, 3)))[0]
        per_pos = out.feature_map[0].flatten(1).T / 9
        expect = (per_pos @ model.head.fc.weight.T) * (1 - torch.tanh(z) ** 2)
    torch.testing.assert_close(decompose(model, out).contributions[0], expect, atol=1e-5, rtol=1e-4)


def test_attention_maps_are_resized_per_group_and_layer():
    pair = explain_pair(_model(grouping="a"), *_images(8))
    maps = pair.attention_maps("reference")
    assert maps["a_grouping"].shape == (4, 90, 40)
    assert maps["random_walk"].shape == (1, 90, 40)
    ml = explain_pair(_model(pooling="gap", multilayer=["stage2", "stage3"]), *_images(8)).attention_maps("query")
    assert ml["multilayer/stage2"].shape == (1, 50, 70) and ml["multilayer/stage3"].shape == (1, 50, 70)
    # softmax attention sums to one on the grid; bilinear upsampling keeps the mean
    assert float(maps["a_grouping"][0].mean()) == pytest.approx(1 / 9, rel=0.2)


def test_region_feature_is_additive_and_ranks_by_cosine():
    model = _model(pooling="gmp", hidden=16)
    a, b = _images(9)
    whole = region_feature(model, a, (0, 0, 50, 70))
    top = region_feature(model, a, (0, 0, 20, 70))
    bottom = region_feature(model, a, (20, 0, 50, 70))
    np.testing.assert_allclose(top + bottom, whole, atol=1e-5)
    with torch.no_grad():
        lin = decompose(model, model(to_tensor(a, SIZE)[None]))
    np.testing.assert_allclose(whole, lin.contributions[0].sum(0).numpy(), atol=1e-5)

    class _Stored:  # the attributes region_query reads from dmlviewer.core.evaluate.Features
        pass

    rng = np.random.default_rng(0)
    stored = rng.normal(size=(5, whole.shape[0])).astype(np.float32)
    stored[3] = top + 0.01 * stored[3]
    stored /= np.linalg.norm(stored, axis=1, keepdims=True)
    feats = _Stored()
    feats.embeddings, feats.paths, feats.labels = stored, [f"im{i}.png" for i in range(5)], np.arange(5)
    results = region_query(model, a, (0, 0, 20, 70), feats, k=3)
    assert [r["index"] for r in results][0] == 3 and len(results) == 3
    sims = stored @ (top / np.linalg.norm(top))
    assert [r["index"] for r in results] == list(np.argsort(-sims)[:3])
    assert results[0]["path"] == "im3.png" and results[0]["similarity"] == pytest.approx(float(sims[3]), abs=1e-5)


def test_region_retrieval_leaves_the_query_out_like_whole_image_retrieval():
    """A region covering the whole query ranks the query's own stored embedding first unless it
    is excluded; with ``exclude`` the results are the whole-image retrieval's minus nothing."""
    from dmlviewer.core.evaluate import retrieve

    model = _model()
    images = _images(9) + _images(4)

    class _Stored:  # what region_query and retrieve read from dmlviewer.core.evaluate.Features
        def __len__(self):
            return len(self.paths)

    h, w = images[0].shape[:2]
    with torch.no_grad():
        emb = torch.cat([model(to_tensor(im, SIZE)[None]).embedding for im in images]).numpy()
    # Row 0 holds the query, stored as the direction of its whole-image partial feature.
    whole = region_feature(model, images[0], (0, 0, h, w))
    emb[0] = whole / np.linalg.norm(whole)
    feats = _Stored()
    feats.embeddings, feats.paths, feats.labels = emb, [f"im{i}.png" for i in range(len(images))], np.arange(len(images))
    with_query = region_query(model, images[0], (0, 0, h, w), feats, k=len(images))
    assert with_query[0]["index"] == 0 and with_query[0]["similarity"] == pytest.approx(1.0, abs=1e-5)
    without = region_query(model, images[0], (0, 0, h, w), feats, k=len(images), exclude=0)
    assert 0 not in [r["index"] for r in without] and len(without) == len(images) - 1
    assert len(retrieve(feats, 0, k=len(images))) == len(without)
    with pytest.raises(IndexError):
        region_query(model, images[0], (0, 0, h, w), feats, exclude=len(images))


@pytest.mark.parametrize("sign", ["positive", "negative", "signed"])
def test_one_hover_pass_gives_the_pairs_share_peak_and_overlay_without_allocating(sign):
    """``hover_points`` (the pair view's one core call per event) gives each hovered point's
    share of the similarity exactly as ``PairExplanation.share`` computes it, the peak its map is
    scaled to, and an overlay in the renderer's own buffer; a second event allocates no array."""
    import tracemalloc

    from dmlviewer.core.explain.hover import colormap_lut, hover_points, overlay_shape, side_renderers

    pair = explain_pair(_model(), *_images(5))
    shapes = (tuple(pair.image_shape_query), tuple(pair.image_shape_reference))
    grids = (tuple(pair.grid_query), tuple(pair.grid_reference))
    renderers = side_renderers(pair.point_to_point, shapes, grids, lut=colormap_lut(), sign=sign,
                               similarity=pair.similarity)
    for side, name in enumerate(("query", "reference")):
        for x, y in ((3.0, 4.0), (20.5, 11.25), (shapes[side][1] - 1.0, shapes[side][0] - 1.0)):
            (point,) = hover_points([renderers[side]], x, y)
            assert point.share == pair.share(name, x, y)  # the same blend, the same sum: equal, not close
            partial = pair.partial_map(name, x, y) * (-1.0 if sign == "negative" else 1.0)
            peak = float(np.abs(partial).max() if sign == "signed" else partial.max())
            if peak > 0:
                assert not point.empty and point.peak == pytest.approx(peak, rel=1e-6)
            else:  # nothing of this sign here: no value stands for the top colour (issue 42 item 9)
                assert point.empty and point.peak is None
            assert point.rgba.shape == (*overlay_shape(shapes[1 - side]), 4)
            assert point.rgba is renderers[side].point.rgba  # the renderer's buffer
    # Two rows on one scale (the "Shared scale"): both coloured by the larger of their peaks.
    other = side_renderers(pair.point_to_point * 0.5, shapes, grids, sign=sign, similarity=pair.similarity)
    a, b = hover_points([renderers[0], other[0]], 20.5, 11.25, shared=True)
    larger = max(renderers[0].peak(20.5, 11.25), other[0].peak(20.5, 11.25))
    assert a.peak == b.peak == pytest.approx(larger if larger > 0 else 1.0)
    hover_points([renderers[0]], 10.0, 10.0)
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for k in range(50):
        hover_points([renderers[0]], 10.0 + 0.3 * k, 12.0)
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(d.size_diff for d in after.compare_to(before, "filename") if d.size_diff > 0)
    assert grown < 20_000  # small Python objects only: no array per event (an overlay is 50 kB)


def test_pair_inputs_resized_side_by_side_equal_the_sequential_inputs():
    """The two images resized at once (the reference on a side thread) give the inputs one by
    one would, for square, cross-view and already-sized images; a bad reference still raises."""
    from dmlviewer.core.data.transforms import Preprocess
    from dmlviewer.core.explain.inputs import pair_inputs

    pre = Preprocess(SIZE)
    cpu = torch.device("cpu")
    for shapes, sizes in ((((375, 500), (333, 250)), (SIZE, SIZE)), (((375, 500), (120, 90)), (SIZE, (SIZE, 2 * SIZE))),
                          (((SIZE, SIZE), (375, 500)), (None, None))):
        a, b = _images(3, shapes=shapes)
        got = pair_inputs(pre, (a, b), sizes, cpu)
        want = (pre(a, sizes[0]), pre(b, sizes[1]))
        for g, w in zip(got, want):
            assert g.shape == w.shape and torch.equal(g, w)
    a, _ = _images(4, shapes=((375, 500), (10, 10)))
    with pytest.raises(ValueError, match="uint8 H x W x 3"):
        pair_inputs(pre, (a, a[..., :2].copy()), (SIZE, SIZE), cpu)
    assert pre.shape_for(None) == (SIZE, SIZE) and pre.shape_for(32) == (32, 32)
    assert pre.shape_for((24, 96)) == (24, 96)
    assert Preprocess(SIZE, shape=(16, 64)).shape_for(None) == (16, 64)
