"""The dataset browser and the group tabs follow the session (issue 23): its dataset, pair and
primary model, changed on the session directly (as a notebook does), with no window method
called; they stop following it once shut down."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import Qt

from dmlviewer.core.data import Dataset, open_dataset
from dmlviewer.core.data.identity import DatasetIdentity
from dmlviewer.core.models import open_model
from dmlviewer.core.session import Session
from dmlviewer.gui.retrieval.browser import DatasetBrowser
from dmlviewer.gui.pair.group_tabs import NO_MODEL_TEXT, GroupTabs
from dmlviewer.gui.pair.pair_view import PairImages
from dmlviewer.gui.retrieval.thumbnails import ThumbnailLoader

pytestmark = pytest.mark.gui

MARK = Qt.UserRole + 2  # browser.MARK_ROLE


def _unreadable(path: str):
    raise OSError("not decoded in this test")


def _marks(browser: DatasetBrowser) -> dict[int, str]:
    """Dataset index -> "query"/"reference" of the marked cells."""
    model = browser.model
    return {int(model.rows[p]): model.cell(p).data(MARK) for p in range(model.count()) if model.cell(p).data(MARK)}


def _other_listing(n: int = 12) -> Dataset:
    return Dataset(root="/nonexistent-dmlviewer", format="folder", paths=[f"c{i % 3}/img_{i:03d}.jpg" for i in range(n)],
                   labels=np.arange(n) % 3, class_names=["a", "b", "c"], split=np.full(n, "test"), boxes=None)


@pytest.fixture
def bound(qtbot):
    """A session with a browser and group tabs bound to it (no window)."""
    session = Session()
    loader = ThumbnailLoader(load=_unreadable)
    browser = DatasetBrowser(loader, session=session)
    tabs = GroupTabs(session=session)
    for widget in (browser, tabs):
        qtbot.addWidget(widget)
    yield session, browser, tabs
    browser.shutdown()
    tabs.shutdown()
    loader.set_visible("browser", [])
    loader.wait_idle()


def test_the_browser_follows_the_sessions_dataset_and_pair(bound, demo_root):
    session, browser, _tabs = bound
    dataset = open_dataset(str(demo_root))
    session.set_dataset(dataset, str(demo_root))
    assert browser.model.dataset is dataset and browser.model.count() == len(dataset)

    session.set_pair(3, 5)
    assert _marks(browser) == {3: "query", 5: "reference"}
    assert browser.model.position(browser.view.currentIndex()) == 3  # the selection follows the query
    session.set_pair(5, 3)  # swapped
    assert _marks(browser) == {5: "query", 3: "reference"}
    session.set_pair(4, None)  # half a pair: nothing marked (the pair view shows none either)
    assert _marks(browser) == {}

    # Another dataset clears the pair: the browser lists it, nothing marked; a pair on it is marked.
    session.set_pair(3, 5)
    other = _other_listing()
    session.set_dataset(other, "/nonexistent-dmlviewer", identity=DatasetIdentity("/nonexistent-dmlviewer", "x"))
    assert browser.model.dataset is other and browser.model.count() == len(other)
    assert _marks(browser) == {}
    session.set_pair(1, 7)
    assert _marks(browser) == {1: "query", 7: "reference"}
    session.set_dataset(None, None)
    assert browser.model.dataset is None and browser.count.text() == "No dataset"


def test_the_group_tabs_follow_the_sessions_primary_model(bound, small_ckpt, agroup_ckpt):
    session, _browser, tabs = bound
    grouped, grouped_info = open_model(str(agroup_ckpt))
    small, small_info = open_model(str(small_ckpt))
    session.set_model(grouped, grouped_info)
    assert tabs.model is grouped and tabs.active and tabs.group_count == 4

    session.set_model(small, small_info, slot="compare")  # model B: not shown here
    assert tabs.model is grouped and tabs.group_count == 4

    # A model change while a pair is shown keeps the photographs (the new model explains them).
    image = np.zeros((32, 32, 3), dtype=np.uint8)
    images = PairImages(image, image + 1, "Q", "R")
    tabs.set_pair(images)
    session.set_model(small, small_info)
    assert tabs.model is small and not tabs.active and tabs.group_count == 0
    assert tabs.images is images and tabs.panes[1].shape == (32, 32)
    session.set_model(None)
    assert tabs.model is None and tabs.explain_label.text() == NO_MODEL_TEXT


def test_widgets_made_on_an_open_session_show_it_and_stop_following_it_once_shut_down(qtbot, demo_root,
                                                                                       agroup_ckpt):
    session = Session()
    dataset = open_dataset(str(demo_root))
    session.set_dataset(dataset, str(demo_root))
    session.set_pair(2, 6)
    model, info = open_model(str(agroup_ckpt))
    session.set_model(model, info)
    loader = ThumbnailLoader(load=_unreadable)
    browser, tabs = DatasetBrowser(loader, session=session), GroupTabs(session=session)
    for widget in (browser, tabs):
        qtbot.addWidget(widget)
    assert browser.model.dataset is dataset and _marks(browser) == {2: "query", 6: "reference"}
    assert tabs.model is model and tabs.group_count == 4

    browser.shutdown()
    tabs.shutdown()
    session.set_pair(1, 4)
    session.set_model(None)
    # no longer redrawn (the model itself is read from the session: kept in one place, issue 39)
    assert _marks(browser) == {2: "query", 6: "reference"} and tabs.group_count == 4 and tabs.active
    loader.set_visible("browser", [])
    loader.wait_idle()


def test_the_window_follows_pair_and_model_set_on_its_session(window, demo_root, small_ckpt, agroup_ckpt, wait_ready):
    assert window.open_dataset(demo_root) and window.open_checkpoint(small_ckpt)
    session = window.session
    session.set_pair(4, 9)  # as a notebook does: no window method
    assert _marks(window.browser) == {4: "query", 9: "reference"}
    assert window.pair_view.images is not None and window.group_tabs.images is window.pair_view.images
    assert "#4" in window.pair_view.images.query_title and "#9" in window.pair_view.images.reference_title

    model, info = open_model(str(agroup_ckpt))
    session.set_model(model, info)  # a model change while the pair is shown
    assert window.group_tabs.model is model and window.group_tabs.group_count == 4
    assert window.group_tabs.images is window.pair_view.images
    wait_ready(window.pair_view)
    assert window.group_tabs.explanation is window.pair_view.explanation


def test_a_pair_that_cannot_be_read_puts_the_session_back_to_the_pair_on_screen(window, demo_root, small_ckpt,
                                                                                dialogs, tmp_path):
    """``session.set_pair`` from Python with an image that cannot be read: one dialog, and the
    session, the browser's marks and the pair view all stay on the pair shown before."""
    import shutil

    root = shutil.copytree(demo_root, tmp_path / "data")
    assert window.open_dataset(root) and window.open_checkpoint(small_ckpt)
    window.session.set_pair(4, 9)
    shown = window.pair_view.images
    dataset = window.dataset
    dataset.abspath(7).write_bytes(b"not an image")
    window.session.set_pair(4, 7)
    assert (window.query_index, window.reference_index) == (4, 9)
    assert _marks(window.browser) == {4: "query", 9: "reference"}
    assert window.pair_view.images is shown
    assert len(dialogs) == 1 and dialogs[0][0] == "Cannot read image"
