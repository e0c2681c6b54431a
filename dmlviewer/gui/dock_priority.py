"""The pair view before the docks when the main window is resized (issue 23 item 7).

QMainWindow gives a change of width to the central widget and lets the docks keep theirs, so a
window made narrow squeezed the pair view's images to a few pixels. :class:`DockPriority`
watches the window's resizes and, when the width crosses ``window.NARROW_WIDTH``, lays the
docks out again with ``window._default_dock_sizes()`` (one side column below that width, two
above it).
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, QTimer


class DockPriority(QObject):
    """Event filter on a main window; see the module docstring."""

    def __init__(self, window) -> None:
        super().__init__(window)
        self.window = window
        #: Whether the docks were last laid out for a narrow window (``_default_dock_sizes`` sets it).
        self.narrow: bool | None = None
        window.installEventFilter(self)

    def eventFilter(self, obj, event) -> bool:  # noqa: N802 - Qt API
        if obj is self.window and event.type() == QEvent.Resize and self.window.isVisible():
            narrow = self.window.width() < self.window.NARROW_WIDTH
            if self.narrow is None:  # a restored layout: taken as made for this width
                self.narrow = narrow
            elif narrow != self.narrow:
                self.narrow = narrow
                QTimer.singleShot(0, self.window._default_dock_sizes)
        return False
