"""One side of a view (the query's or the reference's): one graphics view holding the image
pane of every model row on that side, stacked (issue 40).

Each row's pane used to be a widget with its own ``QGraphicsView``: a drawn hover event painted
two viewports per row, each paint with its own fixed cost (Qt walks the items of the view's
scene, calling pyqtgraph's Python ``boundingRect`` of each, around 0.3 ms a paint on the 2-core
machine). One view per side holds every row's pane of that side: one event paints each side
once, however many rows are shown (400 hovers with two models: 1,717 paint events before, 850
after).

A :class:`PaneColumn` lays its panes out in one grid, per pane three lines: the caption, the
view box with its colour bar, the legend of its guides (:class:`LabelSlot`: a Qt label laid over
a line of the grid). It routes plain mouse moves to the pane under the mouse (``hovered``,
``left``), draws every pane's crosshair and pin in its foreground, in viewport pixels (moving
them repaints two thin strips), and switches between a raster and an OpenGL viewport for all its
panes at once. :class:`PaneColumns` puts a view's two columns side by side with a divider.
"""

from __future__ import annotations

import weakref
from typing import Any

import pyqtgraph as pg
import shiboken6
from pyqtgraph.graphicsItems.ScatterPlotItem import Symbols
from PySide6.QtCore import QEvent, QObject, QPointF, QRect, QRectF, Qt
from PySide6.QtGui import QPainter, QPixmapCache
from PySide6.QtWidgets import QLabel, QSplitter, QWidget

from dmlviewer.core.scene.scene import PIN_COLOUR
from dmlviewer.gui.pair import gl_viewport

#: The pin's star, 16 px across (pyqtgraph's "star" symbol, as the pin used to be drawn).
PIN_SIZE = 16
#: Grid lines per pane: caption, view box and colour bar, legend.
LINES = 3
#: Every column made (for the room its panes' images take in Qt's pixmap cache).
_COLUMNS: "weakref.WeakSet[PaneColumn]" = weakref.WeakSet()


def make_room_in_pixmap_cache() -> int:
    """Grow Qt's pixmap cache (never shrink it) to hold every column's images; returns its
    limit in KiB. Each pane keeps its photograph and its overall map rendered at screen
    resolution in that cache (``DeviceCoordinateCache``), so that a hover repaints from it. Qt's
    10 MiB default held the images of a 1400 x 800 window but not those of a large or dense
    screen: they were evicted and rendered anew at every hover (issue 40: two models in a
    2560 x 1400 window, p50 13.9 ms against 4.6 ms with room). Room: two images per viewport
    pixel of every column on screen (at most a photograph and a map under each), twice over."""
    columns = [c for c in list(_COLUMNS) if shiboken6.isValid(c) and c.isVisible()]
    pixels = sum(c.viewport().width() * c.viewport().height() * c.devicePixelRatioF() ** 2 for c in columns)
    need = int(pixels * 4 * 2 * 2 // 1024)
    if need > QPixmapCache.cacheLimit():
        QPixmapCache.setCacheLimit(need)
    return QPixmapCache.cacheLimit()


class LabelSlot(pg.GraphicsWidget):
    """A line of a column's grid with a Qt label laid over it (a pane's caption or its guides'
    legend): the label is a child widget of the column, so Qt's widgets lay its text out (rich
    text, elision, word wrap, tooltip), and it follows the line wherever the grid puts it."""

    def __init__(self, column: "PaneColumn", label: QLabel) -> None:
        super().__init__()
        self.column, self.label = column, label
        label.setParent(column)
        self.geometryChanged.connect(self.place)

    def fit_height(self) -> None:
        """The line as high as its label (at the column's width, for a wrapping label)."""
        label = self.label
        width = max(1, self.column.width() - 8)
        height = label.heightForWidth(width) if label.wordWrap() else -1
        height = max(height, label.sizeHint().height())
        if height != self.maximumHeight():
            self.setMinimumHeight(height)
            self.setMaximumHeight(height)

    def set_shown(self, shown: bool) -> None:
        self.setVisible(shown)
        self.label.setVisible(shown)
        self.place()

    def place(self) -> None:
        """The label over the line, in the column's widget coordinates."""
        if self.isVisible():
            self.label.setGeometry(self.column.widget_rect(self.sceneBoundingRect()))


class PaneColumn(pg.GraphicsLayoutWidget):
    """One graphics view holding the panes of one side, one under the other (see the module
    docstring). A pane (:class:`~dmlviewer.gui.pair.image_pane.ImagePane`) adds itself with
    :meth:`add` and provides ``view``, ``colorbar``, ``title_slot``, ``legend_slot``, ``shown``,
    ``crosshair``, ``pin``, ``view_rect()``, ``to_viewport(x, y)``, ``map_from_viewport(pos)``
    and the signals ``hovered``, ``left``."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setBackground("#1e1e1e")
        self.ci.setContentsMargins(2, 2, 2, 2)
        self.ci.layout.setVerticalSpacing(2)
        self.panes: list[Any] = []
        self._under: Any = None  # the pane the mouse is over
        self._cross_pen = pg.mkPen("#ffffff", width=1, style=Qt.DashLine, cosmetic=True)
        self._pin_pen = pg.mkPen("k", width=1, cosmetic=True)
        self._pin_brush = pg.mkBrush(PIN_COLOUR)
        self._star = Symbols["star"]
        self._watch_viewport()
        _COLUMNS.add(self)

    def add(self, pane: Any) -> None:
        """Lay ``pane`` out under the last pane (its view box first: a grid whose first item is
        a fixed-height line shrinks to that line's height)."""
        line = LINES * len(self.panes)
        self.panes.append(pane)
        self.addItem(pane.view, row=line + 1, col=0)
        self.addItem(pane.colorbar, row=line + 1, col=1)
        self.addItem(pane.title_slot, row=line, col=0, colspan=2)
        self.addItem(pane.legend_slot, row=line + 2, col=0, colspan=2)
        self.relayout()

    def relayout(self) -> None:
        """The grid over the whole viewport again after lines were shown or hidden (pyqtgraph
        sizes it when the view resizes; a layout that changed since may have shrunk it)."""
        self.ci.setGeometry(self.range)

    def close(self) -> bool:
        """pyqtgraph's ``close`` deletes the scene's items: the panes stop following them first."""
        for pane in self.panes:
            pane.detach()
        self.panes = []
        return super().close()

    def widget_rect(self, scene_rect: QRectF) -> QRect:
        """A scene rectangle in this widget's coordinates (where child labels are placed)."""
        return self.mapFromScene(scene_rect).boundingRect().translated(self.viewport().pos())

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt API
        super().resizeEvent(event)
        for pane in getattr(self, "panes", ()):  # pyqtgraph resizes once before __init__ ends
            pane.legend_slot.fit_height()
        make_room_in_pixmap_cache()

    # -- marks
    def drawForeground(self, painter: QPainter, rect: QRectF) -> None:  # noqa: N802 - Qt API
        marked = [p for p in self.panes if p.shown and (p.crosshair is not None or p.pin is not None)]
        if not marked:
            return
        painter.save()
        painter.resetTransform()
        for pane in marked:
            box = pane.view_rect()
            painter.setClipRect(box)
            if pane.crosshair is not None:
                p = pane.to_viewport(*pane.crosshair)
                painter.setPen(self._cross_pen)
                painter.drawLine(QPointF(p.x(), box.top()), QPointF(p.x(), box.bottom() + 1))
                painter.drawLine(QPointF(box.left(), p.y()), QPointF(box.right() + 1, p.y()))
            if pane.pin is not None:
                p = pane.to_viewport(*pane.pin)
                painter.save()
                painter.setRenderHint(QPainter.Antialiasing)
                painter.translate(p)
                painter.scale(PIN_SIZE, PIN_SIZE)
                painter.setPen(self._pin_pen)
                painter.setBrush(self._pin_brush)
                painter.drawPath(self._star)
                painter.restore()
        painter.restore()

    # -- mouse
    def _watch_viewport(self) -> None:
        """Plain moves over the viewport come to :meth:`eventFilter`."""
        self.viewport().installEventFilter(self)
        self.viewport().setMouseTracking(True)

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt API
        """Plain moves: ``hovered(x, y)`` of the pane whose photograph is under the mouse,
        ``left()`` of the pane it left; consumed, which spares pyqtgraph's per-move hover search."""
        kind = event.type()
        if kind == QEvent.MouseMove and event.buttons() == Qt.NoButton:
            under, point = None, None
            for pane in self.panes:
                point = pane.map_from_viewport(event.position()) if pane.shown else None
                if point is not None:
                    under = pane
                    break
            if self._under is not None and self._under is not under:
                self._under.left.emit()
            self._under = under
            if under is not None:
                under.hovered.emit(point[0], point[1])
            return True
        if kind == QEvent.MouseButtonPress:
            for pane in self.panes:  # Shift+drag draws a region (PaneViewBox)
                pane.view.press_modifiers = event.modifiers()
        if kind == QEvent.Leave and self._under is not None:
            under, self._under = self._under, None
            under.left.emit()
        return False

    # -- viewport
    @property
    def opengl(self) -> bool:
        """Whether the column draws through an OpenGL viewport (``gui/pair/gl_viewport.py``)."""
        return gl_viewport.is_opengl(self)

    def set_opengl(self, on: bool) -> bool:
        """An OpenGL viewport (``on``) or a raster one, raster where OpenGL is unavailable;
        returns whether the column now draws through OpenGL."""
        if self.opengl == on:
            return on
        used = gl_viewport.set_viewport(self, on)
        self._watch_viewport()
        self.viewport().update()
        return used


class PaneColumns(QSplitter):
    """A view's two sides side by side, the query's column and the reference's, with a divider
    the user can drag; every model row has its pane in each."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(Qt.Horizontal, parent)
        self.columns = (PaneColumn(), PaneColumn())
        for column in self.columns:
            self.addWidget(column)
            self.setStretchFactor(self.count() - 1, 1)
        self.setChildrenCollapsible(False)
