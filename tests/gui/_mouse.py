"""Real mouse events on an image pane, shared by the GUI tests that hover and pin."""

from __future__ import annotations

from PySide6.QtCore import QPoint, QPointF
from PySide6.QtTest import QTest


def viewport_pos(pane, x: float, y: float) -> QPoint:
    """Viewport pixel where image point (x, y) (core coordinates) is drawn."""
    scene = pane.view.mapViewToScene(QPointF(x + 0.5, y + 0.5))
    return pane.graphics.mapFromScene(scene)


def hover(pane, link, x: float, y: float):
    """Move the mouse over image point (x, y) of ``pane``; the hovered point after the move."""
    QTest.mouseMove(pane.graphics.viewport(), viewport_pos(pane, x, y))
    link.flush()
    return link.hover
