"""The dataset browser: virtualized on 120,000 rows, decodes only what is on screen, filters."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from dmlviewer.core.data import Dataset
from dmlviewer.gui.browser import INDEX_ROLE, DatasetBrowser
from dmlviewer.gui.thumbnails import ThumbnailLoader

pytestmark = pytest.mark.gui

N = 120_000


def fake_listing(n: int = N) -> Dataset:
    """A listing whose files do not exist (the browser must not care until it decodes)."""
    idx = np.arange(n)
    return Dataset(root="/nonexistent-dmlviewer", format="folder",
                   paths=[f"c{i % 100:03d}/img_{i:06d}.jpg" for i in range(n)],
                   labels=idx % 100, class_names=[f"class{c}" for c in range(100)],
                   split=np.where(idx % 2 == 0, "train", "test"), boxes=None)


class CountingLoad:
    def __init__(self) -> None:
        self.paths: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, path: str):
        with self._lock:
            self.paths.append(path)
        raise OSError("no such file")


@pytest.fixture
def browser(qtbot):
    load = CountingLoad()
    loader = ThumbnailLoader(load=load)
    widget = DatasetBrowser(loader)
    qtbot.addWidget(widget)
    widget.resize(420, 640)
    widget.show()
    qtbot.waitExposed(widget)
    widget.load = load
    yield widget
    loader.set_visible("browser", [])
    loader.wait_idle()


def settle(qtbot, browser) -> None:
    qtbot.wait(20)  # the visible-range timer and the paint run
    browser.loader.wait_idle()
    qtbot.wait(20)  # results (failures) delivered


def test_scrolling_120k_rows_decodes_only_the_visible_thumbnails(qtbot, browser):
    browser.set_dataset(fake_listing())
    assert browser.model.rowCount() == N
    settle(qtbot, browser)
    bar = browser.view.verticalScrollBar()
    shown: set[int] = set(browser.model.rows[browser.visible_rows().start:browser.visible_rows().stop].tolist())
    for value in np.linspace(0, bar.maximum(), 7).astype(int)[1:]:
        bar.setValue(int(value))
        settle(qtbot, browser)
        rows = browser.visible_rows()
        assert 0 < len(rows) < 100
        # The geometric range is what the view shows: first and last cells intersect the viewport.
        vp = browser.view.viewport().rect()
        assert browser.view.visualRect(browser.model.index(rows.start)).intersects(vp)
        assert browser.view.visualRect(browser.model.index(rows.stop - 1)).intersects(vp)
        assert not browser.view.visualRect(browser.model.index(rows.stop)).intersects(vp) \
            if rows.stop < N else True
        shown |= set(browser.model.rows[rows.start:rows.stop].tolist())
    decoded = browser.load.paths
    assert len(decoded) == len(set(decoded))  # nothing decoded twice
    assert {browser.loader.path(i) for i in shown} >= set(decoded)
    assert len(decoded) <= len(shown) < 700
    # The last screen was decoded in full (each failed: a broken marker, no new request).
    last = browser.visible_rows()
    for row in last:
        index = int(browser.model.rows[row])
        assert browser.loader.broken_reason(index) == "OSError: no such file"


def test_unreadable_images_are_reported_once_with_reason(qtbot, browser):
    browser.set_dataset(fake_listing(50))
    problems = []
    browser.loader.failed.connect(lambda i, path, reason: problems.append((path, reason)))
    settle(qtbot, browser)
    assert problems and len(problems) == len({p for p, _ in problems})
    assert all(reason == "OSError: no such file" and path.startswith("/nonexistent-dmlviewer/")
               for path, reason in problems)
    browser.view.viewport().repaint()  # painting again asks for nothing new
    settle(qtbot, browser)
    assert len(browser.load.paths) == len(problems)


def test_filters_and_search_select_the_right_rows(qtbot, browser):
    ds = fake_listing()
    browser.set_dataset(ds)
    browser.split_combo.setCurrentIndex(browser.split_combo.findData("test"))
    browser.class_combo.setCurrentIndex(browser.class_combo.findData(7))
    np.testing.assert_array_equal(browser.model.rows, np.flatnonzero((ds.split == "test") & (ds.labels == 7)))
    browser.search.setText("IMG_0012")  # case-insensitive substring of the file name
    qtbot.waitUntil(lambda: browser.model.rowCount() < 600, timeout=2000)
    want = [i for i in range(N) if ds.split[i] == "test" and ds.labels[i] == 7 and "img_0012" in ds.paths[i]]
    assert browser.model.rows.tolist() == want
    assert browser.count.text() == f"{len(want)} of {N:,} images"
    browser.class_combo.setCurrentIndex(0)
    browser.split_combo.setCurrentIndex(0)
    browser.search.clear()
    qtbot.waitUntil(lambda: browser.model.rowCount() == N, timeout=2000)


def test_click_chooses_the_query_and_ctrl_click_the_reference(qtbot, browser):
    browser.set_dataset(fake_listing(40))
    chosen = []
    browser.query_chosen.connect(lambda i: chosen.append(("query", i)))
    browser.reference_chosen.connect(lambda i: chosen.append(("reference", i)))
    view = browser.view
    for row, modifier in ((3, Qt.NoModifier), (5, Qt.ControlModifier)):
        rect = view.visualRect(browser.model.index(row))
        QTest.mouseClick(view.viewport(), Qt.LeftButton, modifier, rect.center())
    assert chosen == [("query", 3), ("reference", 5)]
    browser.set_marks(3, 5)
    assert browser.model.index(3).data(Qt.UserRole + 2) == "query"
    assert browser.model.index(5).data(Qt.UserRole + 2) == "reference"
    assert browser.model.index(5).data(INDEX_ROLE) == 5
