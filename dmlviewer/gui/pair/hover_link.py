"""Hover and pin coordination between two image panes (the point-to-point interaction).

Hovering a point of one pane draws a crosshair there and, on the other pane, the partial map
of that point; a click pins the point (the partial map stays while the mouse moves on);
:meth:`HoverLink.unpin` (Escape) releases it. Mouse moves are coalesced: the first move after a
quiet period is drawn at once, later ones no sooner than ``interval_ms`` after the end of the
previous drawing (the newest wins), so hovering never queues work, however long a drawing takes.

Rows (issue 24, issue 30): each row is a pair of panes showing the same two photographs (one
model per row in the pair view); a point hovered or pinned on either row's pane is drawn on every
shown row (crosshair and pin on the same side, the row's own partial map on the other side).
Each drawn event is one core call, :func:`dmlviewer.core.explain.hover.hover_points`, which
gives every row's overlay, share and peak from one blend per row; the link then writes every
pane itself: the overlay, the row's colour bar and the read-out its owner formats. The owner
sets each row's renderers, colour bar and read-out whenever the pair or the display changes,
and ``describe`` words the point for the status bar (``message``).
"""

from __future__ import annotations

import time
from typing import Any, Callable

from PySide6.QtCore import QObject, QTimer, Signal

from dmlviewer.core.explain.hover import HoverPoint, hover_points
from dmlviewer.gui.pair.image_pane import ImagePane

QUERY, REFERENCE = 0, 1
SIDE_NAMES = ("query", "reference")

#: colour bar of a row's partial maps: (colour map, signed, levels, title)
Colorbar = tuple[str, bool, tuple[float, float], str]
#: describe(side, x, y, first row's point or None, pinned) -> status text (None: say nothing);
#: called with side None when the point is cleared
Describe = Callable[[int | None, float, float, HoverPoint | None, bool], str | None]


class LinkRow:
    """One pair of panes and what its partial maps are drawn with (set by the owner):
    ``renderers`` (hovered side -> core renderer; none: nothing drawn on this row),
    ``colorbar`` and ``readout(point) -> html or None``."""

    def __init__(self, panes: tuple[ImagePane, ImagePane]) -> None:
        self.panes = panes
        self.shown = True
        self.renderers: dict[int, Any] = {}
        self.colorbar: Colorbar | None = None
        self.readout: Callable[[HoverPoint], str | None] | None = None


class HoverLink(QObject):
    """Links rows of two panes; ``message(text)`` is the point's status line (see ``describe``),
    ``pinned_changed()`` says ``pinned`` changed (the session keeps the pinned point)."""

    message = Signal(str)
    pinned_changed = Signal()

    def __init__(self, restore: Callable[[], None], describe: Describe | None = None, interval_ms: float = 8.0,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.rows: list[LinkRow] = []
        self.restore = restore
        self.describe = describe
        #: the shown rows' "each map" partial maps on one colour scale (the larger peak)
        self.shared_peak = False
        self.interval_s = interval_ms / 1000.0
        self.enabled = True
        self.pinned: tuple[int, float, float] | None = None
        self.hover: tuple[int, float, float] | None = None
        self._pending: tuple[int, float, float] | None = None
        self._last = 0.0
        self._timer = QTimer(self, singleShot=True)
        self._timer.timeout.connect(self.flush)

    def add_row(self, panes: tuple[ImagePane, ImagePane]) -> LinkRow:
        """Link another pair of panes showing the same photographs (see the module docstring)."""
        row = LinkRow(panes)
        self.rows.append(row)
        for side, pane in enumerate(panes):
            pane.hovered.connect(lambda x, y, s=side: self._moved(s, x, y))
            pane.left.connect(lambda s=side: self._left(s))
            pane.clicked.connect(lambda x, y, s=side: self.pin(s, x, y))
        return row

    def set_row_shown(self, row: LinkRow, shown: bool) -> None:
        """Draw the point on ``row`` or not (a hidden row's marks are taken away)."""
        row.shown = shown
        if not shown:
            for pane in row.panes:
                pane.set_pin(None)
                pane.set_crosshair(None)

    def _shown(self) -> list[LinkRow]:
        return [row for row in self.rows if row.shown]
    # -- pin
    def pin(self, side: int, x: float, y: float) -> None:
        self.pinned = (side, x, y)
        for row in self._shown():
            row.panes[side].set_pin((x, y))
            row.panes[1 - side].set_pin(None)
        self._show(side, x, y, pinned=True)
        self.pinned_changed.emit()

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
        self.pinned_changed.emit()

    def reset(self) -> None:
        """Forget pin and hover (new pair): marks off, nothing pending."""
        self._timer.stop()
        self._pending = None
        was_pinned, self.pinned = self.pinned is not None, None
        self.hover = None
        for row in self.rows:
            for pane in row.panes:
                pane.set_pin(None)
                pane.set_crosshair(None)
        if was_pinned:
            self.pinned_changed.emit()

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
        rows = self._shown()
        if self.enabled:
            points = hover_points([row.renderers.get(side) for row in rows], x, y, self.shared_peak)
        else:
            points = [None] * len(rows)
        drawn = False
        for row, point in zip(rows, points):
            pane = row.panes[1 - side]
            if point is None:
                pane.clear_overlay()
                continue
            if point.index is not None:  # the core's colour indices: one look-up into the pane's buffer
                pane.set_indexed(point.index, point.lut)
            else:
                pane.set_rgba(point.rgba)
            if row.colorbar is not None:
                pane.set_colorbar(*row.colorbar)
            pane.show_readout(row.readout(point) if row.readout is not None else None)
            drawn = True
        if drawn and self.describe is not None:
            text = self.describe(side, x, y, points[0] if points else None, pinned)
            if text is not None:
                self.message.emit(text)

    def _clear(self) -> None:
        self.restore()
        if self.describe is not None:
            text = self.describe(None, 0.0, 0.0, None, False)
            if text is not None:
                self.message.emit(text)
