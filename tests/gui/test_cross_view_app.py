"""Cross-view pairs in the app (issue 25): a CVUSA-layout set and a two-branch model opened in the
main window, a 1:4 street panorama beside a square aerial image, hover/pin/matches across the two
shapes through real mouse events, and the orientation lines drawn from the core's estimates.

The model is a two-branch small_cnn with random weights (``core.models.two_branch``); expected
overlays are the core's partial maps colour-mapped by a plain reference implementation, the
expected lines come from ``core.explain.orientation.pair_orientation`` and the angle helpers of
``core.data.cross_view``.
"""

from __future__ import annotations

import numpy as np
import pytest
from _mouse import hover, viewport_pos
from PySide6.QtCore import QPointF, Qt
from PySide6.QtTest import QTest
from tiny_two_branch import tiny_two_branch, tiny_two_branch_checkpoint

from dmlviewer.gui.pair.colormaps import overlay_lut
from dmlviewer.gui.pair.hover_link import QUERY, REFERENCE
from dmlviewer.core.explain.hover import overlay_shape

pytestmark = pytest.mark.gui

PANORAMA, AERIAL = (32, 128), 64


@pytest.fixture(scope="module")
def cross_view_root(tmp_path_factory):
    from dmlviewer.core.data.cross_view import make_cross_view_data

    return make_cross_view_data(tmp_path_factory.mktemp("cv") / "data", pairs=8, seed=0, aerial_size=AERIAL,
                                panorama_shape=PANORAMA)


@pytest.fixture(scope="module")
def two_branch_ckpt(tmp_path_factory):
    return tiny_two_branch_checkpoint(tmp_path_factory.mktemp("ckpt"), PANORAMA, AERIAL)


@pytest.fixture
def loaded(window, cross_view_root, two_branch_ckpt, wait_ready):
    assert window.open_checkpoint(two_branch_ckpt)
    assert window.open_dataset(cross_view_root)
    wait_ready(window.pair_view)
    assert window.pair_view.scale_combo.currentData() == "map"
    return window


def expected_overlay(expl, side: str, x: float, y: float, lut: np.ndarray) -> np.ndarray:
    other_shape = expl.image_shape_reference if side == "query" else expl.image_shape_query
    values = expl.partial_map_image(side, x, y, overlay_shape(other_shape))
    peak = float(expl.partial_map(side, x, y).max())
    index = np.clip(values * (255.0 / (peak if peak > 0 else 1.0)), 0, 255).astype(np.uint8)
    return lut[index]


def test_a_street_query_and_its_aerial_open_side_by_side_at_their_own_aspect_ratios(loaded):
    ds, view = loaded.dataset, loaded.pair_view
    assert ds.format == "cvusa" and len(ds) == 16
    assert loaded.browser.model.count() == 16  # the browser lists every street and aerial image
    q_index, r_index = loaded.query_index, loaded.reference_index
    assert ds.paths[q_index].startswith("streetview/") and ds.paths[r_index].startswith("bingmap/")
    assert ds.labels[q_index] == ds.labels[r_index]  # the pair's own aerial
    expl = view.explanation
    assert tuple(expl.image_shape_query) == PANORAMA and tuple(expl.image_shape_reference) == (AERIAL, AERIAL)
    assert expl.grid_query != expl.grid_reference  # two branches, two grids
    # Each photograph drawn at its own aspect ratio on screen (1:4 beside 1:1).
    q, r = view.panes
    for pane, (h, w) in ((q, PANORAMA), (r, (AERIAL, AERIAL))):
        top_left = pane.view.mapViewToScene(QPointF(0, 0))
        bottom_right = pane.view.mapViewToScene(QPointF(w, h))
        ratio = (bottom_right.x() - top_left.x()) / (bottom_right.y() - top_left.y())
        assert ratio == pytest.approx(w / h, rel=0.02)
    assert not view.size_combo.isEnabled()  # each branch at its own input shape
    assert q.width() > r.width()  # the wide panorama gets the larger share of the row


@pytest.mark.parametrize("side,point", [(QUERY, (100.0, 20.0)), (REFERENCE, (40.0, 18.0))])
def test_hover_on_either_image_draws_the_cores_partial_map_on_the_other(loaded, side, point):
    view = loaded.pair_view
    expl = view.explanation
    lut = overlay_lut(view.cmap_combo.currentData())
    name, other_name = ("query", "reference") if side == QUERY else ("reference", "query")
    got_side, x, y = hover(view.panes[side], view.link, *point)
    assert got_side == side and abs(x - point[0]) <= 1 and abs(y - point[1]) <= 1
    other = view.panes[1 - side].overlay_image()
    other_shape = getattr(expl, f"image_shape_{other_name}")
    assert other.shape == (*overlay_shape(other_shape), 4)
    assert np.mean(np.all(other == expected_overlay(expl, name, x, y, lut), axis=-1)) > 0.98


def test_pin_on_the_aerial_and_matches_across_shapes(loaded, qtbot):
    view = loaded.pair_view
    q, r = view.panes
    QTest.mouseClick(r.graphics.viewport(), Qt.LeftButton, Qt.NoModifier, viewport_pos(r, 50.0, 10.0))
    qtbot.waitUntil(lambda: view.link.pinned is not None, timeout=2000)
    side, px, py = view.link.pinned
    assert side == REFERENCE and abs(px - 50.0) <= 1 and abs(py - 10.0) <= 1
    pinned = q.overlay_image().copy()
    hover(q, view.link, 10.0, 10.0)  # moving over the panorama keeps the pinned map
    assert np.array_equal(q.overlay_image(), pinned)
    QTest.keyClick(view, Qt.Key_Escape)
    assert view.link.pinned is None

    view.matches_n.setValue(3)
    view.matches_box.setChecked(True)
    matches = view.explanation.correspondences(3)
    xs, ys = q.marker_item.getData()
    np.testing.assert_allclose(xs, [m["query_xy"][0] + 0.5 for m in matches])
    rx, ry = r.marker_item.getData()
    np.testing.assert_allclose(rx, [m["reference_xy"][0] + 0.5 for m in matches])
    assert np.all(xs <= PANORAMA[1]) and np.all(ys <= PANORAMA[0])
    assert np.all(rx <= AERIAL) and np.all(ry <= AERIAL)


def _azimuth_of_ray(xs, ys) -> float:
    from dmlviewer.core.data.cross_view import pixel_azimuth

    assert (xs[0], ys[0]) == pytest.approx((AERIAL / 2, AERIAL / 2))  # from the camera, the centre
    return pixel_azimuth(xs[1], ys[1], (AERIAL, AERIAL))


def test_orientation_lines_are_the_cores_estimates_with_their_errors(loaded, cross_view_root):
    from dmlviewer.core.data.cross_view import angle_error, read_headings
    from dmlviewer.core.explain.orientation import pair_orientation

    view, ds = loaded.pair_view, loaded.dataset
    want = pair_orientation(view.explanation)
    truth = read_headings(cross_view_root)[ds.paths[loaded.query_index]]
    got = view.orientation
    assert got["true_heading_deg"] == pytest.approx(truth)
    guides = {name.split(":")[0]: (name, xs, ys) for name, xs, ys in view.panes[REFERENCE].guides()}
    assert set(guides) == {"north", "partial map", "overall map", "true heading"}
    assert _azimuth_of_ray(*guides["north"][1:]) == pytest.approx(0.0, abs=1e-6)
    for key, label in (("partial_map", "partial map"), ("overall_map", "overall map")):
        heading = want[key]["heading_deg"]
        assert got[key]["heading_deg"] == pytest.approx(heading)
        error = float(angle_error(heading, truth))
        assert got[key]["error_deg"] == pytest.approx(error)
        name, xs, ys = guides[label]
        assert angle_error(_azimuth_of_ray(xs, ys), heading) == pytest.approx(0.0, abs=1e-4)
        assert f"{heading:.1f}°" in name and f"error {error:.1f}°" in name
    assert angle_error(_azimuth_of_ray(*guides["true heading"][1:]), truth) == pytest.approx(0.0, abs=1e-4)
    assert view.panes[REFERENCE].guide_legend.isVisible()
    # The two peaks the headings come from, as dots on the aerial image.
    xs, ys = view.panes[REFERENCE].guide_points.getData()
    np.testing.assert_allclose(np.c_[xs, ys], [want["partial_map"]["peak"], want["overall_map"]["peak"]])
    # On the panorama: the column of the query's most activated point, top to bottom.
    (name, xs, ys), = view.panes[QUERY].guides()
    assert xs == pytest.approx([want["query_point"][0]] * 2) and ys == pytest.approx([0.0, PANORAMA[0]])


def test_no_lines_once_the_aerial_is_the_query(loaded, wait_ready):
    loaded.pair_view.swap_button.click()
    wait_ready(loaded.pair_view)
    assert loaded.dataset.paths[loaded.query_index].startswith("bingmap/")
    assert loaded.pair_view.orientation is None
    assert all(not pane.guides() for pane in loaded.pair_view.panes)
    assert not loaded.pair_view.panes[REFERENCE].guide_legend.isVisible()


def test_another_aerial_gets_estimates_but_no_truth(loaded, wait_ready):
    q = loaded.query_index
    other = (q + 3) % len(loaded.dataset)  # an aerial of another pair
    loaded.set_pair(q, other)
    wait_ready(loaded.pair_view)
    got = loaded.pair_view.orientation
    assert got["true_heading_deg"] is None and got["partial_map"]["error_deg"] is None
    names = [name for name, _, _ in loaded.pair_view.panes[REFERENCE].guides()]
    assert len(names) == 3 and not any("true" in n or "error" in n for n in names)


def test_a_one_branch_model_on_the_cross_view_set_draws_no_lines(window, cross_view_root, small_ckpt, wait_ready):
    assert window.open_checkpoint(small_ckpt)
    assert window.open_dataset(cross_view_root)
    wait_ready(window.pair_view)
    view = window.pair_view
    assert view.images.cross_view and view.images.true_heading is not None  # the pair is cross-view...
    assert view.orientation is None and not any(pane.guides() for pane in view.panes)  # ...the model is not
    assert view.size_combo.currentData() is not None  # the one-branch Resolution entries are back


def test_a_broken_headings_file_gives_the_estimates_without_the_truth(window, tmp_path, two_branch_ckpt, wait_ready):
    from dmlviewer.core.data.cross_view import HEADINGS_FILE, make_cross_view_data

    root = make_cross_view_data(tmp_path / "cv", pairs=4, seed=1, aerial_size=AERIAL, panorama_shape=PANORAMA)
    (root / HEADINGS_FILE).write_text("street,heading_deg\nstreetview/panos/0000001.jpg,north\n")
    assert window.open_checkpoint(two_branch_ckpt)
    assert window.open_dataset(root)
    wait_ready(window.pair_view)
    got = window.pair_view.orientation
    assert got is not None and got["true_heading_deg"] is None
    assert all(got[name]["error_deg"] is None for name in ("partial_map", "overall_map"))
    assert not window.dialogs  # said in the log, never a dialog or a traceback for an extra


def test_the_status_bar_names_both_branches_of_a_two_branch_model():
    from dmlviewer.gui.doors.model_labels import model_summary

    assert model_summary(tiny_two_branch(PANORAMA, AERIAL)) == "two-branch small_cnn · gap · 16-d"
    mixed = tiny_two_branch(PANORAMA, AERIAL)
    mixed.reference.config["pooling"] = "gmp"  # the line reads each branch's own config
    assert model_summary(mixed) == "two-branch small_cnn · gap / gmp · 16-d"


def _legend_top(pane) -> float:
    """The top edge of the pane's orientation legend (a label under the view) in its column's
    coordinates."""
    from PySide6.QtCore import QPoint

    return float(pane.guide_legend.mapTo(pane.graphics, QPoint(0, 0)).y())


def _image_bottom(pane) -> float:
    """The bottom edge of the pane's photograph in its column's coordinates."""
    h, _ = pane.shape
    return float(pane.map_to_widget(0.0, h - 0.5).y())


def test_the_orientation_legend_sits_under_the_aerial_image_with_one_and_two_models(loaded, tmp_path, qtbot):
    """Issue 31 item 6: the legend never covers the aerial image (and the partial map hovered
    there), also when a second model halves the panes' height."""
    view = loaded.pair_view
    aerial = view.panes[REFERENCE]
    qtbot.wait(50)
    assert aerial.guide_legend.isVisible() and _legend_top(aerial) >= _image_bottom(aerial) - 1
    loaded.open_compare(tiny_two_branch_checkpoint(tmp_path, PANORAMA, AERIAL))
    qtbot.waitUntil(lambda: view.comparing and view.rows[1].state in ("ready", "failed"), timeout=30000)
    assert view.rows[1].state == "ready"
    qtbot.wait(50)
    assert aerial.height() < 0.6 * view.sides.height()  # half the height: the image fills it
    assert abs(view.rows[1].panes[REFERENCE].width() - aerial.width()) <= 2  # row B split as row A
    assert aerial.guide_legend.isVisible() and _legend_top(aerial) >= _image_bottom(aerial) - 1
    hover(view.panes[QUERY], view.link, 100.0, 20.0)  # the hovered map shows whole above the legend
    assert aerial.overlay_image().ndim == 3


def test_square_pairs_after_a_cross_view_pair_share_the_row_equally(loaded, wait_ready, qtbot):
    """Issue 31 item 6: the panorama's larger share of the row ends with the cross-view pairs."""
    view = loaded.pair_view
    q, r = view.panes
    assert q.width() > r.width() + 20
    aerial = loaded.reference_index
    loaded.set_pair(aerial, (aerial + 2) % len(loaded.dataset))  # two square aerial images
    assert not view.images.cross_view
    qtbot.wait(50)
    assert abs(q.width() - r.width()) <= 2
