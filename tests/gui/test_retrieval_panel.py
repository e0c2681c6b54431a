"""Retrieval panel: neighbours from features computed in the background, region retrieval."""

from __future__ import annotations

from pathlib import Path

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
    assert not panel.searching  # answered (screenshots wait for this)
    panel.refresh()
    assert panel.searching
    qtbot.waitUntil(lambda: not panel.searching, timeout=10000)
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
    assert pane.region_shown
    panel.whole_button.click()
    qtbot.waitUntil(lambda: panel.results == retrieve(window.features, row, panel.k_spin.value()), timeout=10000)
    # "Whole image" takes the region's rectangle away and disarms region mode.
    assert not pane.region_shown and not window.pair_view.region_button.isChecked()


def test_region_button_shows_when_it_is_armed(window, qtbot):
    button = window.pair_view.region_button
    before = button.grab().toImage()
    button.click()
    assert button.isChecked() and window.pair_view.panes[0].view.region_mode
    assert "drag" in button.text()
    # the toolbar makes room for the longer text (laid out at the next event loop pass): not cut
    qtbot.waitUntil(lambda: button.fontMetrics().horizontalAdvance(button.text()) < button.width(), timeout=2000)
    armed = button.grab().toImage()
    # visibly different: the armed button's most common colour is the region rectangle's cyan
    from collections import Counter

    def dominant(image):
        pixels = (image.pixel(x, y) for x in range(image.width()) for y in range(image.height()))
        return Counter(pixels).most_common(1)[0][0]

    assert dominant(armed) != dominant(before)
    from PySide6.QtGui import QColor

    c = QColor(dominant(armed))
    assert c.blue() > 150 and c.green() > 150 and c.red() < 80
    button.click()
    assert not button.isChecked() and button.text() == "Region"


def test_a_new_result_set_starts_at_hit_one(window, demo_root, small_ckpt, wait_ready, qtbot):
    """Issue 23 item 6: the list scrolled down for one query shows hit 1 for the next query."""
    assert window.open_checkpoint(small_ckpt) and window.open_dataset(demo_root)
    wait_ready(window.pair_view)
    qtbot.waitUntil(lambda: window.features is not None, timeout=60000)
    panel = window.retrieval
    panel.k_spin.setValue(len(window.dataset) - 1)
    window.retrieval_dock.resize(260, 300)
    panel.list.setFixedHeight(220)  # room for a row or two: the list scrolls
    qtbot.waitUntil(lambda: len(panel.results) == panel.k_spin.value() and not panel.searching, timeout=10000)
    bar = panel.list.verticalScrollBar()
    qtbot.waitUntil(lambda: bar.maximum() > 0, timeout=5000)
    bar.setValue(bar.maximum())
    assert not panel.list.viewport().rect().intersects(panel.list.visualItemRect(panel.list.item(0)))
    first = panel.results
    other = next(i for i in range(len(window.dataset)) if i != window.query_index)
    window.set_pair(other, None)
    qtbot.waitUntil(lambda: panel.results != first and not panel.searching, timeout=10000)
    assert bar.value() == 0
    assert panel.list.viewport().rect().contains(panel.list.visualItemRect(panel.list.item(0)))


def test_a_one_result_search_shows_one_tile(window, demo_root, small_ckpt, wait_ready, qtbot):
    assert window.open_checkpoint(small_ckpt) and window.open_dataset(demo_root)
    wait_ready(window.pair_view)
    qtbot.waitUntil(lambda: window.features is not None, timeout=60000)
    panel = window.retrieval
    panel.k_spin.setValue(1)
    qtbot.waitUntil(lambda: len(panel.results) == 1 and not panel.searching, timeout=10000)
    assert panel.list.count() == 1


def test_hover_benchmark_measures_real_events(qapp):
    from dmlviewer.bench.hover import measure

    result = measure(events=40, image_size=64, warmup=5)
    assert result["sent"] == 40 and result["events"] >= 35  # distinct points: the overlay changed
    assert 0 < result["p50_ms"] <= result["p95_ms"] and result["baseline_ms"] > 0
    assert result["ratio"] == pytest.approx(result["p50_ms"] / result["baseline_ms"], rel=0.01)


def test_another_checkpoint_never_shows_the_previous_models_neighbours(window, demo_root, small_ckpt, agroup_ckpt,
                                                                       wait_ready, qtbot, tmp_path):
    """Features carry the checkpoint's sha256: after opening another checkpoint the panel drops
    the old model's neighbours at once and re-extracts with the new model; a feature file of
    another model opened by hand is flagged and its neighbours are not shown."""
    from dmlviewer.core.data import make_demo_data
    from dmlviewer.core.evaluate.retrieval import retrieve
    from dmlviewer.gui.window import settings

    assert window.open_checkpoint(small_ckpt) and window.open_dataset(demo_root)
    qtbot.waitUntil(lambda: window.features is not None, timeout=60000)
    panel = window.retrieval
    qtbot.waitUntil(lambda: len(panel.results) == panel.k_spin.value(), timeout=10000)
    first_path, first_sha = window.features_path, window.features.attrs["checkpoint_sha256"]
    assert first_sha == window.checkpoint_info["sha256"]
    # Written to the user's output folder, never to the cache or next to the package.
    assert Path(first_path).parent == settings.output_dir() / "features"

    assert window.open_checkpoint(agroup_ckpt)
    second_sha = window.checkpoint_info["sha256"]
    assert second_sha != first_sha
    assert panel.results == [] and panel.list.count() == 0  # nothing of the first model on screen
    qtbot.waitUntil(lambda: window.features is not None
                    and window.features.attrs["checkpoint_sha256"] == second_sha, timeout=60000)
    qtbot.waitUntil(lambda: len(panel.results) == panel.k_spin.value(), timeout=10000)
    row = window.features.paths.index(window.dataset.paths[window.query_index])
    assert panel.results == retrieve(window.features, row, panel.k_spin.value())

    # The first model's file, opened by hand under the second model: flagged, not shown.
    assert window.open_features(first_path)
    qtbot.wait(200)
    assert panel.mismatch() and panel.results == [] and panel.list.count() == 0
    assert "another checkpoint" in panel.source.text() and panel.extract_button.isVisible()
    assert "<b>Features of another model.</b>" in panel.source.text()
    assert panel.extract_button.text() == "Compute features of the open model"
    assert "another checkpoint" in window.statusBar().currentMessage()

    # Issue 42 item 3: a feature file of another dataset is headed as such, as its text says.
    other = tmp_path / "other"
    make_demo_data(other, classes=3, per_class=3, size=64, seed=1)
    assert window.open_dataset(other)
    qtbot.waitUntil(lambda: window.features is not None and "other-" in Path(window.features_path).name
                    and window.jobs.extract_job is None, timeout=60000)
    assert window.open_features(first_path)
    qtbot.wait(200)
    text = panel.source.text()
    assert "computed from another dataset" in text and "<b>Features of another dataset.</b>" in text
    assert "another model" not in text and panel.extract_button.text() == "Compute features of the open dataset"


def test_during_an_extraction_compute_waits_and_reopening_the_dataset_keeps_computing(
        window, demo_root, small_ckpt, agroup_ckpt, tmp_path, qtbot, monkeypatch):
    """Issue 31 item 4: while the open model's features are computed, the panel says so and its
    Compute button waits (no second request); opening the same dataset again mid-extraction
    keeps "Computing…" (never "Features of another model") while the job runs."""
    import threading

    import dmlviewer.core.evaluate.extract as extract_module
    from dmlviewer.gui.window import settings

    real = extract_module.extract_features
    gate, calls = threading.Event(), []

    def held(model, dataset, out, **kwargs):
        calls.append(Path(out))
        if len(calls) > 1:  # the second model's extraction waits for the test
            gate.wait(60)
        yield from real(model, dataset, out, **kwargs)

    monkeypatch.setattr(extract_module, "extract_features", held)
    settings.set_output_dir(tmp_path / "outputs")
    assert window.open_checkpoint(small_ckpt) and window.open_dataset(demo_root)
    qtbot.waitUntil(lambda: window.features is not None, timeout=60000)
    panel = window.retrieval
    try:
        assert window.open_checkpoint(agroup_ckpt)  # features of another model: recomputed
        qtbot.waitUntil(lambda: len(calls) == 2, timeout=30000)
        button = panel.extract_button
        assert "Computing" in panel.source.text() and "another model" not in panel.source.text()
        assert button.isVisible() and not button.isEnabled() and "Computing" in button.text()
        button.click()  # disabled: nothing is asked
        assert window.open_dataset(demo_root)  # the open dataset again, mid-extraction
        qtbot.wait(100)
        assert "Computing" in panel.source.text() and "another model" not in panel.source.text()
        assert not button.isEnabled() and window.jobs.extract_job is not None
    finally:
        gate.set()
    sha = window.checkpoint_info["sha256"]
    qtbot.waitUntil(lambda: window.features is not None and window.features.attrs["checkpoint_sha256"] == sha,
                    timeout=60000)
    assert len(calls) == 2  # one extraction for the second model, however often it was asked for
    assert "Computing" not in panel.source.text() and not button.isVisible()
    qtbot.waitUntil(lambda: len(panel.results) == panel.k_spin.value(), timeout=10000)
