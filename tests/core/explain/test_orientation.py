"""Orientation from point-to-point maps (issue 25): the heading a query point and an aerial peak
imply, the sub-cell peak, and the command over a tiny cross-view set."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from tiny_two_branch import tiny_two_branch

from dmlviewer.core.explain.orientation import pair_orientation, refined_peak, summarize


def test_refined_peak_is_the_centroid_around_the_maximum():
    grid = np.zeros((5, 5))
    grid[2, 3] = grid[3, 3] = 1.0
    grid[0, 0] = -5.0
    assert refined_peak(grid) == pytest.approx((3.0, 3.5))  # between rows 2 and 3, centre of column 3


def _explanation(overall_query, partial_cells, overall_cells):
    """A stand-in for a PairExplanation: panorama 64 x 256 on a 2 x 8 grid, aerial 128 x 128 on 8 x 8."""
    p2p = np.zeros((16, 64), dtype=np.float32)
    overall_r = np.zeros((8, 8), dtype=np.float32)
    i, j = np.unravel_index(int(np.argmax(overall_query)), overall_query.shape)
    for r, c in partial_cells:
        p2p[i * 8 + j, r * 8 + c] = 1.0
    for r, c in overall_cells:
        overall_r[r, c] = 1.0
    grids = {"query": overall_query, "reference": overall_r}
    hovered = []

    def partial_map(side, x, y):  # the stand-in serves the point's partial map of the peak cell
        hovered.append((side, x, y))
        return p2p[i * 8 + j].reshape(8, 8)

    return SimpleNamespace(grid_query=(2, 8), grid_reference=(8, 8), image_shape_query=(64, 256),
                           image_shape_reference=(128, 128), partial_map=partial_map, hovered=hovered,
                           overall_grid=lambda method, side: grids[side])


def test_heading_is_peak_azimuth_minus_the_query_columns_angle():
    overall_q = np.zeros((2, 8))
    overall_q[1, 2] = 1.0  # the most activated point: x = 2.5 * 32 = 80 px, 112.5 degrees from the left edge
    e = _explanation(overall_q, partial_cells=[(3, 6), (4, 6)], overall_cells=[(1, 3), (1, 4)])
    result = pair_orientation(e)
    assert result["query_point"] == pytest.approx([80.0, 48.0])
    assert e.hovered == [("query", pytest.approx(80.0), pytest.approx(48.0))]
    assert result["partial_map"]["peak"] == pytest.approx([104.0, 64.0])  # due east of the centre
    assert result["partial_map"]["azimuth_deg"] == pytest.approx(90.0)
    assert result["partial_map"]["heading_deg"] == pytest.approx((90.0 - 112.5) % 360)
    assert result["overall_map"]["azimuth_deg"] == pytest.approx(0.0)  # due north
    assert result["overall_map"]["heading_deg"] == pytest.approx(360 - 112.5)


def test_summary_counts_errors_within_3_5_degrees():
    s = summarize(np.array([0.0, 3.5, 3.6, 100.0]))
    assert s["within_3.5deg"] == 0.5 and s["median_error_deg"] == pytest.approx(3.55)
    assert sum(s["histogram"]["counts"]) == 4 and s["histogram"]["edges_deg"][0] == 0.0


def test_orientation_command_on_a_tiny_cross_view_set(tmp_path, capsys):

    from dmlviewer.cli import main
    from dmlviewer.core.data.cross_view import make_cross_view_data
    from dmlviewer.core.models import save_checkpoint

    data = make_cross_view_data(tmp_path / "cv", pairs=8, seed=0, aerial_size=48, panorama_shape=(32, 128))
    model = tiny_two_branch((32, 128), 48)
    save_checkpoint(tmp_path / "two.pt", model)
    assert main(["orientation", "--checkpoint", str(tmp_path / "two.pt"), "--dataset", str(data), "--json",
                 "--per-pair", "--device", "cpu"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["num_pairs"] == 2 and len(result["pairs"]) == 2
    for name in ("partial_map", "overall_map"):
        assert 0.0 <= result[name]["within_3.5deg"] <= 1.0 and 0.0 <= result[name]["median_error_deg"] <= 180.0
        assert sum(result[name]["histogram"]["counts"]) == 2
    for pair in result["pairs"]:
        for name in ("partial_map", "overall_map"):
            error = abs((pair[name]["heading_deg"] - pair["true_heading_deg"] + 180) % 360 - 180)
            assert pair[name]["error_deg"] == pytest.approx(error, abs=1e-6)
