"""The hover renderer's colour indices and table look-up against plain numpy references."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from dmlviewer.core.explain.hover import FLOOR_EPS, HoverRenderer, colormap_lut, pair_table, take_pairs


def float_levels(grid: np.ndarray, scale: float, signed: bool, shape: tuple[int, int]) -> np.ndarray:
    """The upsampled colour levels before the cast: the map scaled to ``[0, 255]`` on the grid
    (``[-s, s]`` when signed), upsampled bilinear in float32 and clipped."""
    scaled = grid * np.float32(127.5 / scale) + np.float32(127.5) if signed else grid * np.float32(255.0 / scale)
    up = cv2.resize(scaled.astype(np.float32), (shape[1], shape[0]), interpolation=cv2.INTER_LINEAR)
    return np.clip(up, 0.0, 255.0)


@pytest.mark.parametrize("signed", [False, True])
@pytest.mark.parametrize("grid", [7, 14, 37])
@pytest.mark.parametrize("drawn", [None, (303, 404), (41, 29)])
def test_indices_are_the_floor_of_the_float_levels_but_just_below_an_integer(signed, grid, drawn):
    """At the target size (None) and at the sizes a pane draws the overlay at on screen (issue
    40: a smaller photograph on screen, a thumbnail-sized pane)."""
    rng = np.random.default_rng(grid + 100 * signed)
    shape = (375, 500)
    rows = rng.normal(size=(grid * grid, grid * grid)).astype(np.float32)
    r = HoverRenderer(rows, shape, (grid, grid), shape, (grid, grid), signed=signed)
    levels_seen = np.zeros(256, bool)
    for k, (x, y) in enumerate(rng.uniform(0, 370, size=(12, 2))):
        g = r.grid_map(x, y).copy()
        # each map's own scale (maximum reached), and fixed scales that clip at either end
        scale = [None, 0.3, 3.0][k % 3]
        index = r.indices(g, scale, drawn)
        assert index.shape == (drawn or shape)
        v = float_levels(g, r.last_scale, signed, drawn or shape)
        old = v.astype(np.uint8)  # the plain clip and truncating cast
        diff = index.astype(int) - old
        assert set(np.unique(diff)) <= {0, 1}
        below = np.ceil(v[diff == 1]) - v[diff == 1]
        assert (below <= 2 * FLOOR_EPS).all() and (below > 0).all()
        levels_seen[index.ravel()] = True
    assert levels_seen[0] and levels_seen[255] and levels_seen.sum() > 200


def test_take_pairs_is_the_table_look_up_exactly():
    rng = np.random.default_rng(3)
    table = rng.integers(0, 2 ** 32, 256, dtype=np.uint32)
    pairs = pair_table(table)
    assert pairs.shape == (65536,) and pairs.dtype == np.uint64
    for shape in [(375, 500), (5, 7), (1, 1), (1, 2), (33, 1)]:
        index = rng.integers(0, 256, shape, dtype=np.uint8)
        out = np.zeros(shape, np.uint32)
        assert take_pairs(pairs, index, out) is out
        np.testing.assert_array_equal(out, table[index])
    every = np.arange(256, dtype=np.uint8).reshape(16, 16)
    strided = np.repeat(every, 2, axis=1)[:, ::2]  # not contiguous
    out = np.empty((16, 16), np.uint32)
    np.testing.assert_array_equal(take_pairs(pairs, strided, out), table[every])


def test_take_pairs_refuses_what_it_cannot_fill_in_place():
    pairs = pair_table(np.arange(256, dtype=np.uint32))
    index = np.zeros((4, 6), np.uint8)
    for out in [np.zeros((4, 6), np.int64), np.zeros((6, 4), np.uint32), np.zeros((4, 12), np.uint32)[:, ::2]]:
        with pytest.raises(ValueError, match="out must be"):
            take_pairs(pairs, index, out)
    with pytest.raises(ValueError, match="uint8"):
        take_pairs(pairs, index.astype(np.int32), np.zeros((4, 6), np.uint32))
    with pytest.raises(ValueError, match="256 uint32"):
        pair_table(np.arange(256, dtype=np.int64))


@pytest.mark.parametrize("signed", [False, True])
def test_rendered_rgba_is_the_lut_at_the_indices(signed):
    rng = np.random.default_rng(4)
    rows = rng.normal(size=(9, 35)).astype(np.float32)
    lut = colormap_lut("viridis", alpha=200)
    r = HoverRenderer(rows, (30, 30), (3, 3), (51, 77), (5, 7), lut=lut, signed=signed)
    for x, y in [(3.0, 4.0), (20.5, 11.25)]:
        point = r.hover(x, y)
        np.testing.assert_array_equal(point.rgba, lut[point.index])


def test_a_hover_at_another_size_samples_the_same_map_and_keeps_its_numbers():
    """Issue 40: a pane asks for its overlay at its size on screen. The overlay follows the size
    asked for (buffers made anew only when it changes), while the share and the peak, which
    come from the grid, do not change with it; a size without pixels is refused."""
    rng = np.random.default_rng(5)
    rows = rng.random((7 * 7, 7 * 7)).astype(np.float32)
    r = HoverRenderer(rows, (375, 500), (7, 7), (375, 500), (7, 7), share_total=10.0)
    full = r.hover(120.0, 80.0)
    share, peak, big = full.share, full.peak, full.index.copy()
    for drawn in [(303, 404), (303, 404), (60, 80), None]:
        point = r.hover(120.0, 80.0, shape=drawn)
        assert point.index.shape == (drawn or (375, 500)) and point.rgba.shape == (*(drawn or (375, 500)), 4)
        assert point.share == share and point.peak == peak
        want = float_levels(r.grid_map(120.0, 80.0), peak, False, drawn or (375, 500))
        assert np.abs(point.index.astype(int) - want.astype(int)).max() <= 1
    np.testing.assert_array_equal(point.index, big)
    with pytest.raises(ValueError, match="0 x 12 pixels"):
        r.hover(120.0, 80.0, shape=(0, 12))
    with pytest.raises(ValueError, match="1000000 x 12 pixels"):  # refused, not allocated
        r.hover(120.0, 80.0, shape=(10 ** 6, 12))
