"""The dataset browser: virtualized on 120,000 rows, decodes only what is on screen, filters."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from dmlviewer.core.data import Dataset
from dmlviewer.gui.retrieval.browser import INDEX_ROLE, DatasetBrowser
from dmlviewer.gui.retrieval.thumbnails import ThumbnailLoader

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
    assert browser.model.count() == N
    assert browser.model.rowCount() * browser.model.columns >= N  # grid rows x columns
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
        assert browser.position_rect(rows.start).intersects(vp)
        assert browser.position_rect(rows.stop - 1).intersects(vp)
        assert not browser.position_rect(rows.stop).intersects(vp) if rows.stop < N else True
        assert not browser.position_rect(rows.start - 1).intersects(vp) if rows.start > 0 else True
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
    browser.set_class_filter(7)
    assert browser.class_combo.currentText() == "7: class7"
    np.testing.assert_array_equal(browser.model.rows, np.flatnonzero((ds.split == "test") & (ds.labels == 7)))
    browser.search.setText("IMG_0012")  # case-insensitive substring of the file name
    qtbot.waitUntil(lambda: browser.model.count() < 600, timeout=2000)
    want = [i for i in range(N) if ds.split[i] == "test" and ds.labels[i] == 7 and "img_0012" in ds.paths[i]]
    assert browser.model.rows.tolist() == want
    assert browser.count.text() == f"{len(want)} of {N:,} images"
    browser.class_combo.setCurrentIndex(0)
    browser.split_combo.setCurrentIndex(0)
    browser.search.clear()
    qtbot.waitUntil(lambda: browser.model.count() == N, timeout=2000)


def test_click_chooses_the_query_and_ctrl_click_the_reference(qtbot, browser):
    browser.set_dataset(fake_listing(40))
    chosen = []
    browser.query_chosen.connect(lambda i: chosen.append(("query", i)))
    browser.reference_chosen.connect(lambda i: chosen.append(("reference", i)))
    view = browser.view
    for row, modifier in ((3, Qt.NoModifier), (5, Qt.ControlModifier)):
        QTest.mouseClick(view.viewport(), Qt.LeftButton, modifier, browser.position_rect(row).center())
    assert chosen == [("query", 3), ("reference", 5)]
    browser.set_marks(3, 5)
    assert browser.model.cell(3).data(Qt.UserRole + 2) == "query"
    assert browser.model.cell(5).data(Qt.UserRole + 2) == "reference"
    assert browser.model.cell(5).data(INDEX_ROLE) == 5
    # the empty cells after the last image choose nothing
    last = browser.model.cell(browser.model.rowCount() * browser.model.columns - 1)
    if browser.model.position(last) is None:
        QTest.mouseClick(view.viewport(), Qt.LeftButton, Qt.NoModifier, view.visualRect(last).center())
        assert chosen == [("query", 3), ("reference", 5)]


def test_name_search_matches_substrings_like_python(qtbot, browser):
    names = ["Äpfel_01.JPG", "apfel_02.jpg", "Birne.png", "x/y/zz_äpfel.jpg", "nested/Äpfel_03.jpeg", "a"]
    ds = Dataset(root="/nonexistent-dmlviewer", format="folder", paths=names, labels=np.zeros(6, int),
                 class_names=["c"], split=np.array(["test"] * 6), boxes=None)
    browser.set_dataset(ds)
    for text in ("äpfel", "PFEL_0", ".jp", "a", "g", "zz", "l_01.jpg", "birne.png", "nothing", "/"):
        want = [i for i, p in enumerate(names) if text.lower() in p.rsplit("/", 1)[-1].lower()]
        assert browser.model.name_matches(text).tolist() == want, text


def test_columns_follow_the_width_and_keep_the_current_image(qtbot, browser):
    browser.set_dataset(fake_listing(1000))
    browser.select_index(500)
    cell = browser.view.gridSize().width()
    for width in (3 * cell + 60, 5 * cell + 60, 2 * cell + 60):
        browser.resize(width, 640)
        qtbot.wait(30)
        assert browser.model.columns == max(1, browser.view.viewport().width() // cell)
        assert browser.model.position(browser.view.currentIndex()) == 500
        assert browser.position_rect(500).intersects(browser.view.viewport().rect())


def test_the_highlight_follows_a_query_picked_elsewhere(qtbot, browser):
    """Issue 23 item 11: a query chosen outside the browser (the retrieval panel, the embedding
    view, a restored session) moves the selection onto it and scrolls it into view; no signal
    of the browser's own fires (nothing loops back)."""
    browser.set_dataset(fake_listing(1000))
    chosen = []
    browser.query_chosen.connect(chosen.append)
    browser.reference_chosen.connect(chosen.append)
    QTest.mouseClick(browser.view.viewport(), Qt.LeftButton, Qt.NoModifier, browser.position_rect(2).center())
    assert chosen == [2]
    browser.set_marks(2, None)
    assert browser.model.position(browser.view.currentIndex()) == 2
    browser.set_marks(700, 2)  # picked elsewhere, far down the list
    assert browser.model.position(browser.view.currentIndex()) == 700
    assert browser.view.selectionModel().isSelected(browser.view.currentIndex())
    assert browser.position_rect(700).intersects(browser.view.viewport().rect())
    assert chosen == [2]
    browser.set_marks(None, None)
    assert not browser.view.currentIndex().isValid() and not browser.view.selectionModel().hasSelection()


def test_a_one_result_search_draws_no_empty_tile(qtbot, browser):
    """The cells after the last image of the grid are blank (a one-result name search showed a
    grey tile beside its image)."""
    browser.set_dataset(fake_listing(1000))
    browser.search.setText("img_000007.jpg")
    qtbot.waitUntil(lambda: browser.model.count() == 1, timeout=5000)
    assert browser.model.columns >= 2
    settle(qtbot, browser)
    image = browser.view.viewport().grab().toImage()
    empty = browser.view.visualRect(browser.model.cell(1))
    tile = browser.view.visualRect(browser.model.cell(0))
    colours = {image.pixel(x, y) for x in range(empty.left(), empty.right(), 3)
               for y in range(empty.top(), empty.bottom(), 3)}
    assert len(colours) == 1  # background only
    assert len({image.pixel(x, y) for x in range(tile.left(), tile.right(), 3)
                for y in range(tile.top(), tile.bottom(), 3)}) > 1  # the image's own tile is drawn
