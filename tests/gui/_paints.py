"""Paint events a widget receives, shared by the GUI tests that count repaints."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject


class PaintLog(QObject):
    """Regions of the paint events a widget receives."""

    def __init__(self, widget) -> None:
        super().__init__()
        self.regions = []
        widget.installEventFilter(self)

    def eventFilter(self, obj, event) -> bool:  # noqa: N802 - Qt API
        if event.type() == QEvent.Paint:
            self.regions.append(event.region())
        return False

    def area(self) -> int:
        return sum(r.width() * r.height() for region in self.regions for r in region)
