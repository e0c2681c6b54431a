"""Retrieval panel: neighbours from features computed in the background, region retrieval."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPointF, Qt
from PySide6.QtTest import QTest

pytestmark = pytest.mark.gui


def test_neighbours_and_region_retrieval(window, demo_root, small_ckpt, wait_ready, qtbot):
    from dmlviewer.core.evaluate.retrieval import retrieve
    from dmlviewer.core.explain.region import region_query

    assert window.open_checkpoint(small_ckpt) and window.open_dataset(demo_root)
    wait_ready(window.pair_view)
    # No feature file: a small dataset gets its features extracted in the job queue.
    qtbot.waitUntil(lambda: window.features is not None, timeout=60000)
    panel = window.retrieval
    qtbot.waitUntil(lambda: len(panel.results) == panel.k_spin.value(), timeout=10000)
    row = window.features.paths.index(window.dataset.paths[window.query_index])
    assert panel.results == retrieve(window.features, row, panel.k_spin.value())
    item = panel.list.item(0)
    same = window.dataset.labels[window.query_index] == panel.results[0]["label"]
    assert item.data(Qt.UserRole + 2) == bool(same)  # green frame for the query's class

    # Clicking a result makes it the reference.
    target = window.dataset.paths.index(panel.results[1]["path"])
    QTest.mouseClick(panel.list.viewport(), Qt.LeftButton, Qt.NoModifier,
                     panel.list.visualItemRect(panel.list.item(1)).center())
    assert window.reference_index == target
    wait_ready(window.pair_view)
    qtbot.wait(50)  # the panes fit the new photographs when they next lay out

    # Shift+drag a rectangle on the query pane: retrieval by that region's partial feature.
    pane = window.pair_view.panes[0]
    regions = []
    pane.region_selected.connect(regions.append)

    def at(x, y):
        return pane.graphics.mapFromScene(pane.view.mapViewToScene(QPointF(x, y)))

    vp = pane.graphics.viewport()
    QTest.mousePress(vp, Qt.LeftButton, Qt.ShiftModifier, at(8, 10))
    for k in range(1, 6):
        QTest.mouseMove(vp, at(8 + 5 * k, 10 + 6 * k))
    QTest.mouseRelease(vp, Qt.LeftButton, Qt.ShiftModifier, at(33, 40))
    assert len(regions) == 1
    y0, x0, y1, x1 = regions[0]
    assert (y0, x0, y1, x1) == pytest.approx((10, 8, 40, 33), abs=1.5)
    want = region_query(window.model, window.pair_view.images.query, regions[0], window.features,
                        k=panel.k_spin.value(), exclude=row)
    qtbot.waitUntil(lambda: panel.results == want, timeout=10000)
    # As in whole-image retrieval, the query itself is not among the results.
    assert window.dataset.paths[window.query_index] not in [r["path"] for r in panel.results]
    assert "region" in panel.header.text() and panel.whole_button.isVisible()
    panel.whole_button.click()
    qtbot.waitUntil(lambda: panel.results == retrieve(window.features, row, panel.k_spin.value()), timeout=10000)


def test_hover_benchmark_measures_real_events(qapp):
    from dmlviewer.bench.hover import measure

    result = measure(events=40, image_size=64, warmup=5)
    assert result["sent"] == 40 and result["events"] >= 35  # distinct points: the overlay changed
    assert 0 < result["p50_ms"] <= result["p95_ms"] and result["baseline_ms"] > 0
    assert result["ratio"] == pytest.approx(result["p50_ms"] / result["baseline_ms"], rel=0.01)
