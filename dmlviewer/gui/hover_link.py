"""Hover and pin coordination between two image panes (the point-to-point interaction).

Hovering a point of one pane draws a crosshair there and, on the other pane, the partial map
of that point; a click pins the point (the partial map stays while the mouse moves on);
:meth:`HoverLink.unpin` (Escape) releases it. Mouse moves are coalesced: the first move after a
quiet period is drawn at once, later ones no sooner than ``interval_ms`` after the end of the
previous drawing (the newest wins), so hovering never queues work, however long a drawing takes. Each drawn event is one call of ``render(side, x, y)``, which the
owner implements with the core's precomputed hover renderer (a small array operation).

Rows (issue 24, two models): more pairs of panes showing the same two photographs can follow
with :meth:`HoverLink.add_row`; a point hovered or pinned on either row's pane is drawn on every
shown row (crosshair and pin on the same side, the row's own partial map on the other side), so
hovering model A's query drives model B's partial map too, and the other way round.
"""

from __future__ import annotations

import time
from typing import Callable

from PySide6.QtCore import QObject, QTimer, Signal

from dmlviewer.gui.image_pane import ImagePane

QUERY, REFERENCE = 0, 1
SIDE_NAMES = ("query", "reference")

#: render(side, x, y) -> H x W x 4 uint8 overlay for the other pane, or None when nothing is ready.
RenderFn = Callable[[int, float, float], object]


class _Row:
    """One pair of panes and the function that renders its partial maps."""

    def __init__(self, panes: tuple[ImagePane, ImagePane], render: RenderFn) -> None:
        self.panes = panes
        self.render = render
        self.shown = True


class HoverLink(QObject):
    """Links two panes; ``point_changed(side, x, y, pinned)`` / ``point_cleared()`` report the
    point whose partial map is on screen."""

    point_changed = Signal(int, float, float, bool)
    point_cleared = Signal()

    def __init__(self, panes: tuple[ImagePane, ImagePane], render: RenderFn,
                 restore: Callable[[], None], interval_ms: float = 8.0, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.panes = panes
        self.render = render
        self.rows: list[_Row] = []
        self.restore = restore
        self.interval_s = interval_ms / 1000.0
        self.enabled = True
        self.pinned: tuple[int, float, float] | None = None
        self.hover: tuple[int, float, float] | None = None
        self._pending: tuple[int, float, float] | None = None
        self._last = 0.0
        self._timer = QTimer(self, singleShot=True)
        self._timer.timeout.connect(self.flush)
        self.add_row(panes, lambda side, x, y: self.render(side, x, y))

    def add_row(self, panes: tuple[ImagePane, ImagePane], render: RenderFn) -> int:
        """Link another pair of panes showing the same photographs (see the module docstring);
        returns its row number (the first pair is row 0)."""
        row = len(self.rows)
        self.rows.append(_Row(panes, render))
        for side, pane in enumerate(panes):
            pane.hovered.connect(lambda x, y, s=side: self._moved(s, x, y))
            pane.left.connect(lambda s=side: self._left(s))
            pane.clicked.connect(lambda x, y, s=side: self.pin(s, x, y))
        return row

    def set_row_shown(self, row: int, shown: bool) -> None:
        """Draw the point on row ``row`` or not (a hidden row's marks are taken away)."""
        entry = self.rows[row]
        entry.shown = shown
        if not shown:
            for pane in entry.panes:
                pane.set_pin(None)
                pane.set_crosshair(None)

    def _shown(self) -> list[_Row]:
        return [row for row in self.rows if row.shown]

    # -- pin
    def pin(self, side: int, x: float, y: float) -> None:
        self.pinned = (side, x, y)
        for row in self._shown():
            row.panes[side].set_pin((x, y))
            row.panes[1 - side].set_pin(None)
        self._show(side, x, y, pinned=True)

    def unpin(self) -> None:
        if self.pinned is None:
            return
        self.pinned = None
        for row in self.rows:
            for pane in row.panes:
                pane.set_pin(None)
        # The pinned point's partial map is on the pane opposite the pin, which may be the pane
        # under the mouse now: put the overall maps back first, then draw the hovered point.
        self._clear()
        if self.hover is not None:
            self._show(*self.hover, pinned=False)

    def reset(self) -> None:
        """Forget pin and hover (new pair): marks off, nothing pending."""
        self._timer.stop()
        self._pending = None
        self.pinned = None
        self.hover = None
        for row in self.rows:
            for pane in row.panes:
                pane.set_pin(None)
                pane.set_crosshair(None)

    def refresh(self) -> None:
        """Redraw the point on screen (after a change of colours or data)."""
        point = self.pinned or self.hover
        if point is not None:
            self._show(*point, pinned=self.pinned is not None)

    # -- hover
    def flush(self) -> None:
        """Draw the newest pending move now (the coalescing timer calls this too)."""
        self._timer.stop()
        if self._pending is None:
            return
        side, x, y = self._pending
        self._pending = None
        self.hover = (side, x, y)
        for row in self._shown():
            row.panes[side].set_crosshair((x, y))
            row.panes[1 - side].set_crosshair(None)
        if self.pinned is None:
            self._show(side, x, y, pinned=False)
        # The interval counts from the end of this drawing: when drawing takes about as long as
        # the interval (two models, a fine grid, a slow machine), moves are still coalesced
        # instead of each being drawn at once, back to back.
        self._last = time.perf_counter()

    def _moved(self, side: int, x: float, y: float) -> None:
        if not self.enabled:
            return
        self._pending = (side, x, y)
        wait = self.interval_s - (time.perf_counter() - self._last)
        if wait <= 0:
            self.flush()
        elif not self._timer.isActive():
            self._timer.start(max(1, int(wait * 1000)))

    def _left(self, side: int) -> None:
        self._timer.stop()
        self._pending = None
        for row in self.rows:
            row.panes[side].set_crosshair(None)
        if self.hover is not None and self.hover[0] == side:
            self.hover = None
            if self.pinned is None:
                self._clear()

    def _show(self, side: int, x: float, y: float, pinned: bool) -> None:
        drawn = False
        for row in self._shown():
            rgba = row.render(side, x, y) if self.enabled else None
            if rgba is None:
                row.panes[1 - side].clear_overlay()
                continue
            row.panes[1 - side].set_rgba(rgba)
            drawn = True
        if drawn:
            self.point_changed.emit(side, x, y, pinned)

    def _clear(self) -> None:
        self.restore()
        self.point_cleared.emit()
