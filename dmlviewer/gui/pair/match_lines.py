"""The pair view's match lines (``PairExplanation.correspondences``): the top-N point-to-point
correspondences as numbered markers on both panes, joined by coloured lines drawn on a
transparent layer over the panes, each line as strong as its match."""

from __future__ import annotations

from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QColor, QPainter, QPen
from PySide6.QtWidgets import QWidget

from dmlviewer.gui.common import errors
from dmlviewer.gui.pair.image_pane import MARKER_COLORS, ImagePane


class MatchLines(QWidget):
    """Transparent layer over both panes that joins matched points with coloured lines."""

    def __init__(self, panes: tuple[ImagePane, ImagePane], parent: QWidget) -> None:
        super().__init__(parent)
        self.setAttribute(Qt.WA_TransparentForMouseEvents)
        self.setAttribute(Qt.WA_NoSystemBackground)
        self.panes = panes
        self.matches: list[dict] = []

    def paintEvent(self, event) -> None:  # noqa: N802 - Qt API
        if not self.matches:
            return
        painter = QPainter(self)
        painter.setRenderHint(QPainter.Antialiasing)
        q, r = self.panes
        top = max((float(m["score"]) for m in self.matches), default=0.0)
        for k, m in enumerate(self.matches):
            # The layer covers its parent (the panes' container) exactly: parent coordinates.
            a = q.graphics.mapTo(self.parentWidget(), q.map_to_widget(*m["query_xy"]).toPoint())
            b = r.graphics.mapTo(self.parentWidget(), r.map_to_widget(*m["reference_xy"]).toPoint())
            # A line is as strong as its match: weak matches (picked once the strong cells are
            # used up) are drawn thin and faint, not like the best one.
            strength = float(m["score"]) / top if top > 0 else 1.0
            color = QColor(MARKER_COLORS[k % len(MARKER_COLORS)])
            color.setAlphaF(0.25 + 0.75 * strength)
            painter.setPen(QPen(color, 1.0 + 2.0 * strength))
            painter.drawLine(QPointF(a), QPointF(b))
        painter.end()


    def show_matches(self, explanation, count: int | None) -> None:
        """Mark the ``count`` strongest correspondences of ``explanation`` (None, or count
        None: none) on both panes and join them; a failure is said in a dialog."""
        matches = []
        if explanation is not None and count:
            try:
                matches = list(explanation.correspondences(int(count)))
            except Exception as exc:  # noqa: BLE001
                errors.report_exception(self.parentWidget(), "Correspondences failed", exc)
        q, r = self.panes
        q.set_markers([m["query_xy"] for m in matches])
        r.set_markers([m["reference_xy"] for m in matches])
        self.matches = matches
        self.setVisible(bool(matches))
        self.follow()

    def clear(self) -> None:
        """No lines (the markers are the caller's to clear with the pair)."""
        self.matches = []
        self.update()

    def follow(self, *_args) -> None:
        """Cover the parent again and repaint (the panes moved, zoomed or were resized)."""
        if self.isVisible():
            self.setGeometry(self.parentWidget().rect())
            self.raise_()
            self.update()
