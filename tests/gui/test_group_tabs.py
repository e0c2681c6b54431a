"""Group attention tabs: one tab per group for a grouping head, an explanation otherwise."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPointF
from PySide6.QtTest import QTest

from dmlviewer.gui.pair.colormaps import overlay_lut
from dmlviewer.gui.pair.group_tabs import NO_GROUPS_TEXT
from dmlviewer.core.explain.hover import overlay_shape

pytestmark = pytest.mark.gui


def test_a_grouping_model_gets_one_tab_per_group(window, demo_root, agroup_ckpt, wait_ready, qtbot):
    assert window.open_checkpoint(agroup_ckpt) and window.open_dataset(demo_root)
    window.tabs.setCurrentWidget(window.group_tabs)
    tabs = window.group_tabs
    assert tabs.active and tabs.group_count == 4
    assert [tabs.tabs.tabText(i) for i in range(4)] == ["Group 1", "Group 2", "Group 3", "Group 4"]
    wait_ready(window.pair_view)
    qtbot.waitUntil(lambda: tabs._data is not None, timeout=20000)
    expl = window.pair_view.explanation

    # Shares: each group's term of the cosine; together they are the similarity.
    assert sum(tabs._data["shares"]) == pytest.approx(expl.similarity, abs=1e-5)
    assert sum(tabs._data["p2p_sums"]) == pytest.approx(float(expl.point_to_point.sum()), abs=1e-5)

    # By default each tab shows the group's decomposition map: its tensor summed over the other
    # image, on one scale for all groups; the groups' maps add up to the Decomposition map.
    from dmlviewer.core.explain.groups import group_maps

    assert tabs.kind_combo.currentData() == "group_decomposition"
    assert tabs.kind_combo.currentText().startswith("Group decomposition")
    names = [tabs.kind_combo.itemText(i) for i in range(tabs.kind_combo.count())]
    assert all("_" not in name for name in names)  # display names, not internal ones
    grids = {side: group_maps(expl, side) for side in ("query", "reference")}
    np.testing.assert_allclose(grids["query"].sum(0), expl.overall_grid("decomposition", "query"), atol=1e-5)
    top = max(float(g.max()) for g in grids.values())
    for p in (1, 3):
        tabs.tabs.setCurrentIndex(p)
        for pane, side in zip(tabs.panes, ("query", "reference")):
            want = np.maximum(grids[side][p], 0)  # the grid's cells, stretched over the image
            np.testing.assert_allclose(pane.overlay_image(), want, atol=1e-6)
            assert pane.overlay_item.levels == pytest.approx((0.0, top))

    # Each tab shows that group's A-grouping attention on both images.
    tabs.kind_combo.setCurrentIndex(tabs.kind_combo.findData("a_grouping"))
    for p in (0, 2):
        tabs.tabs.setCurrentIndex(p)
        for pane, side in zip(tabs.panes, ("query", "reference")):
            np.testing.assert_array_equal(pane.overlay_image(), expl.attention_maps(side)["a_grouping"][p])
        assert f"Group {p + 1} of 4" in tabs.share_label.text()

    # Group-wise hover: the reference shows the partial map of the group's own tensor.
    q, r = tabs.panes
    scene = q.view.mapViewToScene(QPointF(20.5, 30.5))
    QTest.mouseMove(q.graphics.viewport(), q.graphics.mapFromScene(scene))
    tabs.link.flush()
    side, x, y = tabs.link.hover
    from dmlviewer.core.explain.hover import HoverRenderer

    # on the pair view's whole-pair scale, so that groups compare with each other
    from dmlviewer.core.explain.hover import pair_scale

    scale = pair_scale(expl.point_to_point)
    renderer = HoverRenderer(expl.group_point_to_point(2), expl.image_shape_query, expl.grid_query,
                             overlay_shape(expl.image_shape_reference), expl.grid_reference,
                             lut=overlay_lut("jet"), scale=scale)
    np.testing.assert_array_equal(r.overlay_image(), renderer.render(x, y))
    share = 100.0 * float(renderer.grid_map(x, y).sum()) / expl.similarity
    assert f"{share:+.1f}%" in r.readout.text() and "group 3" in r.readout.text()


def test_a_model_without_groups_explains_the_empty_area(window, demo_root, small_ckpt, wait_ready, qtbot):
    tabs = window.group_tabs
    assert "Open a checkpoint" in tabs.explain_label.text() and not tabs.active
    assert window.open_checkpoint(small_ckpt) and window.open_dataset(demo_root)
    wait_ready(window.pair_view)
    assert tabs.group_count == 0 and not tabs.active
    assert tabs.stack.currentWidget() is tabs.explain_label
    assert tabs.explain_label.text() == NO_GROUPS_TEXT.format(grouping="none")


def test_static_overlay_fades_in_from_transparent_without_a_dark_low_end(window, demo_root, agroup_ckpt,
                                                                          wait_ready, qtbot):
    """Issue 23 item 10: inferno's dark low end hid a weak group map on a red body. The group
    tab's maps use a table whose alpha rises from 0 and whose colours are all light."""
    from dmlviewer.gui.pair.colormaps import STATIC_OVERLAY

    lut = overlay_lut(STATIC_OVERLAY)
    assert lut.shape == (256, 4) and lut[0, 3] == 0 and np.all(np.diff(lut[:, 3].astype(int)) >= 0)
    luminance = lut[:, :3].astype(float) @ [0.2126, 0.7152, 0.0722]
    dark = overlay_lut("inferno")[:, :3].astype(float) @ [0.2126, 0.7152, 0.0722]
    assert luminance.min() > 60 and dark[:64].min() < 10  # inferno starts black, this one does not
    # hue away from red: more green than red where a weak value fades in
    assert np.all(lut[1:64, 1] > lut[1:64, 0])
    assert window.open_checkpoint(agroup_ckpt) and window.open_dataset(demo_root)
    window.tabs.setCurrentWidget(window.group_tabs)
    wait_ready(window.pair_view)
    tabs = window.group_tabs
    qtbot.waitUntil(lambda: tabs._data is not None, timeout=20000)
    for pane in tabs.panes:  # the group decomposition: these colours, alpha from 0 rising (issue 42 item 6)
        drawn = pane.overlay_item.lut
        np.testing.assert_array_equal(drawn[:, :3], lut[:, :3])
        assert drawn[0, 3] == 0 and np.all(np.diff(drawn[:, 3].astype(int)) >= 0)


def test_a_sparse_group_map_is_seen_and_its_concentration_said(window, demo_root, wait_ready, qtbot):
    """Issue 42 item 6: global max pooling puts a group's share on a few cells, and its map
    looked empty. Each group's decomposition map is drawn as the grid's own cells; the fewest
    cells holding 80 % of its positive share (computed here from the grid) are outlined and
    drawn clearly opaque, and the share line says how many they are on each image."""
    from PySide6.QtCore import QPointF

    from dmlviewer.core.explain.groups import group_maps
    from dmlviewer.gui.pair.hover_link import SIDE_NAMES
    from dmlviewer.resources import resource_path

    assert window.open_checkpoint(resource_path("demo_checkpoint.pt")) and window.open_dataset(demo_root)
    window.tabs.setCurrentWidget(window.group_tabs)
    wait_ready(window.pair_view)
    tabs = window.group_tabs
    qtbot.waitUntil(lambda: tabs._data is not None, timeout=30000)
    expl = window.pair_view.explanation
    grids = {side: group_maps(expl, side) for side in SIDE_NAMES}
    fewest = []
    for p in range(tabs.group_count):
        tabs.tabs.setCurrentIndex(p)
        said = []
        for pane, side in zip(tabs.panes, SIDE_NAMES):
            grid = np.maximum(grids[side][p], 0.0)
            np.testing.assert_allclose(pane.overlay_image(), grid, atol=1e-6)  # the grid's numbers, not resized
            order = np.argsort(-grid.ravel(), kind="stable")
            k = int(np.argmax(np.cumsum(grid.ravel()[order]) >= 0.8 * grid.sum() * (1 - 1e-9))) + 1
            want = np.zeros(grid.size, dtype=bool)
            want[order[:k]] = True
            want = want.reshape(grid.shape)
            fewest.append(k / grid.size)
            # drawn opacity of those cells: the table's alpha at their level times the item's opacity
            lo, hi = pane.overlay_item.levels
            index = np.clip(((grid[want] - lo) / (hi - lo) * 256).astype(int), 0, 255)
            alpha = pane.overlay_item.lut[index, 3] / 255.0 * pane.overlay_item.opacity()
            assert alpha.min() >= 0.5, (p, side, alpha.min())
            # and outlined: the outline encloses the centres of exactly those cells
            assert pane.cells_item.isVisible()
            (height, width), (h, w) = pane.shape, grid.shape
            path = pane.cells_item.path()
            inside = np.array([[path.contains(QPointF((j + 0.5) * width / w, (i + 0.5) * height / h))
                                for j in range(w)] for i in range(h)])
            np.testing.assert_array_equal(inside, want)
            said.append(f"{k} of {grid.size} {side} cells")
        assert f"80 % of its positive share on {said[0]} and {said[1]} (outlined)" in tabs.share_label.text()
    assert min(fewest) <= 0.1  # the demo checkpoint's max pooling: a group's share on a tenth of the cells or less
    # another map of the head: no outlines (they belong to the group decomposition)
    other = next(i for i in range(tabs.kind_combo.count()) if tabs.kind_combo.itemData(i) != "group_decomposition")
    tabs.kind_combo.setCurrentIndex(other)
    assert not any(pane.cells_item.isVisible() for pane in tabs.panes)
