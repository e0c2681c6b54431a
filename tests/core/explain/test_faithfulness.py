"""Pairwise occlusion and deletion/insertion curves against explicit loops (one perturbed image
and one forward pass at a time, cells cut out pixel by pixel), the greedy oracle against an
explicit greedy search, and the curves' invariants; small_cnn with random weights at 64 px
(a 4 x 4 grid)."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from dmlviewer.core.data import load_image, open_dataset
from dmlviewer.core.explain import explain_pair
from dmlviewer.core.explain.faithfulness import _PairClock, faithfulness, pair_faithfulness, query_maps
from dmlviewer.core.explain.occlusion import CACHE, occlusion
from dmlviewer.core.explain.perturb import baseline_input, cell_labels, compose
from dmlviewer.core.models import build_model, default_config
from dmlviewer.core.progress import CancelToken, Cancelled, run_to_end


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build_model(default_config(backbone="small_cnn", grouping="c", groups=2, dim=16, image_size=64)).eval()


@pytest.fixture(scope="module")
def dataset(tiny_demo_root):
    return open_dataset(tiny_demo_root)


@pytest.fixture(scope="module")
def pair(dataset):
    test = dataset.indices("test")
    return load_image(dataset.abspath(int(test[0]))), load_image(dataset.abspath(int(test[5])))


def _embed(model, x: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
        return model(x[None]).embedding[0].double().numpy()


@functools.lru_cache(maxsize=None)
def _cell_pixels(cell: int, height: int, width: int, grid: tuple[int, int]) -> tuple[list[int], list[int]]:
    """Pixels (rows, columns) of a cell, one by one: cell (i, j) covers
    [j W/w, (j+1) W/w] x [i H/h, (i+1) H/h] (pixel centres inside)."""
    h, w = grid
    i, j = divmod(cell, w)
    ys, xs = [], []
    for y in range(height):
        for x in range(width):
            if i * height / h <= y + 0.5 < (i + 1) * height / h and j * width / w <= x + 0.5 < (j + 1) * width / w:
                ys.append(y)
                xs.append(x)
    return ys, xs


def _cut(x: torch.Tensor, baseline: torch.Tensor, cells, grid) -> torch.Tensor:
    """``x`` with the listed cells' pixels replaced by ``baseline``'s."""
    out = x.clone()
    for c in cells:
        ys, xs = _cell_pixels(int(c), x.shape[1], x.shape[2], tuple(grid))
        out[:, ys, xs] = baseline[:, ys, xs]
    return out


@pytest.mark.parametrize("kind", ["blur", "mean", "noise"])
def test_occlusion_equals_explicit_loop(model, pair, kind):
    """Batched occlusion = one occluded image at a time; the point-to-point interaction =
    S - S(q^i, r) - S(q, r^x) + S(q^i, r^x) with every term from its own forward pass."""
    q, r = pair
    result = run_to_end(occlusion(model, q, r, baseline=kind, batch_size=5, use_cache=False))
    xq, xr = model.preprocess(q), model.preprocess(r)
    grid = result.grid_query
    assert grid == (4, 4)
    bq, br = baseline_input(xq, kind, grid, seed=0), baseline_input(xr, kind, grid, seed=1)
    eq, er = _embed(model, xq), _embed(model, xr)
    s = float(eq @ er)
    assert result.similarity == pytest.approx(s, abs=1e-6)
    occluded_q = [_embed(model, _cut(xq, bq, [i], grid)) for i in range(16)]
    occluded_r = [_embed(model, _cut(xr, br, [i], grid)) for i in range(16)]
    explicit_q = np.array([s - e @ er for e in occluded_q]).reshape(grid)
    explicit_r = np.array([s - eq @ e for e in occluded_r]).reshape(grid)
    np.testing.assert_allclose(result.overall_grid("query"), explicit_q, atol=2e-6)
    np.testing.assert_allclose(result.overall_grid("reference"), explicit_r, atol=2e-6)
    assert np.abs(explicit_q).max() > 1e-3  # the maps are not trivially zero
    for i, x in [(0, 0), (5, 6), (15, 3), (9, 9)]:
        interaction = s - occluded_q[i] @ er - eq @ occluded_r[x] + occluded_q[i] @ occluded_r[x]
        assert result.point_to_point[i, x] == pytest.approx(interaction, abs=2e-6)


def test_occlusion_cache_and_cancel(model, pair):
    q, r = pair
    CACHE.clear()
    calls = []  # images through a convolution of any module: the model and its folded copy
    handle = torch.nn.modules.module.register_module_forward_hook(
        lambda module, args, out: calls.append(len(args[0])) if isinstance(module, torch.nn.Conv2d) else None)
    try:
        first = run_to_end(occlusion(model, q, r))
        passes = len(calls)
        assert first.forward_passes == 36 and passes > 0  # 2 images, then each side itself and its 16 cells
        again = run_to_end(occlusion(model, q, r))
        assert again is first and len(calls) == passes  # cached: no forward pass
        other = run_to_end(occlusion(model, q, r, baseline="mean"))
        assert other is not first and len(calls) > passes
    finally:
        handle.remove()
    token = CancelToken()
    job = occlusion(model, q, r, baseline="noise", batch_size=4, use_cache=False, cancel=token)
    next(job)
    token.cancel()
    with pytest.raises(Cancelled):
        for _ in job:
            pass


def test_deletion_and_insertion_auc_equal_explicit_loop(model, pair):
    """Curves and AUCs of a map against an explicit computation: rank the cells by the map,
    cut the top k cells pixel by pixel, one forward pass per point, trapezoids summed by hand."""
    q, r = pair
    steps = 5
    result = run_to_end(pair_faithfulness(model, q, r, ["decomposition", "gradcam"], baseline="blur",
                                          steps=steps, oracle=False))
    expl = explain_pair(model, q, r)
    xq = model.preprocess(q)
    grid = expl.grid_query
    base = baseline_input(xq, "blur", grid, seed=0)
    er = expl.embedding("reference").astype(np.float64)
    counts = [round(t * 16 / steps) for t in range(steps + 1)]
    assert result["fractions"] == pytest.approx([c / 16 for c in counts])
    for method in ("decomposition", "gradcam"):
        values = expl.overall_grid(method, "query").ravel()
        assert len(np.unique(values)) == 16  # no ties: the order is the map's alone
        order = sorted(range(16), key=lambda c: -values[c])
        deletion, insertion = [], []
        for k in counts:
            deletion.append(float(_embed(model, _cut(xq, base, order[:k], grid)) @ er))
            insertion.append(float(_embed(model, _cut(xq, base, order[k:], grid)) @ er))
        area = lambda y: sum((counts[t + 1] - counts[t]) / 16 * (y[t] + y[t + 1]) / 2 for t in range(steps))  # noqa: E731
        got = result["methods"][method]
        np.testing.assert_allclose(got["deletion"], deletion, atol=2e-6)
        np.testing.assert_allclose(got["insertion"], insertion, atol=2e-6)
        assert got["deletion_auc"] == pytest.approx(area(deletion), abs=2e-6)
        assert got["insertion_auc"] == pytest.approx(area(insertion), abs=2e-6)


def test_oracle_is_the_explicit_greedy_order(model, pair):
    """The oracle's deletion curve: at each step try every remaining cell alone, remove the
    step's cells with the lowest similarities; insertion the same with the highest."""
    q, r = pair
    steps = 4
    result = run_to_end(pair_faithfulness(model, q, r, ["decomposition"], baseline="mean", steps=steps, oracle=True))
    expl = explain_pair(model, q, r)
    xq = model.preprocess(q)
    grid = expl.grid_query
    base = baseline_input(xq, "mean", grid, seed=0)
    er = expl.embedding("reference").astype(np.float64)

    def sim(removed):
        return float(_embed(model, _cut(xq, base, sorted(removed), grid)) @ er)

    for kind in ("deletion", "insertion"):
        chosen: set[int] = set()
        curve = []
        for t in range(steps + 1):
            removed = chosen if kind == "deletion" else set(range(16)) - chosen
            curve.append(sim(removed))
            if t == steps:
                break
            scores = {}
            for c in sorted(set(range(16)) - chosen):
                trial = chosen | {c}
                scores[c] = sim(trial if kind == "deletion" else set(range(16)) - trial)
            ranked = sorted(scores, key=lambda c: (scores[c] if kind == "deletion" else -scores[c], c))
            chosen |= set(ranked[:4])
        np.testing.assert_allclose(result["methods"]["oracle"][kind], curve, atol=2e-6)


def test_curve_ends_and_map_identities(model, pair):
    """Every method's deletion curve starts (and insertion ends) at the pair's similarity and
    they share the all-baseline point; the signed point-to-point rows sum to the Decomposition
    map and the group maps sum to it too (seed 000 Eq. 3)."""
    q, r = pair
    result = run_to_end(pair_faithfulness(model, q, r, ["decomposition", "occlusion", "point_to_point", "group_0",
                                                         "group_1"], steps=8, oracle=False))
    expl = explain_pair(model, q, r)
    ends = set()
    for name, curves in result["methods"].items():
        assert curves["deletion"][0] == pytest.approx(expl.similarity, abs=1e-5), name
        assert curves["insertion"][-1] == pytest.approx(expl.similarity, abs=1e-5), name
        ends.add(round(curves["deletion"][-1], 9))
        ends.add(round(curves["insertion"][0], 9))
    assert len(ends) == 1
    assert set(result["methods"]) == {"decomposition", "occlusion", "point_to_point", "group_0", "group_1", "random"}
    maps = query_maps(expl, ["decomposition", "group_0", "group_1"])
    np.testing.assert_allclose(expl.point_to_point.sum(1), maps["decomposition"], atol=1e-6)
    np.testing.assert_allclose(maps["group_0"] + maps["group_1"], maps["decomposition"], atol=1e-6)


def test_dataset_run_pairs_and_oracle_subset(model, dataset):
    result = run_to_end(faithfulness(model, dataset, ["decomposition", "occlusion"], pairs=5, steps=2,
                                     oracle_pairs=1, baseline="mean"))
    by = {r["method"]: r for r in result}
    assert list(by) == ["decomposition", "occlusion", "random", "oracle"]
    for r in result:
        if r["method"] != "oracle":
            assert r["num_pairs"] == 3 and r["different_class"]["num_pairs"] == 2
        assert r["baseline"] == "mean" and len(r["deletion_curve"]) == len(r["fractions"]) == 3
    assert by["oracle"]["num_pairs"] == 1 and by["oracle"]["different_class"]["num_pairs"] == 0
    assert by["oracle"]["different_class"]["deletion_auc"] is None
    assert by["decomposition"]["oracle_pairs"]["num_pairs"] == 1
    # the first points of every mean deletion curve: the mean similarity of the same pairs
    firsts = {round(r["deletion_curve"][0], 6) for r in result if r["method"] != "oracle"}
    assert len(firsts) == 1
    with pytest.raises(ValueError, match="unknown method"):
        run_to_end(faithfulness(model, dataset, ["group_7"], pairs=2))


@pytest.mark.parametrize("size, grid", [((64, 48), (4, 3)), ((224, 224), (7, 7)), ((70, 50), (4, 3)),
                                        ((31, 17), (5, 4))])
def test_compose_picks_each_pixel_exactly(size, grid):
    """Perturbed copies equal a per-pixel choice bit for bit, on grids whose cells tile the input
    evenly (the block path) and on grids whose cells do not (the per-pixel mask); channels-last."""
    gen = torch.Generator().manual_seed(0)
    x, base = torch.randn(3, *size, generator=gen), torch.randn(3, *size, generator=gen)
    labels = torch.from_numpy(cell_labels(size, grid))
    keep = torch.rand(6, grid[0] * grid[1], generator=gen) > 0.5
    got = compose(x, base, labels, keep)
    assert torch.equal(got, torch.where(keep[:, labels][:, None], x[None], base[None]))
    assert got.is_contiguous(memory_format=torch.channels_last)


def test_time_left_weighs_the_oracle_pairs():
    """The oracle pairs come first and cost several times the others: the estimate uses what
    each kind costs, and before a plain pair is done, the oracle pair's share of plain passes."""
    clock = _PairClock()
    assert clock.eta(3, 10) is None
    clock.add(True, {"seconds": 7.0, "forward_passes": 700, "oracle_forward_passes": 600})
    assert clock.eta(1, 10) == pytest.approx(7.0 + 10 * 1.0)  # a plain pair: 1/7 of the passes
    clock.add(False, {"seconds": 2.0, "forward_passes": 100, "oracle_forward_passes": 0})
    assert clock.eta(1, 10) == pytest.approx(7.0 + 10 * 2.0)
    assert clock.eta(0, 0) == 0.0
