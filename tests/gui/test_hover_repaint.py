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
import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QApplication, QLabel

from _paints import PaintLog

from dmlviewer.core.explain.hover import HoverPoint, overlay_shape
from dmlviewer.gui.pair.colormaps import overlay_lut
from dmlviewer.gui.pair.hover_link import QUERY, STATUS_INTERVAL_MS, HoverLink
from dmlviewer.gui.pair.image_pane import ImagePane

pytestmark = pytest.mark.gui


def _settle(n: int = 5) -> None:
    for _ in range(n):
        QApplication.processEvents()


def _shown_pane(qtbot, shape: tuple[int, int] = (300, 400), seed: int = 0) -> ImagePane:
    """A pane in a column of its own, 640 x 480 on screen, showing a random photograph."""
    pane = ImagePane("test")
    qtbot.addWidget(pane.graphics)
    pane.graphics.resize(640, 480)
    pane.set_image(np.random.default_rng(seed).integers(0, 255, (*shape, 3), dtype=np.uint8))
    pane.graphics.show()
    qtbot.waitExposed(pane.graphics)
    _settle()
    return pane


@pytest.fixture
def pane(qtbot):
    return _shown_pane(qtbot)


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
        def hover(self, x, y, scale=None, shape=None):
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
    for pane in panes:  # each in a column of its own, which owns it
        pane.graphics.close()
        pane.graphics.deleteLater()


def test_the_status_line_is_worded_at_most_every_status_interval(qtbot):
    """Issue 40: every move is drawn, but the status line is worded and announced at most once
    per ``STATUS_INTERVAL_MS`` (the first of a burst at once), and the newest point's line is
    the one left shown."""
    panes = (ImagePane("q"), ImagePane("r"))
    worded, shown, drawn = [], [], []

    class Renderer:
        def hover(self, x, y, scale=None, shape=None):
            drawn.append((x, y))
            return HoverPoint(rgba=np.zeros((4, 4, 4), np.uint8))

    def describe(side, x, y, points, pinned):
        worded.append((x, y))
        return f"point {x:g},{y:g}"

    link = HoverLink(lambda: None, describe=describe, interval_ms=1.0)
    link.message.connect(shown.append)
    link.add_row(panes).renderers = {QUERY: Renderer()}
    start = time.perf_counter()
    moves = 0
    while time.perf_counter() - start < 0.3:  # a burst of moves, each drawn at once
        moves += 1
        link._moved(QUERY, float(moves), 1.0)
        link.flush(status=False)
        QApplication.processEvents()
    elapsed_ms = (time.perf_counter() - start) * 1e3
    assert len(drawn) == moves  # drawing is not held back by the status line
    assert worded[0] == (1.0, 1.0)  # the first of the burst: at once
    assert moves > 20 and len(worded) <= elapsed_ms / STATUS_INTERVAL_MS + 2
    qtbot.waitUntil(lambda: shown[-1] == f"point {moves:g},1", timeout=2000)  # the newest, in the end
    assert len(shown) == len(worded)
    for pane in panes:  # each in a column of its own, which owns it
        pane.graphics.close()
        pane.graphics.deleteLater()


def test_the_readout_has_the_size_of_a_fresh_layout(pane):
    texts = ["+1.2% of the similarity\npeak 0.034", "+7.9% of the similarity\npeak 0.051",
             "+12.5% of the similarity\npeak 0.051", "−3.0% of the similarity\npeak 0.1",
             "+4.4% of the similarity\npeak 0.052"]
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


def test_the_readout_is_plain_text(pane):
    """Issue 40: no rich text parsed per hover event; a rich-text caller's lines and words stay."""
    pane.show_readout("<b>+1.2%</b> of A&#x2019;s similarity<br>peak 0.034")
    assert pane.readout.textFormat() == Qt.PlainText
    assert pane.readout.text() == "+1.2% of A’s similarity\npeak 0.034"
    pane.show_readout("+3.0% of the similarity")
    assert pane.readout.text() == "+3.0% of the similarity" and pane.readout.isVisible()
    pane.show_readout(None)
    assert not pane.readout.isVisible()


def _pixels(pane) -> np.ndarray:
    """The viewport as drawn: H x W x 3 uint8 (RGB)."""
    image = pane.graphics.viewport().grab().toImage().convertToFormat(QImage.Format_RGB888)
    h, w, bpl = image.height(), image.width(), image.bytesPerLine()
    return np.frombuffer(image.constBits(), np.uint8, bpl * h).reshape(h, bpl)[:, : 3 * w].reshape(h, w, 3).copy()


def test_the_premultiplied_overlay_draws_the_straight_alpha_blend(pane):
    """The partial map through the pane's premultiplied table (opacity baked in) draws what a
    straight-alpha RGBA image at the item's opacity drew (the old path), within 1 grey level,
    for every colour and alpha of the table (one 16 x 16 block each). Pixels on a block's edge
    are left out: the two paths may sample the stretched image half a pixel apart there."""
    lut = overlay_lut("jet")
    index = np.arange(256, dtype=np.uint8).reshape(16, 16)
    bare = _pixels_without_overlay(pane)
    for opacity in (0.6, 1.0, 0.8, 0.35, 0.1):
        pane.set_opacity(opacity)
        pane.set_indexed(index, lut)
        _settle()
        new = _pixels(pane)
        assert np.array_equal(pane.overlay_image(), lut[index])
        # the old path: a pyqtgraph ImageItem of straight RGBA at the item's opacity
        old_item = pg.ImageItem(lut[index], axisOrder="row-major")
        old_item.setOpacity(opacity)
        old_item.setZValue(10)
        old_item.setRect(QRectF(0, 0, 400, 300))
        pane.partial_item.hide()
        pane.view.addItem(old_item, ignoreBounds=True)
        _settle()
        old = _pixels(pane)
        pane.view.removeItem(old_item)
        colour = _block_ids(pane, 16, 16)
        inside = np.ones(colour.shape, bool)
        for dy, dx in ((1, 0), (-1, 0), (0, 1), (0, -1)):
            inside &= colour == np.roll(colour, (dy, dx), axis=(0, 1))
        inside &= colour >= 0
        assert len(np.unique(colour[inside])) == 256  # every entry of the table is compared
        # the exact straight-alpha blend over the photograph: at most one grey level off its rounding
        rgba = lut[colour[inside]].astype(float)
        alpha = rgba[:, 3:] / 255.0 * opacity
        exact = rgba[:, :3] * alpha + bare[inside] * (1.0 - alpha)
        assert np.abs(new[inside] - exact).max() < 1.5, opacity
        assert np.abs(new[inside] - bare[inside].astype(int)).max() > 20  # drawn at all
        if opacity in (0.6, 1.0):  # the default and opaque: within 1 grey level of the old path
            # (elsewhere Qt's old path rounds twice, premultiplying then applying the opacity,
            # and strays up to 2 levels from the exact blend where the new one stays within 1)
            assert np.abs(new[inside].astype(int) - old[inside].astype(int)).max() <= 1, opacity


def _block_ids(pane, rows: int, cols: int) -> np.ndarray:
    """For each viewport pixel, which cell of a ``rows x cols`` image stretched over the
    photograph (400 x 300) its centre shows (-1 outside)."""
    vp = pane.graphics.viewport()
    origin = pane.view.mapSceneToView(pane.graphics.mapToScene(0, 0))
    step = pane.view.mapSceneToView(pane.graphics.mapToScene(100, 100)) - origin
    vx = origin.x() + (np.arange(vp.width()) + 0.5) * step.x() / 100
    vy = origin.y() + (np.arange(vp.height()) + 0.5) * step.y() / 100
    i, j = np.floor(vy * rows / 300).astype(int), np.floor(vx * cols / 400).astype(int)
    ids = i[:, None] * cols + j[None, :]
    return np.where(((i >= 0) & (i < rows))[:, None] & ((j >= 0) & (j < cols))[None, :], ids, -1)


def _pixels_without_overlay(pane) -> np.ndarray:
    pane.clear_overlay()
    _settle()
    return _pixels(pane)


def test_moving_the_crosshair_or_the_pin_changes_nothing_in_the_scene(pane):
    """Issue 40: the marks are drawn in the view's foreground, so moving them touches no item
    of the scene (no bounding rects to recompute, no item to repaint but what lies under two
    thin strips), and they are drawn where the point is."""
    changed = []
    pane.graphics.scene().changed.connect(changed.append)
    pane.set_crosshair((100.0, 100.0))
    pane.set_pin((50.0, 60.0))
    _settle()
    log = PaintLog(pane.graphics.viewport())
    pane.set_crosshair((140.0, 180.0))
    pane.set_pin((70.0, 20.0))
    _settle()
    assert not changed
    assert pane.crosshair == (140.0, 180.0) and pane.pin == (70.0, 20.0)
    strips = (pane.graphics.viewport().width() + pane.graphics.viewport().height()) * 5 * 2 + 2 * 23 * 23
    assert 0 < log.area() <= strips
    # the crosshair is drawn: the pixel column under it is white-ish dashes over the photograph
    x = int(pane.to_viewport(140.0, 180.0).x())
    drawn = _pixels(pane)
    pane.set_crosshair(None)
    pane.set_pin(None)
    _settle()
    bare = _pixels(pane)
    assert pane.crosshair is None and pane.pin is None
    column = np.any(drawn[:, x - 1 : x + 2] != bare[:, x - 1 : x + 2], axis=(1, 2))
    assert np.count_nonzero(column) > 100  # dashes down the whole view
    aside = np.any(drawn[:, x + 20] != bare[:, x + 20], axis=1)
    assert np.count_nonzero(aside) <= 3  # 20 px aside: the horizontal line only


def test_the_crosshair_over_the_overall_map_repaints_no_image_item(qtbot, monkeypatch):
    """Issue 40: the photograph and the overall map under the moving crosshair are blitted from
    their caches; neither item is painted again (pyqtgraph's ImageItem.paint ran per strip)."""
    painted = []
    original = pg.ImageItem.paint
    monkeypatch.setattr(pg.ImageItem, "paint", lambda item, *args: (painted.append(item), original(item, *args)))
    pane = ImagePane("test")  # made after the patch: the binding looks a Python override up once
    qtbot.addWidget(pane.graphics)
    pane.graphics.resize(640, 480)
    pane.set_image(np.random.default_rng(0).integers(0, 255, (300, 400, 3), dtype=np.uint8))
    pane.set_map(np.random.default_rng(4).random((30, 40)).astype(np.float32), (0.0, 1.0))
    pane.graphics.show()
    qtbot.waitExposed(pane.graphics)
    pane.set_crosshair((100.0, 100.0))
    _settle()
    assert pane.overlay_item in painted and pane.image_item in painted  # the patch sees paints
    painted.clear()
    log = PaintLog(pane.graphics.viewport())
    for k in range(5):
        pane.set_crosshair((120.0 + 20 * k, 90.0 + 10 * k))
        _settle()
    assert len(log.regions) >= 5 and not painted
    pane.set_map(np.zeros((30, 40), np.float32), (0.0, 1.0))  # a new map is drawn, not the cached one
    _settle()
    assert pane.overlay_item in painted


def test_a_photograph_shown_smaller_than_it_is_gets_its_overlay_blended_pixel_for_pixel(qtbot):
    """Issue 40: the partial map is rendered at the photograph's size on screen and blended
    without scaling: each viewport pixel over the photograph shows the exact straight-alpha
    blend of the buffer's pixel at the same offset (one random colour per pixel: a shift or a
    stretch by one pixel fails). Zoomed in past the overlay's largest size, it is rendered at
    that size and stretched, as before."""
    pane = _shown_pane(qtbot, (600, 800), seed=2)
    rng = np.random.default_rng(3)
    h, w = pane.overlay_shape()
    top_left, bottom_right = pane.to_viewport(-0.5, -0.5), pane.to_viewport(799.5, 599.5)
    assert (h, w) == (round(bottom_right.y() - top_left.y()), round(bottom_right.x() - top_left.x()))
    assert w < 640  # shown smaller than the photograph and than the overlay's largest size
    bare = _pixels(pane).astype(float)
    lut = overlay_lut("jet")
    index = rng.integers(0, 256, (h, w), dtype=np.uint8)
    pane.set_indexed(index, lut)
    _settle()
    drawn = _pixels(pane).astype(float)
    x0, y0 = round(top_left.x()), round(top_left.y())
    rgba = lut[index].astype(float)
    alpha = rgba[..., 3:] / 255.0 * pane.opacity
    exact = rgba[..., :3] * alpha + bare[y0:y0 + h, x0:x0 + w] * (1.0 - alpha)
    assert np.abs(drawn[y0:y0 + h, x0:x0 + w] - exact).max() < 1.5
    assert np.abs(drawn[y0:y0 + h, x0:x0 + w] - bare[y0:y0 + h, x0:x0 + w]).max() > 20  # drawn at all
    pane.view.scaleBy((0.25, 0.25))  # four times as large on screen
    _settle()
    assert pane.overlay_shape() == overlay_shape((600, 800))


def test_a_large_window_keeps_every_panes_images_cached_while_hovering(qtbot, monkeypatch):
    """Issue 40: with two models in a 2560 x 1400 window the panes' photographs and overall maps
    did not fit Qt's 10 MiB pixmap cache: they were rendered anew (pyqtgraph's
    ``ImageItem.paint``) at every hover, p50 13.9 ms against 4.6 ms. The columns grow the cache
    to hold them: real mouse moves then paint no image item."""
    import torch
    from PySide6.QtGui import QPixmapCache

    from _mouse import hover
    from dmlviewer.core.models import build_model, default_config
    from dmlviewer.gui.pair.pair_view import PairImages, PairView

    limit = QPixmapCache.cacheLimit()
    QPixmapCache.setCacheLimit(10240)  # Qt's default, as in a fresh app
    QPixmapCache.clear()
    painted = []
    original = pg.ImageItem.paint
    monkeypatch.setattr(pg.ImageItem, "paint", lambda item, *args: (painted.append(item), original(item, *args)))
    try:
        torch.manual_seed(0)
        models = [build_model(default_config(backbone="small_cnn", dim=32, image_size=64)).eval() for _ in range(2)]
        rng = np.random.default_rng(0)
        view = PairView()
        qtbot.addWidget(view)
        view.resize(2560, 1400)
        view.show()
        view.set_model(models[0], "cpu")
        view.set_pair(PairImages(*(rng.integers(0, 255, (750, 1000, 3), dtype=np.uint8) for _ in range(2))))
        view.set_compare_model(models[1], "cpu", "B")
        qtbot.waitUntil(lambda: all(row.state == "ready" for row in view.rows), timeout=30000)
        query = view.panes[0]
        for x in (100.0, 300.0):  # the first hovers draw the partial maps' items once
            hover(query, view.link, x, 200.0)
            _settle()
        assert view.rows[1].panes[1].partial_item.isVisible()
        painted.clear()
        for x in (120.0, 500.0, 700.0, 850.0, 200.0):
            hover(query, view.link, x, 300.0)
            _settle()
        assert not painted
        assert QPixmapCache.cacheLimit() > 10240
        view.shutdown()
    finally:
        QPixmapCache.setCacheLimit(limit)
