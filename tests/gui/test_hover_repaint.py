"""What a hover repaints (issue 24): only the pixels that changed, each once.

A pane's viewport paints are recorded by an event filter (the region of each ``Paint``
event). A hover moves the crosshair and replaces the other pane's overlay; neither may
repaint the whole view (pyqtgraph queued an auto-range and repainted the whole view for any
moved child), and a synchronous repaint of the viewport after a new overlay leaves nothing
to paint again. The hover link still coalesces moves when drawing is slow, and the read-out
keeps the size it would get from a fresh layout.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from PySide6.QtCore import QEvent, QObject
from PySide6.QtWidgets import QApplication, QLabel

from dmlviewer.core.explain.hover import HoverPoint
from dmlviewer.gui.pair.hover_link import QUERY, HoverLink
from dmlviewer.gui.pair.image_pane import ImagePane

pytestmark = pytest.mark.gui


class PaintLog(QObject):
    """Regions of the paint events a widget receives."""

    def __init__(self, widget) -> None:
        super().__init__()
        self.regions = []
        widget.installEventFilter(self)

    def eventFilter(self, obj, event) -> bool:
        if event.type() == QEvent.Paint:
            self.regions.append(event.region())
        return False

    def area(self) -> int:
        return sum(r.width() * r.height() for region in self.regions for r in region)


def _settle(n: int = 5) -> None:
    for _ in range(n):
        QApplication.processEvents()


@pytest.fixture
def pane(qtbot):
    pane = ImagePane("test")
    qtbot.addWidget(pane)
    pane.resize(640, 480)
    rng = np.random.default_rng(0)
    pane.set_image(rng.integers(0, 255, (300, 400, 3), dtype=np.uint8))
    pane.show()
    qtbot.waitExposed(pane)
    _settle()
    return pane


def _rgba(value: int) -> np.ndarray:
    rgba = np.zeros((300, 400, 4), np.uint8)
    rgba[..., 0] = value
    rgba[..., 3] = 200
    return rgba


def test_moving_the_crosshair_repaints_thin_strips_not_the_view(pane):
    viewport = pane.graphics.viewport()
    pane.set_crosshair((100.0, 100.0))
    _settle()
    log = PaintLog(viewport)
    pane.set_crosshair((140.0, 180.0))
    _settle()
    assert log.regions, "the moved crosshair was not repainted"
    whole = viewport.width() * viewport.height()
    assert log.area() < 0.5 * whole


def test_a_pin_and_markers_do_not_move_the_view(pane):
    before = np.array(pane.view.viewRange())
    pane.set_pin((399.0, 299.0))
    pane.set_markers([(0.0, 0.0), (399.0, 299.0)])
    pane.set_crosshair((399.0, 0.0))
    _settle()
    assert np.allclose(pane.view.viewRange(), before)


def _log_after_a_first_overlay(pane) -> PaintLog:
    """The viewport's paints from now on, a first overlay already drawn and settled."""
    pane.set_rgba(_rgba(10))
    _settle()
    return PaintLog(pane.graphics.viewport())


def test_a_new_overlay_is_painted_once(pane):
    viewport = pane.graphics.viewport()
    log = _log_after_a_first_overlay(pane)
    pane.set_rgba(_rgba(200))
    viewport.repaint()  # as the hover benchmark does: the overlay is on screen now
    painted = len(log.regions)
    _settle()
    assert painted == 1
    assert len(log.regions) == 1, "the same overlay was painted again"
    assert np.array_equal(pane.overlay_image(), _rgba(200))


def test_a_new_overlay_is_repainted_without_a_synchronous_repaint(pane):
    log = _log_after_a_first_overlay(pane)
    pane.set_rgba(_rgba(90))
    _settle()
    assert log.regions, "a new overlay must be repainted by the event loop"
    # the repainted area covers the overlay (the whole photograph here)
    top_left = pane.graphics.mapFromScene(pane.overlay_item.sceneBoundingRect().topLeft())
    assert any(region.contains(top_left + type(top_left)(3, 3)) for region in log.regions)


def test_moves_are_coalesced_while_drawing_is_slow(qtbot):
    """Drawing takes longer than the interval: a move right after a drawing waits (the newest
    of the waiting moves is drawn), instead of every move being drawn at once."""
    panes = (ImagePane("q"), ImagePane("r"))
    drawn = []

    class SlowRenderer:
        def hover(self, x, y, scale=None):
            drawn.append((x, y))
            time.sleep(0.08)
            return HoverPoint(rgba=np.zeros((4, 4, 4), np.uint8))

    link = HoverLink(lambda: None, interval_ms=60.0)
    link.add_row(panes).renderers = {QUERY: SlowRenderer()}
    link._moved(QUERY, 1.0, 1.0)
    assert drawn == [(1.0, 1.0)]  # the first move after a quiet period: at once
    link._moved(QUERY, 2.0, 2.0)
    link._moved(QUERY, 3.0, 3.0)
    assert drawn == [(1.0, 1.0)]  # right after a drawing: waiting
    qtbot.waitUntil(lambda: len(drawn) == 2, timeout=2000)
    assert drawn[1] == (3.0, 3.0)  # the newest wins
    for pane in panes:
        pane.deleteLater()


def test_the_readout_has_the_size_of_a_fresh_layout(pane):
    texts = ["<b>+1.2%</b> of the similarity<br>peak 0.034", "<b>+7.9%</b> of the similarity<br>peak 0.051",
             "<b>+12.5%</b> of the similarity<br>peak 0.051", "<b>−3.0%</b> of the similarity<br>peak 0.1",
             "<b>+4.4%</b> of the similarity<br>peak 0.052"]
    for text in texts:
        pane.show_readout(text)
        fresh = QLabel(pane.graphics)
        fresh.setObjectName("paneReadout")
        fresh.setTextFormat(pane.readout.textFormat())
        fresh.setText(text)
        fresh.adjustSize()
        assert pane.readout.text() == text
        assert pane.readout.size() == fresh.size(), text
        fresh.deleteLater()
