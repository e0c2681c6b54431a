"""Pixel/grid alignment, the hover renderer, boxes from maps and top matches."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from dmlviewer.core.explain.boxes import box_from_map, iou, parse_thresholds
from dmlviewer.core.explain.grid import (
    bilinear_weights,
    grid_to_pixel,
    region_cell_weights,
    upsample,
)
from dmlviewer.core.explain.hover import DifferenceRenderer, HoverRenderer, colormap_lut, premultiplied_table
from dmlviewer.core.explain.matches import top_matches


def test_bilinear_weights_agree_with_cv2_upsampling():
    rng = np.random.default_rng(0)
    grid = rng.normal(size=(5, 7)).astype(np.float32)
    shape = (53, 90)
    up = upsample(grid, shape)
    ref = cv2.resize(grid, (90, 53), interpolation=cv2.INTER_LINEAR)
    np.testing.assert_array_equal(up, ref)
    for x, y in [(0, 0), (89, 52), (13, 40), (45, 26), (2, 51)]:
        idx, wts = bilinear_weights(x, y, shape, (5, 7))
        assert sum(wts) == pytest.approx(1.0)
        value = sum(w * grid.flat[i] for i, w in zip(idx, wts))
        assert value == pytest.approx(float(up[y, x]), abs=1e-5)


def test_cell_centre_selects_one_cell():
    shape, grid = (100, 60), (4, 3)
    for i in range(4):
        for j in range(3):
            x, y = grid_to_pixel(j, 60, 3), grid_to_pixel(i, 100, 4)
            idx, wts = bilinear_weights(x, y, shape, grid)
            acc = {}
            for k, w in zip(idx, wts):
                acc[k] = acc.get(k, 0.0) + w
            assert acc[i * 3 + j] == pytest.approx(1.0)


@pytest.mark.parametrize("point", [(-1.0, 5.0), (5.0, 100.0), (60.0, 3.0), (float("nan"), 1.0)])
def test_point_outside_image_raises_value_error(point):
    with pytest.raises(ValueError, match="outside|finite"):
        bilinear_weights(point[0], point[1], (100, 60), (4, 3))


def test_region_cell_weights():
    np.testing.assert_allclose(region_cell_weights((0, 0, 100, 60), (100, 60), (4, 3)), np.ones((4, 3)))
    w = region_cell_weights((0, 0, 50, 30), (100, 60), (4, 3))  # top-left quarter
    np.testing.assert_allclose(w, [[1, 0.5, 0], [1, 0.5, 0], [0, 0, 0], [0, 0, 0]])
    assert float(w.sum()) == pytest.approx(12 / 4)
    with pytest.raises(ValueError, match="does not overlap"):
        region_cell_weights((200, 0, 300, 10), (100, 60), (4, 3))


@pytest.mark.parametrize("signed", [False, True])
def test_hover_renderer_matches_slow_reference(signed):
    rng = np.random.default_rng(1)
    rows = rng.normal(size=(3 * 4, 5 * 6)).astype(np.float32)
    lut = colormap_lut("viridis")
    r = HoverRenderer(rows, (30, 40), (3, 4), (50, 60), (5, 6), lut=lut, signed=signed)
    for x, y in [(0.0, 0.0), (17.3, 11.9), (39.0, 29.0)]:
        idx, wts = bilinear_weights(x, y, (30, 40), (3, 4))
        expect_grid = sum(w * rows[i].astype(np.float64) for i, w in zip(idx, wts)).reshape(5, 6)
        np.testing.assert_allclose(r.grid_map(x, y), expect_grid, atol=1e-5)
        s = np.abs(expect_grid).max() if signed else expect_grid.max()
        scaled = expect_grid / s * 127.5 + 127.5 if signed else expect_grid / s * 255.0
        up = cv2.resize(scaled.astype(np.float32), (60, 50), interpolation=cv2.INTER_LINEAR)
        ref = lut[np.clip(up, 0, 255).astype(np.uint8)]
        out = r.render(x, y)
        assert out.shape == (50, 60, 4) and out.dtype == np.uint8
        # colour indices may differ by one level where the float rounding straddles an integer
        diff = np.abs(out.astype(int) - ref.astype(int)).max(axis=2)
        assert (diff == 0).mean() > 0.99
    with pytest.raises(ValueError):
        r.render(41.0, 3.0)


@pytest.mark.parametrize("signed", [False, True])
def test_an_empty_partial_map_has_no_peak_and_says_it_is_empty(signed):
    """Issue 42 item 9: a hovered cell whose map holds nothing of the shown sign (all zero, or
    only negative values on a positive display) is ``empty`` and has no peak on its own scale
    (the colour scale's stand-in 1 is no value of the map); a fixed scale is still its peak."""
    rows = np.zeros((2 * 2, 3 * 3), np.float32)
    rows[0] = np.linspace(0.1, 0.9, 9)  # the top-left cell: a map
    rows[3] = -np.linspace(0.1, 0.9, 9)  # the bottom-right cell: only opposing values
    r = HoverRenderer(rows, (20, 20), (2, 2), (30, 30), (3, 3), signed=signed, share_total=1.0)
    point = r.hover(2.0, 2.0)  # inside the top-left cell only
    assert not point.empty and point.peak == pytest.approx(0.9, rel=1e-5)
    point = r.hover(17.0, 17.0)  # the bottom-right cell: negative only
    assert point.empty is (not signed)
    assert (point.peak is None) is (not signed)
    rows[3] = 0.0
    point = HoverRenderer(rows, (20, 20), (2, 2), (30, 30), (3, 3), signed=signed, share_total=1.0).hover(17.0, 17.0)
    assert point.empty and point.peak is None and point.share == 0.0
    fixed = HoverRenderer(rows, (20, 20), (2, 2), (30, 30), (3, 3), signed=signed, scale=0.5).hover(17.0, 17.0)
    assert fixed.empty and fixed.peak == 0.5

def test_box_from_map_picks_largest_component():
    m = np.zeros((100, 120), np.float32)
    m[10:30, 20:50] = 1.0  # 20 x 30 = 600 px at full strength
    m[60:95, 70:115] = 0.6  # 35 x 45 = 1575 px, weaker
    assert box_from_map(m, 0.5) == (70.0, 60.0, 45.0, 35.0)
    assert box_from_map(m, 0.7) == (20.0, 10.0, 30.0, 20.0)
    assert box_from_map(np.zeros((5, 5)), 0.2) is None
    assert box_from_map(-np.ones((5, 5)), 0.2) is None


def test_iou_known_values():
    assert iou((0, 0, 10, 10), (0, 0, 10, 10)) == pytest.approx(1.0)
    assert iou((0, 0, 10, 10), (5, 0, 10, 10)) == pytest.approx(50 / 150)
    assert iou((0, 0, 10, 10), (20, 20, 5, 5)) == 0.0
    assert iou(None, (0, 0, 1, 1)) == 0.0
    assert iou((0, 0, 10, 10), (np.nan,) * 4) == 0.0


def test_parse_thresholds():
    assert parse_thresholds("0.1:0.3:0.1") == [0.1, 0.2, 0.3]
    assert parse_thresholds("0.2, 0.5") == [0.2, 0.5]
    for bad in ("0.1:0.3", "a:b:c", "0.5:0.1:0.1", "2"):
        with pytest.raises(ValueError):
            parse_thresholds(bad)


def test_top_matches_non_maximum_suppression():
    p = np.zeros((4 * 4, 3 * 3), np.float32)
    p[0, 0] = 5.0  # query cell (0,0) <-> reference cell (0,0)
    p[1, 1] = 4.0  # neighbours of both: suppressed
    p[15, 8] = 3.0  # query (3,3) <-> reference (2,2)
    p[10, 0] = 2.0  # reference cell (0,0) already used: suppressed
    p[12, 6] = -1.0  # negative: never a match
    found = top_matches(p, (4, 4), (3, 3), (40, 40), (30, 30), n=5, radius=1)
    assert [(m["query_cell"], m["reference_cell"]) for m in found] == [((0, 0), (0, 0)), ((3, 3), (2, 2))]
    assert found[0]["score"] == 5.0
    assert found[1]["query_xy"] == (35.0 - 0.5, 35.0 - 0.5) and found[1]["reference_xy"] == (24.5, 24.5)


def test_pair_scale_lets_only_the_strongest_points_saturate():
    """Whole-pair colour scale: a few dominant cell pairs (a max-pooled head) do not darken every
    other point; at most ``saturate`` of the points (rows and columns) exceed the scale, and the
    scale is the largest entry when the points are alike."""
    from dmlviewer.core.explain.hover import pair_scale

    rng = np.random.default_rng(0)
    tensor = rng.uniform(0, 0.01, size=(100, 120)).astype(np.float32)
    tensor[3, 7], tensor[50, 9] = 0.4, -0.3  # two cell pairs hold most of the similarity
    scale = pair_scale(tensor, saturate=0.05)
    peaks = np.concatenate([np.abs(tensor).max(1), np.abs(tensor).max(0)])
    assert 0.009 < scale < 0.011  # among the ordinary points' peaks, not 0.4
    assert np.mean(peaks > scale) <= 0.05
    flat = np.full((10, 10), 0.2, np.float32)
    assert pair_scale(flat) == pytest.approx(0.2)
    assert pair_scale(np.zeros((4, 4), np.float32)) == 1.0
    assert pair_scale(tensor.reshape(10, 10, 12, 10), saturate=0.05) == pytest.approx(scale)  # h x w x h x w form


def test_a_hover_gives_colour_indices_and_the_rgba_only_on_demand():
    """Issue 40: a hover stops at the colour indices (the GUI colours them once); the RGBA the
    point gives on demand is the renderer's render() of the same point."""
    rng = np.random.default_rng(1)
    rows = rng.normal(size=(36, 49)).astype(np.float32)
    a = HoverRenderer(rows, (60, 60), (6, 6), (70, 70), (7, 7))
    b = HoverRenderer(rows[::-1].copy(), (60, 60), (6, 6), (70, 70), (7, 7))
    point = a.hover(20.0, 33.0)
    assert point.index is not None and point.index.shape == (70, 70) and point.index.dtype == np.uint8
    np.testing.assert_array_equal(point.lut[point.index], point.rgba)
    np.testing.assert_array_equal(point.rgba, a.render(20.0, 33.0))
    diff = DifferenceRenderer(a, b).hover(5.0, 50.0)
    np.testing.assert_array_equal(diff.lut[diff.index], DifferenceRenderer(a, b).render(5.0, 50.0))


def test_the_premultiplied_table_is_qt_argb32_premultiplied_with_the_opacity_baked_in():
    lut = colormap_lut("jet")
    lut[:, 3] = np.arange(256)
    table = premultiplied_table(lut, 0.6)
    assert table.dtype == np.uint32 and table.shape == (256,)
    for k in (0, 1, 77, 128, 255):
        alpha = round(int(lut[k, 3]) * 0.6)
        want = [round(int(lut[k, c]) * alpha / 255) for c in (2, 1, 0)] + [alpha]  # bytes B, G, R, A
        assert list(table[k : k + 1].view(np.uint8)) == want
    assert not premultiplied_table(lut, 0.0).any()
    with pytest.raises(ValueError, match="opacity"):
        premultiplied_table(lut, 1.5)
