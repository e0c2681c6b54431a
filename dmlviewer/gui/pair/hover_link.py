"""Hover and pin coordination between two image panes (the point-to-point interaction).

Hovering a point of one pane draws a crosshair there and, on the other pane, the partial map
of that point; a click pins the point (the partial map stays while the mouse moves on);
:meth:`HoverLink.unpin` (Escape) releases it. The pinned point is kept in one place, the
session (``Session.pinned``, issue 39 item 5): a click or Escape sets it there, and the link
draws whatever the session's ``events.pinned`` announces, from the panes or from Python, also
while the pair is still being prepared (the pin's partial map follows when it is ready). A link
without a session (the group tabs') keeps its pin in a :class:`LocalPin` of its own. Mouse moves
are throttled by superqt's ``qthrottled`` (issue 40): the first move after a quiet period is drawn
at once, later ones no sooner than ``interval_ms`` after the end of the previous drawing (the
throttle's timer starts once the drawing returns; the newest move wins), so hovering never queues
work, however long a drawing takes. The status line is throttled the same way, at
``STATUS_INTERVAL_MS``: it is worded and shown at most that often, and the newest line always
ends up shown.

Rows (issue 24, issue 30): each row is a pair of panes showing the same two photographs (one
model per row in the pair view); a point hovered or pinned on either row's pane is drawn on every
shown row (crosshair and pin on the same side, the row's own partial map on the other side).
A row may show a reference of its own (model B's top-1 beside A's, issue 41; its
``LinkRow.reference`` differs): a point of a reference is then drawn only on the rows showing
that reference, while a point of the query, which every row shows, is drawn on all.
Each drawn event is one core call, :func:`dmlviewer.core.explain.hover.hover_points`, which
gives every row's overlay, share and peak from one blend per row, each overlay rendered at the
size its pane shows the photograph at on screen (``ImagePane.overlay_shape``: drawn unscaled,
issue 40); the link then writes every pane itself: the overlay, the row's colour bar and the
read-out its owner formats. The owner
sets each row's renderers, colour bar and read-out whenever the pair or the display changes,
and ``describe`` words the point for the status bar (``message``).
"""

from __future__ import annotations

from typing import Any, Callable

import shiboken6
from psygnal import Signal as EventSignal, SignalGroup
from PySide6.QtCore import QObject, Signal
from superqt.utils import qthrottled

from dmlviewer.core.explain.hover import HoverPoint, hover_points
from dmlviewer.core.session import pinned_point
from dmlviewer.gui.pair.image_pane import ImagePane

QUERY, REFERENCE = 0, 1
SIDE_NAMES = ("query", "reference")
#: the status line is worded and shown at most this often (a person reads it, a screen need not
#: repaint the status bar at every drawn move)
STATUS_INTERVAL_MS = 50


class _PinEvents(SignalGroup):
    pinned = EventSignal()


class LocalPin:
    """The pinned point of a link that is not bound to the session (the group tabs' maps):
    the session's ``pinned``, ``set_pinned`` and ``events.pinned``, and nothing else."""

    def __init__(self) -> None:
        self.events = _PinEvents()
        self.pinned: tuple[int, float, float] | None = None

    def set_pinned(self, point: tuple | None) -> None:
        point = None if point is None else pinned_point(point)
        if point != self.pinned:
            self.pinned = point
            self.events.pinned.emit()

#: colour bar of a row's partial maps: (colour map, signed, levels, title)
Colorbar = tuple[str, bool, tuple[float, float], str]
#: describe(side, x, y, each shown row's point (None where it has none), pinned) -> status
#: text (None: say nothing); called with side None and no points when the point is cleared
Describe = Callable[[int | None, float, float, list, bool], str | None]


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
        #: which reference photograph the row shows (set by the owner; rows with the same value
        #: show the same one)
        self.reference: Any = None


class HoverLink(QObject):
    """Links rows of two panes; ``message(text)`` is the point's status line (see ``describe``).
    ``pins``: where the pinned point is kept (the session; None: a :class:`LocalPin`)."""

    message = Signal(str)

    def __init__(self, restore: Callable[[], None], describe: Describe | None = None, interval_ms: float = 8.0,
                 parent: QObject | None = None, pins: Any = None) -> None:
        super().__init__(parent)
        self.pins = pins if pins is not None else LocalPin()
        self._pin_side: int | None = None  # the side of the pin last drawn
        self._pin_row: LinkRow | None = None  # the row clicked to pin (None: set from Python, row A's)
        self._pin_drawn_row: LinkRow | None = None  # the row of the pin last drawn
        self._hover_row: LinkRow | None = None  # the row whose pane is hovered
        self.pins.events.pinned.connect(self._on_pinned)
        self.rows: list[LinkRow] = []
        self.restore = restore
        self.describe = describe
        #: the shown rows' "each map" partial maps on one colour scale (the larger peak)
        self.shared_peak = False
        self.enabled = True
        self.hover: tuple[int, float, float] | None = None
        self._draw_move = qthrottled(self._draw_hover, timeout=max(1, round(interval_ms)), leading=True, parent=self)
        self._say = qthrottled(self._say_now, timeout=STATUS_INTERVAL_MS, leading=True, parent=self)

    def add_row(self, panes: tuple[ImagePane, ImagePane]) -> LinkRow:
        """Link another pair of panes showing the same photographs (see the module docstring)."""
        row = LinkRow(panes)
        self.rows.append(row)
        for side, pane in enumerate(panes):
            pane.hovered.connect(lambda x, y, s=side, r=row: self._moved(s, x, y, r))
            pane.left.connect(lambda s=side: self._left(s))
            pane.clicked.connect(lambda x, y, s=side, r=row: self.pin(s, x, y, r))
        return row

    def set_row_shown(self, row: LinkRow, shown: bool) -> None:
        """Draw the point on ``row`` or not (a hidden row's marks are taken away; a row shown
        again gets the pin)."""
        row.shown = shown
        if not shown:
            for pane in row.panes:
                pane.set_pin(None)
                pane.set_crosshair(None)
        else:
            self._mark_pin()

    def _shown(self) -> list[LinkRow]:
        return [row for row in self.rows if row.shown]

    def _draws(self, row: LinkRow, side: int, source: LinkRow | None) -> bool:
        """Is a point of ``side`` on ``source``'s pane (None: row A's) drawn on ``row``? Always
        for the query; for a reference, on the rows showing the same one."""
        if side != REFERENCE:
            return True
        source = source if source is not None else (self.rows[0] if self.rows else None)
        return source is None or row.reference == source.reference

    # -- pin: kept by ``pins`` (the session); the link draws what it announces
    @property
    def pinned(self) -> tuple[int, float, float] | None:
        """The pinned point ``(side, x, y)`` (the session's), None: none."""
        return self.pins.pinned

    def pin(self, side: int, x: float, y: float, row: LinkRow | None = None) -> None:
        """Pin the point (a click on ``row``'s pane): set on the session, drawn when it announces it."""
        self._pin_row = row
        self.pins.set_pinned((side, x, y))

    def unpin(self) -> None:
        """Release the pin (Escape)."""
        self.pins.set_pinned(None)

    def _mark_pin(self) -> None:
        """The pin's star on every shown row's pane of its side (none on the other side)."""
        point = self.pinned
        for row in self.rows:
            for side, pane in enumerate(row.panes):
                on = (point is not None and row.shown and side == point[0]
                      and self._draws(row, side, self._pin_row))
                pane.set_pin((point[1], point[2]) if on else None)

    def _on_pinned(self) -> None:
        """The pinned point changed (a click, Escape, or Python): draw it, or draw the hovered
        point again when it was released."""
        if not shiboken6.isValid(self):
            return
        previous, self._pin_side = self._pin_side, None if self.pinned is None else self.pinned[0]
        previous_row, self._pin_drawn_row = self._pin_drawn_row, self._pin_row
        self._mark_pin()
        if self.pinned is not None:
            moved = previous != self.pinned[0] or (previous == REFERENCE and previous_row is not self._pin_row)
            if previous is not None and moved:
                self.restore()  # the old pin's partial map is elsewhere: overall maps back
            self._show(*self.pinned, pinned=True, source=self._pin_row)
            return
        self._pin_row = None
        # The pinned point's partial map is on the pane opposite the pin, which may be the pane
        # under the mouse now: put the overall maps back first, then draw the hovered point.
        self._clear()
        if self.hover is not None:
            self._show(*self.hover, pinned=False, source=self._hover_row)

    def reset(self) -> None:
        """Forget pin and hover (new pair): marks off, nothing pending."""
        self._draw_move.cancel()
        self._say.cancel()
        self.hover = None
        for row in self.rows:
            for pane in row.panes:
                pane.set_pin(None)
                pane.set_crosshair(None)
        self.pins.set_pinned(None)

    def refresh(self) -> None:
        """Redraw the point on screen (after a change of colours or data, or a pair that became
        ready while a point was pinned)."""
        if self.pinned is not None:
            self._mark_pin()
            self._show(*self.pinned, pinned=True, source=self._pin_row)
        elif self.hover is not None:
            self._show(*self.hover, pinned=False, source=self._hover_row)

    def close(self) -> None:
        """Stop following the pinned point (the link's owner is closing)."""
        self.pins.events.pinned.disconnect(self._on_pinned, missing_ok=True)

    # -- hover
    def flush(self, status: bool = True) -> None:
        """Draw the newest pending move now, and with ``status`` show the newest status line now
        too (else it follows at the status throttle's pace, as in the app)."""
        self._draw_move.flush()
        if status:
            self._say.flush()

    def _draw_hover(self, side: int, x: float, y: float, row: LinkRow | None) -> None:
        """Draw a move (called by the throttle: at once after a quiet period, else the newest)."""
        self._hover_row = row
        self.hover = (side, x, y)
        for shown in self._shown():
            shown.panes[side].set_crosshair((x, y) if self._draws(shown, side, row) else None)
            shown.panes[1 - side].set_crosshair(None)
        if self.pinned is None:
            self._show(side, x, y, pinned=False, source=row)

    def _moved(self, side: int, x: float, y: float, row: LinkRow | None = None) -> None:
        if self.enabled:
            self._draw_move(side, x, y, row)

    def _left(self, side: int) -> None:
        self._draw_move.cancel()
        for row in self.rows:
            row.panes[side].set_crosshair(None)
        if self.hover is not None and self.hover[0] == side:
            self.hover = None
            if self.pinned is None:
                self._clear()

    def _show(self, side: int, x: float, y: float, pinned: bool, source: LinkRow | None = None) -> None:
        rows = self._shown()
        # a row showing another reference than the one of the point keeps its overall maps
        drawing = [self._draws(row, side, source) for row in rows]
        if self.enabled:  # each overlay at its pane's size on screen
            points = hover_points([row.renderers.get(side) if on else None for row, on in zip(rows, drawing)],
                                  x, y, self.shared_peak,
                                  [row.panes[1 - side].overlay_shape() if on else None for row, on in zip(rows, drawing)])
        else:
            points = [None] * len(rows)
        drawn = False
        for row, point, on in zip(rows, points, drawing):
            if not on:
                continue
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
        if drawn:
            self._say(side, x, y, points, pinned)

    def _clear(self) -> None:
        self.restore()
        self._say(None, 0.0, 0.0, [], False)

    def _say_now(self, side: int | None, x: float, y: float, points: list, pinned: bool) -> None:
        """Word the point for the status bar and announce it (called by the status throttle)."""
        if self.describe is not None and shiboken6.isValid(self):
            text = self.describe(side, x, y, points, pinned)
            if text is not None:
                self.message.emit(text)
