"""One image with a heat-map overlay, crosshair, pin, markers and a colour bar.

Coordinates: the photograph is an ``ImageItem`` (row-major) spanning ``[0, W] x [0, H]`` in
view coordinates, y down, aspect locked. View coordinates are pixel *edges*; the core's pixel
coordinates put pixel ``k``'s centre at ``k`` (``dmlviewer.core.explain.grid``), so a point
``(x, y)`` of the core sits at view ``(x + 0.5, y + 0.5)``. Signals carry core coordinates.

Overlays are stretched over the image (any resolution): either a float map drawn by an
``ImageItem`` with fixed levels and a 256-entry RGBA look-up table (:meth:`ImagePane.set_map`,
the overall maps) or a hovered point's partial map (:meth:`ImagePane.set_indexed`, the core
renderer's colour indices; :meth:`ImagePane.set_rgba`), written into one premultiplied
``ARGB32`` buffer per pane with the opacity baked into its table and drawn by a light item as
one unconverted blit (issue 40). Neither path computes levels from the data.

A pane is drawn in a :class:`~dmlviewer.gui.pair.pane_column.PaneColumn`, the graphics view
of its side, which holds the pane of every model row on that side (issue 40: one paint per side
and event, however many rows), or in a column of its own. ``graphics`` is that column; the
pane's caption, view box with colour bar, and guides' legend are three lines of its grid. The
crosshair and the pin are drawn by the column, in viewport pixels: moving them repaints two thin
strips, with no item of theirs to bound, map or paint in Python. The read-out is plain text.

Mouse: the column routes plain moves over its viewport to the pane under the mouse
(``hovered(x, y)``, ``left()``); a left click is ``clicked(x, y)``; a left drag with Shift, or
any left drag while :attr:`region_mode` is on, draws a rectangle and emits
``region_selected((y0, x0, y1, x1))`` in pixel-edge coordinates (the core's region convention);
other drags pan and the wheel zooms.
"""

from __future__ import annotations

import functools
import html
import re

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QObject, QPoint, QPointF, QRect, QRectF, Qt, Signal
from PySide6.QtGui import QBrush, QColor, QFont, QFontMetricsF, QImage, QPainter, QPainterPath, QRegion
from PySide6.QtWidgets import QGraphicsItem, QGraphicsPathItem, QGraphicsRectItem, QLabel, QSizePolicy

from dmlviewer.core.explain.hover import overlay_shape, pair_table, premultiplied_table, take_pairs
from dmlviewer.gui.pair import gl_viewport
from dmlviewer.gui.pair.colormaps import colorbar_map, overlay_lut
from dmlviewer.gui.pair.pane_column import PIN_SIZE, LabelSlot, PaneColumn
from dmlviewer.gui.common.widgets import ElidedRichLabel, elide_words

#: Distinct colours for numbered markers (correspondences).
MARKER_COLORS = [
    "#e6194b", "#3cb44b", "#ffe119", "#4363d8", "#f58231", "#911eb4", "#42d4f4", "#f032e6",
    "#bfef45", "#fabed4", "#469990", "#dcbeff", "#9a6324", "#fffac8", "#800000", "#aaffc3",
]


_DIGITS = re.compile(r"\d")
_TAGS = re.compile(r"<[^>]*>")


def plain_text(text: str) -> str:
    """A read-out as plain text: a rich-text one (``<b>``, ``<br>``) has its line breaks kept
    and its tags dropped, so that the label never parses HTML per hover event."""
    if "<" not in text and "&" not in text:
        return text
    return html.unescape(_TAGS.sub("", text.replace("<br>", "\n")))


@functools.lru_cache(maxsize=8)
def _tabular_digits(font_key: str) -> bool:
    """Whether all ten digits have one width in the font (``QFont.toString()``) and its bold
    (true of most UI fonts): then a read-out that changes in its digits only keeps its size."""
    font = QFont()
    font.fromString(font_key)
    bold = QFont(font)
    bold.setBold(True)
    return all(len({QFontMetricsF(f).horizontalAdvance(str(d)) for d in range(10)}) == 1 for f in (font, bold))


#: Width of the colour bar's axis: tick values (up to "-0.0125") plus the rotated title.
COLORBAR_AXIS_WIDTH = 72


class PaneViewBox(pg.ViewBox):
    """A ViewBox whose left drag draws a region with Shift or in region mode."""

    region_drawn = Signal(object)  # QRectF in view coordinates

    def __init__(self) -> None:
        super().__init__(lockAspect=True, invertY=True, enableMenu=True, defaultPadding=0.01)
        self.region_mode = False
        self.press_modifiers = Qt.NoModifier  # set by the pane at each press: Shift+drag = region
        self.region_item = QGraphicsRectItem()
        self.region_item.setPen(pg.mkPen("#00e5ff", width=2, style=Qt.DashLine, cosmetic=True))
        self.region_item.setBrush(QBrush(QColor(0, 229, 255, 40)))
        self.region_item.setZValue(30)
        self.region_item.hide()
        self.addItem(self.region_item, ignoreBounds=True)

    def itemBoundsChanged(self, item) -> None:
        """Only items that count for auto-range concern it. pyqtgraph queues an auto-range and
        repaints the whole view whenever any child moves; the marks (crosshair, pin, markers)
        and the overlay are added with ``ignoreBounds``, so for them that was a full repaint of
        the pane per hover event (issue 24) that changed nothing."""
        if item in self.addedItems:
            super().itemBoundsChanged(item)

    def mouseDragEvent(self, ev, axis=None) -> None:  # noqa: N802 - pyqtgraph API
        shift = (ev.modifiers() | self.press_modifiers) & Qt.ShiftModifier
        if ev.button() == Qt.LeftButton and (self.region_mode or shift):
            ev.accept()
            a = self.mapSceneToView(ev.buttonDownScenePos())
            b = self.mapSceneToView(ev.scenePos())
            rect = QRectF(a, b).normalized()
            self.region_item.setRect(rect)
            self.region_item.show()
            if ev.isFinish():
                self.region_drawn.emit(rect)
            return
        super().mouseDragEvent(ev, axis)


class PartialOverlay(QGraphicsItem):
    """A hovered point's partial map: a premultiplied ``ARGB32`` image over the pane's own
    buffer (rewritten in place per event, no copy, no conversion when drawn) over the
    photograph's rectangle: blended pixel for pixel when the buffer has the rectangle's size on
    screen (:meth:`ImagePane.overlay_shape`), else stretched over it."""

    def __init__(self, graphics: pg.GraphicsView) -> None:
        super().__init__()
        self._graphics = graphics
        self._rect = QRectF()
        self.buffer: np.ndarray | None = None  # H x W uint32, 0xAARRGGBB premultiplied
        self._image: QImage | None = None

    def buffer_for(self, shape: tuple[int, int]) -> np.ndarray:
        """The buffer to write an ``H x W`` overlay into (a new one when the shape changes; a
        new wrapper when the view moved to a screen of another density)."""
        if self.buffer is None or self.buffer.shape != tuple(shape):
            self.buffer = np.zeros(shape, dtype=np.uint32)
            self._wrap()
        elif self._image.devicePixelRatio() != self._graphics.devicePixelRatioF():
            self._wrap()
        return self.buffer

    def _wrap(self) -> None:
        """A new ``QImage`` over the buffer (no copy). An OpenGL viewport's paint engine keeps a
        texture per image (``QImage.cacheKey``) and would draw a rewritten buffer under the same
        image as the first map it uploaded: a new wrapper per change is a new key."""
        h, w = self.buffer.shape
        self._image = QImage(self.buffer.data, w, h, 4 * w, QImage.Format_ARGB32_Premultiplied)
        self._image.setDevicePixelRatio(self._graphics.devicePixelRatioF())  # pixels as rendered

    def set_rect(self, rect: QRectF) -> None:
        if rect != self._rect:
            self.prepareGeometryChange()
            self._rect = QRectF(rect)

    def changed(self) -> None:
        """The buffer was rewritten: mark the viewport area under it for repainting directly.
        ``QGraphicsItem.update`` defers to the scene, which hands the area to the viewport one
        event loop pass later: a paint of the window's pending areas in between (another pane's
        synchronous repaint) was then followed by a second paint of the same pixels (issue 24)."""
        if self.buffer is not None and gl_viewport.is_opengl(self._graphics):
            self._wrap()
        if self.scene() is not None and self.isVisible():
            area = self._graphics.mapFromScene(self.sceneBoundingRect()).boundingRect()
            self._graphics.viewport().update(area.adjusted(-2, -2, 2, 2))

    def boundingRect(self) -> QRectF:  # noqa: N802 - Qt API
        return self._rect

    def paint(self, painter: QPainter, option, widget=None) -> None:
        image = self._image
        if image is None:
            return
        transform = painter.worldTransform()
        target = transform.mapRect(self._rect)  # the photograph on screen, viewport pixels
        dpr = image.devicePixelRatio()
        if (transform.isRotating() or abs(target.width() * dpr - image.width()) > 1
                or abs(target.height() * dpr - image.height()) > 1):
            painter.drawImage(self._rect, image)  # zoomed in past the buffer's size: scaled
            return
        painter.save()  # the buffer has the photograph's size on screen: one unscaled blend
        painter.resetTransform()
        painter.drawImage(QPointF(round(target.left() * dpr) / dpr, round(target.top() * dpr) / dpr), image)
        painter.restore()


class ImagePane(QObject):
    """A caption above a pyqtgraph view box holding image, overlay, crosshair, pin and markers,
    with its colour bar, in ``column`` (one of its own when None; see the module docstring)."""

    hovered = Signal(float, float)
    left = Signal()
    clicked = Signal(float, float)
    region_selected = Signal(tuple)

    def __init__(self, title: str = "", column: PaneColumn | None = None) -> None:
        column = column if column is not None else PaneColumn()
        super().__init__(column)  # a part of its column, deleted with it
        #: the graphics view the pane is drawn in (its side's column)
        self.graphics = column
        #: whether the pane is laid out and drawn (a hidden row's panes are not)
        self.shown = True
        self.crosshair: tuple[float, float] | None = None  # core coordinates, None: not drawn
        self.pin: tuple[float, float] | None = None
        self.title = ElidedRichLabel(title)
        self.title.setObjectName("paneTitle")
        # A long caption must not widen the pane (the two panes share the width equally).
        self.title.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Preferred)
        self.view = PaneViewBox()
        self.colorbar = pg.ColorBarItem(values=(0.0, 1.0), width=14, interactive=False,
                                        colorMap=colorbar_map("jet"), colorMapMenu=False)
        self.colorbar.axis.enableAutoSIPrefix(False)  # plain values, not "400 (x0.001)"
        # pyqtgraph fixes the bar's axis at 45 px, room for the tick values only: widen it so
        # the title beside them does not run over them.
        self.colorbar.axis.setWidth(COLORBAR_AXIS_WIDTH)
        # Qt walks every item of the column's scene on each paint unless a parent that is not
        # in the painted area clips its children: then the bar's axes and image are skipped (a
        # quarter of the Python calls of a hover's paints, issue 40).
        self.colorbar.setFlag(QGraphicsItem.ItemClipsChildrenToShape)

        self.image_item = pg.ImageItem(axisOrder="row-major")
        self.image_item.setAutoDownsample(False)
        # The photograph only changes with the pair or the zoom: keep it rendered at screen
        # resolution so that a hover repaints the overlay, not the scaled photograph.
        self.image_item.setCacheMode(QGraphicsItem.DeviceCoordinateCache)
        # The overall maps change with the display, not per hover: kept rendered at screen
        # resolution like the photograph, so the crosshair's strips over them are blits from
        # the cache, not pyqtgraph paints (issue 40).
        self.overlay_item = pg.ImageItem(axisOrder="row-major")
        self.overlay_item.setCacheMode(QGraphicsItem.DeviceCoordinateCache)
        self.overlay_item.setAutoDownsample(False)
        self.overlay_item.setZValue(10)
        self.overlay_item.setOpacity(0.6)
        self.partial_item = PartialOverlay(self.graphics)
        self.partial_item.setZValue(10)
        self.partial_item.hide()
        self._opacity = 0.6  # baked into the partial overlay's table
        self._table: tuple[bytes, float, np.ndarray] | None = None  # (lut bytes, opacity, pair table)
        self._shown_index: tuple[np.ndarray, np.ndarray] | None = None  # (index, lut) drawn
        self._straight: np.ndarray | None = None  # the RGBA drawn by set_rgba
        self.view.addItem(self.image_item)
        self.view.addItem(self.overlay_item, ignoreBounds=True)
        self.view.addItem(self.partial_item, ignoreBounds=True)

        self.marker_item = pg.ScatterPlotItem(size=11, pen=pg.mkPen("k", width=1))
        self.marker_item.setZValue(22)
        self.marker_item.hide()
        self.view.addItem(self.marker_item, ignoreBounds=True)
        self._marker_labels: list[pg.TextItem] = []
        # Outlines of grid cells over the map (where a sparse group map's share is, issue 42 item 6).
        self.cells_item = QGraphicsPathItem()
        self.cells_item.setPen(pg.mkPen("#ffffff", width=2, cosmetic=True))
        self.cells_item.setZValue(15)
        self.cells_item.hide()
        self.view.addItem(self.cells_item, ignoreBounds=True)
        self.cells: np.ndarray | None = None  # the outlined cells (grid mask), None when none
        # Named lines over the image (the cross-view orientation lines, issue 25) and their legend,
        # a line under the view (issue 31 item 6): drawn in the view, it covered the lower half of
        # an aerial image that filled a half-height pane (two models), and the map hovered there.
        self._guide_items: list[tuple[str, pg.PlotDataItem]] = []
        self.guide_specs: list[tuple] = []  # as given to set_guides, for Export View's scene
        self.guide_legend = QLabel()
        self.guide_legend.setObjectName("guideLegend")
        self.guide_legend.setTextFormat(Qt.RichText)
        self.guide_legend.setWordWrap(True)
        self.title_slot = LabelSlot(self.graphics, self.title)
        self.title_slot.fit_height()
        self.title_slot.set_shown(True)  # a label given to a parent on screen stays hidden until shown
        self.legend_slot = LabelSlot(self.graphics, self.guide_legend)
        self.legend_slot.set_shown(False)
        self.guide_points = pg.ScatterPlotItem(size=10, symbol="o", pen=pg.mkPen("k", width=1))
        self.guide_points.setZValue(19)
        self.guide_points.hide()
        self.view.addItem(self.guide_points, ignoreBounds=True)

        self.message = QLabel(self.graphics)
        self.message.setObjectName("paneMessage")
        self.message.setAlignment(Qt.AlignCenter)
        self.message.hide()
        self.readout = QLabel(self.graphics)
        self.readout.setObjectName("paneReadout")
        self.readout.setTextFormat(Qt.PlainText)
        self.readout.setAttribute(Qt.WA_TransparentForMouseEvents)
        self.readout.hide()
        self._marks_drawn = QRegion()  # viewport pixels the crosshair and the pin were drawn on

        self.shape: tuple[int, int] | None = None  # (H, W) of the photograph
        self._overlay_shape: tuple[int, int] | None = None
        self._lut: np.ndarray | None = None
        self._colorbar_key: tuple | None = None
        self._colorbar_label = ""  # the whole title; the bar shows it elided to its length
        self.colorbar.axis.geometryChanged.connect(self._fit_colorbar_label)
        self._readout_key: str | None = None  # the read-out text last sized, digits as 0
        self.view.region_drawn.connect(self._on_region)
        self.view.geometryChanged.connect(self._place_labels)
        self.graphics.scene().sigMouseClicked.connect(self._on_click)
        self.graphics.add(self)

    # -- the pane's place in its column
    def set_shown(self, shown: bool) -> None:
        """Lay the pane out and draw it, or take it out of its column (a row hidden while one
        model is open); its notice comes back with it."""
        if shown == self.shown:
            return
        self.shown = shown
        if not shown:
            self.set_crosshair(None)
            self.set_pin(None)
            self.readout.hide()
        self.view.setVisible(shown)
        self.colorbar.setVisible(shown)
        self.title_slot.set_shown(shown)
        self.legend_slot.set_shown(shown and bool(self.guide_specs))
        self.message.setVisible(shown and bool(self.message.text()))
        self.graphics.relayout()

    def detach(self) -> None:
        """Stop following the column's items (the column is closing and deletes them)."""
        self.view.geometryChanged.disconnect(self._place_labels)
        for slot in (self.title_slot, self.legend_slot):
            slot.geometryChanged.disconnect(slot.place)
        self.graphics.scene().sigMouseClicked.disconnect(self._on_click)

    def isVisible(self) -> bool:  # noqa: N802 - as a widget's
        """Whether the pane is on screen (shown, in a column that is visible)."""
        return self.shown and self.graphics.isVisible()

    def geometry(self) -> QRect:
        """The pane's area in its column's widget coordinates: caption, view, colour bar and
        legend (empty while hidden)."""
        if not self.shown:
            return QRect()
        rect = self.title_slot.sceneBoundingRect().united(self.view.sceneBoundingRect())
        rect = rect.united(self.colorbar.sceneBoundingRect())
        if self.legend_slot.isVisible():
            rect = rect.united(self.legend_slot.sceneBoundingRect())
        return self.graphics.widget_rect(rect)

    def width(self) -> int:
        return self.geometry().width()

    def height(self) -> int:
        return self.geometry().height()

    @property
    def opengl(self) -> bool:
        """Whether the pane draws through an OpenGL viewport (its column's)."""
        return self.graphics.opengl

    # -- content
    def clear_region(self) -> None:
        """Take the drawn region's rectangle away (retrieval went back to the whole image)."""
        self.view.region_item.hide()

    @property
    def region_shown(self) -> bool:
        return self.view.region_item.isVisible()

    def set_image(self, image: np.ndarray | None) -> None:
        """Show an H x W x 3 uint8 photograph (None: empty); clears overlay and marks."""
        self.clear_overlay()
        self.set_crosshair(None)
        self.set_pin(None)
        self.set_markers([])
        self.view.region_item.hide()
        if image is None:
            self.image_item.clear()
            self.shape = None
            return
        image = np.ascontiguousarray(image, dtype=np.uint8)
        self.shape = (int(image.shape[0]), int(image.shape[1]))
        self.image_item.setImage(image, autoLevels=False, levels=None)
        self.image_item.setRect(QRectF(0, 0, self.shape[1], self.shape[0]))
        self.fit()

    def fit(self) -> None:
        """Show the whole photograph and keep fitting it as the pane resizes (until the user
        pans or zooms)."""
        self.view.enableAutoRange()

    def set_lut(self, lut: np.ndarray) -> None:
        """The 256 x 4 table used by :meth:`set_map` overlays."""
        self._lut = lut
        self.overlay_item.setLookupTable(lut)

    def set_map(self, values: np.ndarray, levels: tuple[float, float]) -> None:
        """Overlay a float map (any resolution, stretched over the image) with fixed levels."""
        values = np.ascontiguousarray(values, dtype=np.float32)
        if self._lut is None:
            self.set_lut(overlay_lut("jet"))
        self.overlay_item.setImage(values, autoLevels=False, levels=levels)
        self._show_partial(False)
        self._fit_overlay(values.shape[:2])

    def set_cells(self, mask: np.ndarray | None) -> None:
        """Outline the cells of a grid (``h x w`` booleans over the photograph) that are True,
        adjacent cells as one region; None or no True cell: no outline."""
        if mask is None or self.shape is None or not np.any(mask):
            self.cells = None
            self.cells_item.hide()
            return
        mask = np.asarray(mask, dtype=bool)
        (h, w), (height, width) = mask.shape, self.shape
        path = QPainterPath()
        for i, j in zip(*np.nonzero(mask)):
            path.addRect(QRectF(j * width / w, i * height / h, width / w, height / h))
        self.cells = mask
        self.cells_item.setPath(path.simplified())  # the regions' outlines, not every cell's
        self.cells_item.show()

    def set_indexed(self, index: np.ndarray, lut: np.ndarray) -> None:
        """Overlay ``lut[index]`` (``index``: H x W uint8 colour indices, e.g. the core hover
        renderer's buffer; ``lut``: 256 x 4 RGBA, straight alpha): one table look-up into the
        pane's premultiplied buffer, the opacity baked into the table."""
        if self.cells is not None:  # outlines belong to a static map, not to a hover map
            self.set_cells(None)
        take_pairs(self._premultiplied(lut), index, self.partial_item.buffer_for(index.shape))
        self._shown_index = (index, lut)
        self._show_partial(True)
        self._fit_overlay(index.shape[:2])
        self.partial_item.changed()

    def set_rgba(self, rgba: np.ndarray) -> None:
        """Overlay an H x W x 4 uint8 image that is already colour-mapped (straight alpha)."""
        if self.cells is not None:  # outlines belong to a static map, not to a hover map
            self.set_cells(None)
        rgba = np.ascontiguousarray(rgba, dtype=np.uint8)
        shape = rgba.shape[:2]
        self._shown_index, self._straight = None, rgba
        flat = rgba.reshape(-1, 4).astype(np.float64)
        a = np.round(flat[:, 3] * self._opacity)
        packed = a.astype(np.uint32) << 24
        for k, shift in ((0, 16), (1, 8), (2, 0)):
            packed |= np.round(flat[:, k] * a / 255.0).astype(np.uint32) << shift
        np.copyto(self.partial_item.buffer_for(shape), packed.reshape(shape))
        self._show_partial(True)
        self._fit_overlay(rgba.shape[:2])
        self.partial_item.changed()

    def _premultiplied(self, lut: np.ndarray) -> np.ndarray:
        """``lut`` as the premultiplied table at the pane's opacity, as the pair table
        :func:`~dmlviewer.core.explain.hover.take_pairs` looks two pixels up in at once (cached:
        built once per colour map and opacity, compared by value)."""
        key = lut.tobytes()
        if self._table is None or self._table[0] != key or self._table[1] != self._opacity:
            self._table = (key, self._opacity, pair_table(premultiplied_table(lut, self._opacity)))
        return self._table[2]

    def overlay_shape(self) -> tuple[int, int] | None:
        """The size (H, W) to render a partial map at: the photograph's size on screen in device
        pixels, so that it is drawn unscaled (Qt's scaled blend of a photograph-sized buffer took
        three times as long, and the buffer had more pixels to fill), but no larger than
        :func:`~dmlviewer.core.explain.hover.overlay_shape` of the photograph (zoomed in, Qt
        scales it up); None without a photograph."""
        if self.shape is None:
            return None
        h, w = self.shape
        cap = overlay_shape(self.shape)
        a, b = self.to_viewport(-0.5, -0.5), self.to_viewport(w - 0.5, h - 0.5)
        dpr = self.graphics.devicePixelRatioF()
        height, width = round(abs(b.y() - a.y()) * dpr), round(abs(b.x() - a.x()) * dpr)
        if not (1 <= height <= cap[0] and 1 <= width <= cap[1]):
            return cap
        return height, width

    def _show_partial(self, shown: bool) -> None:
        self.partial_item.setVisible(shown)
        self.overlay_item.setVisible(not shown)

    def overlay_image(self) -> np.ndarray | None:
        """What the overlay shows (None when hidden): the overall map's float array, or a
        partial map as straight RGBA (``H x W x 4`` uint8)."""
        if self.partial_item.isVisible():
            if self._shown_index is None:
                return self._straight
            index, lut = self._shown_index
            return np.asarray(lut, dtype=np.uint8)[index]
        return self.overlay_item.image if self.overlay_item.isVisible() else None

    def clear_overlay(self) -> None:
        """No overlay (and no colour bar or read-out, which would describe nothing). The colour
        bar turns transparent but keeps its place: hiding it widened the view, so the photograph
        jumped each time a map was computing (Grad-CAM weights, occlusion) and back after."""
        self.overlay_item.hide()
        self.set_cells(None)
        self.partial_item.hide()
        self.colorbar.setOpacity(0.0)
        self.readout.hide()

    @property
    def overlay_shown(self) -> bool:
        """Whether an overlay (overall or partial map) is drawn."""
        return self.partial_item.isVisible() or self.overlay_item.isVisible()

    @property
    def colorbar_shown(self) -> bool:
        return self.colorbar.isVisible() and self.colorbar.opacity() > 0

    @property
    def opacity(self) -> float:
        return self._opacity

    def set_opacity(self, opacity: float) -> None:
        self._opacity = float(opacity)
        self.overlay_item.setOpacity(opacity)
        if self.partial_item.isVisible():  # the shown partial map again, with the new table
            if self._shown_index is not None:
                self.set_indexed(*self._shown_index)
            else:
                self.set_rgba(self._straight)

    def set_colorbar(self, name: str, signed: bool, levels: tuple[float, float], label: str = "") -> None:
        """Colour bar for the overlay; a no-op when nothing changed (hover calls it per event)."""
        key = (name, signed, float(levels[0]), float(levels[1]), label)
        if key == self._colorbar_key:
            return
        if key[:2] != (self._colorbar_key or (None, None))[:2]:
            self.colorbar.setColorMap(colorbar_map(name, signed))
        self.colorbar.setLevels(levels)
        if label != (self._colorbar_key or ("",) * 5)[4]:
            self._colorbar_label = label
            self._fit_colorbar_label()
        self._colorbar_key = key

    def _fit_colorbar_label(self) -> None:
        """The colour bar's title shortened at a word end to the bar's length (a pane of half
        the height, as when comparing two models, cut it off mid-word); the bar's tooltip has it
        whole."""
        axis, label = self.colorbar.axis, self._colorbar_label
        room = axis.geometry().height() - 4
        text = elide_words(QFontMetricsF(axis.label.font()), label, max(room, 0.0), Qt.ElideRight) if label else ""
        if text != axis.labelText:
            axis.setLabel(text)
            axis.resizeEvent()  # pyqtgraph centres the title only on a resize: centre this one
        self.colorbar.setToolTip(label)

    def set_title(self, html: str, tooltip: str | None = None) -> None:
        """The caption above the view, ending in "…" where a narrow pane cuts it; its tooltip
        (default: the caption) says it whole."""
        self.title.setText(html)
        if tooltip is not None:
            self.title.setToolTip(tooltip)

    def show_message(self, text: str | None) -> None:
        """A centred notice over the view (e.g. "preparing…"); None hides it."""
        if not text:
            self.message.clear()  # no notice to bring back with the pane (set_shown)
            self.message.hide()
            return
        self.message.setText(text)
        self.message.adjustSize()
        self._place_message()
        self.message.setVisible(self.shown)
        self.message.raise_()

    def show_readout(self, text: str | None) -> None:
        """A short read-out in the view's top-left corner (the hovered point's share of the
        similarity, beside the colour bar that shows its map), plain text (lines split by
        ``\\n``; rich text is made plain, see :func:`plain_text`); None hides it."""
        if not text:
            self.readout.hide()
            return
        text = plain_text(text)
        if text != self.readout.text():
            self.readout.setText(text)
            # Digits have one width (tabular figures): a text that differs from the last placed
            # one in its digits only keeps the label's size, so hovering does not lay it out
            # again per event (issue 24).
            if _DIGITS.sub("0", text) != self._readout_key:
                self._place_readout()
            # The view's pixels under the label are dirty too: a label over a view with nothing
            # dirty under it had Qt paint the view twice per event, once for its own area and
            # once again under the label (issue 40).
            area = self.readout.geometry().translated(-self.graphics.viewport().pos())
            self.graphics.viewport().update(area)
        if not self.readout.isVisible() and self.shown:  # raising it again per event repainted the whole view
            self.readout.show()
            self.readout.raise_()

    def _place_readout(self) -> None:
        """Size the read-out to its text, but no wider than the view left of the colour bar: on
        a narrow pane (an 800 px window) its lines wrap instead of running into the bar's numbers."""
        label = self.readout
        tabular = _tabular_digits(label.font().toString())
        self._readout_key = _DIGITS.sub("0", label.text()) if tabular else None
        label.setWordWrap(False)
        label.adjustSize()
        room = self._view_area().right() - label.x() - 4
        if label.width() > room >= 40:
            label.setWordWrap(True)
            label.resize(room, label.heightForWidth(room))

    # -- marks (drawn by the column)
    def set_crosshair(self, point: tuple[float, float] | None) -> None:
        """The crosshair at ``point`` (core coordinates), None: none."""
        self._move_marks(point, self.pin)

    def set_pin(self, point: tuple[float, float] | None) -> None:
        """The pin's star at ``point`` (core coordinates), None: none."""
        self._move_marks(self.crosshair, point)

    def _move_marks(self, crosshair, pin) -> None:
        """Repaint the strips the crosshair and the pin leave (where they were drawn last) and
        those they take."""
        if (crosshair, pin) == (self.crosshair, self.pin):
            return
        self.crosshair, self.pin = crosshair, pin
        g = self.graphics
        drawn = self.marks_region() if g.isVisible() else QRegion()
        if g.isVisible():
            g.viewport().update(self._marks_drawn + drawn)
        self._marks_drawn = drawn

    def marks_region(self) -> QRegion:
        """Viewport pixels the crosshair and the pin cover now (to repaint when they move)."""
        region = QRegion()
        if not self.shown:
            return region
        box = self.view_rect()
        if self.crosshair is not None:
            p = self.to_viewport(*self.crosshair)
            x, y = int(p.x()), int(p.y())
            region += QRect(x - 2, box.top(), 5, box.height())
            region += QRect(box.left(), y - 2, box.width(), 5)
        if self.pin is not None:
            p = self.to_viewport(*self.pin)
            r = PIN_SIZE // 2 + 3
            region += QRect(int(p.x()) - r, int(p.y()) - r, 2 * r + 1, 2 * r + 1)
        return region

    def view_rect(self) -> QRect:
        """The view box's rectangle in viewport pixels (where the marks are clipped)."""
        return self.graphics.mapFromScene(self.view.sceneBoundingRect()).boundingRect()

    def _view_area(self) -> QRect:
        """The view box's rectangle in the column's widget coordinates (where labels go)."""
        return self.graphics.widget_rect(self.view.sceneBoundingRect())

    def to_viewport(self, x: float, y: float) -> QPointF:
        """Core image coordinates -> viewport pixels (float)."""
        return self.graphics.viewportTransform().map(self.view.mapViewToScene(QPointF(x + 0.5, y + 0.5)))

    def set_markers(self, points: list[tuple[float, float]]) -> None:
        """Numbered markers (1, 2, ...) at core coordinates, coloured by MARKER_COLORS."""
        for label in self._marker_labels:
            self.view.removeItem(label)
        self._marker_labels = []
        if not points:
            self.marker_item.hide()
            return
        xs = [p[0] + 0.5 for p in points]
        ys = [p[1] + 0.5 for p in points]
        brushes = [pg.mkBrush(MARKER_COLORS[k % len(MARKER_COLORS)]) for k in range(len(points))]
        self.marker_item.setData(xs, ys, brush=brushes)
        self.marker_item.show()
        for k, (x, y) in enumerate(zip(xs, ys)):
            label = pg.TextItem(str(k + 1), color="w", anchor=(-0.2, 1.1), fill=pg.mkBrush(0, 0, 0, 150))
            label.setPos(x, y)
            label.setZValue(23)
            self.view.addItem(label, ignoreBounds=True)
            self._marker_labels.append(label)

    def set_guides(self, guides: list[tuple[str, list[float], list[float], str, bool]],
                   points: list[tuple[float, float, str]] = ()) -> None:
        """Named polylines over the image, ``(name, xs, ys, colour, dashed)`` with ``xs``/``ys``
        in continuous image coordinates (pixel ``i`` spans ``[i, i + 1)``), listed in a legend
        under the view, and dots ``(x, y, colour)``; empty lists remove them."""
        if points:
            self.guide_points.setData([p[0] for p in points], [p[1] for p in points],
                                      brush=[pg.mkBrush(p[2]) for p in points])
        self.guide_points.setVisible(bool(points))
        for _, item in self._guide_items:
            self.view.removeItem(item)
        self._guide_items = []
        self.guide_specs = [tuple(g) for g in guides]
        entries = []
        for name, xs, ys, colour, dashed in guides:
            pen = pg.mkPen(colour, width=2, style=Qt.DashLine if dashed else Qt.SolidLine, cosmetic=True)
            item = pg.PlotDataItem(list(xs), list(ys), pen=pen)
            item.setZValue(18)
            self.view.addItem(item, ignoreBounds=True)
            self._guide_items.append((name, item))
            entries.append(f"<span style='color:{colour}'>{'╍╍' if dashed else '━━'}</span>&nbsp;{html.escape(name)}")
        self.guide_legend.setText("&nbsp;&nbsp; ".join(entries))
        if guides:
            self.legend_slot.fit_height()
        self.legend_slot.set_shown(self.shown and bool(guides))
        self.graphics.relayout()

    def guides(self) -> list[tuple[str, np.ndarray, np.ndarray]]:
        """The drawn guides: ``(name, xs, ys)`` each."""
        return [(name, *item.getData()) for name, item in self._guide_items]

    def map_to_widget(self, x: float, y: float) -> QPointF:
        """Core image coordinates -> the column's widget coordinates (for cross-pane lines)."""
        return self.to_viewport(x, y) + QPointF(self.graphics.viewport().pos())

    def map_from_viewport(self, pos: QPointF) -> tuple[float, float] | None:
        """Viewport position -> core image coordinates, None outside the photograph."""
        if self.shape is None:
            return None
        v = self.view.mapSceneToView(self.graphics.mapToScene(pos.toPoint()))
        vx, vy = v.x(), v.y()
        h, w = self.shape
        if not (0.0 <= vx <= w and 0.0 <= vy <= h):
            return None
        return vx - 0.5, vy - 0.5

    # -- events
    def _place_labels(self) -> None:
        """The notice and the read-out follow the view box (the column laid it out anew)."""
        self._place_message()
        self.readout.move(self._view_area().topLeft() + QPoint(4, 2))
        if self.readout.text():
            self._place_readout()

    def _place_message(self) -> None:
        m, area = self.message, self._view_area()
        m.move(area.left() + max(0, (area.width() - m.width()) // 2),
               area.top() + max(0, (area.height() - m.height()) // 2))

    def _fit_overlay(self, shape: tuple[int, int]) -> None:
        """Stretch the shown overlay (``shape``) over the photograph; show the colour bar."""
        if self.shape is not None:
            if self.partial_item.isVisible():
                self.partial_item.set_rect(QRectF(0, 0, self.shape[1], self.shape[0]))
            elif self._overlay_shape != (shape, self.shape):
                self.overlay_item.setRect(QRectF(0, 0, self.shape[1], self.shape[0]))
                self._overlay_shape = (shape, self.shape)
        self.colorbar.setOpacity(1.0)

    def _on_click(self, ev) -> None:
        if ev.button() != Qt.LeftButton or ev.double() or self.view.region_mode:
            return
        if ev.modifiers() & Qt.ShiftModifier:
            return
        pos = self.graphics.mapFromScene(ev.scenePos())
        point = self.map_from_viewport(QPointF(pos))
        if point is not None:
            ev.accept()
            self.clicked.emit(point[0], point[1])

    def _on_region(self, rect: QRectF) -> None:
        if self.shape is None:
            return
        h, w = self.shape
        y0, x0 = max(0.0, rect.top()), max(0.0, rect.left())
        y1, x1 = min(float(h), rect.bottom()), min(float(w), rect.right())
        if y1 - y0 < 1 or x1 - x0 < 1:
            self.view.region_item.hide()
            return
        self.region_selected.emit((y0, x0, y1, x1))
