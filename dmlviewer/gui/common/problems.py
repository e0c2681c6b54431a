"""The problems list: unreadable images (path and reason), one row per file."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QGuiApplication, QKeySequence, QPainter
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableWidget, QTableWidgetItem


#: What the empty list says (it is opened from View > Problems when there is nothing to list).
EMPTY_TEXT = ("No problems: every image read so far opened fine. Unreadable images (missing, "
              "truncated, not an image) are listed here with their path and the reason.")


class ProblemsList(QTableWidget):
    """Two columns, path and reason; ``count_changed(n)`` after each new problem. Empty, it
    says so in its middle."""

    count_changed = Signal(int)

    def __init__(self, parent=None) -> None:
        super().__init__(0, 2, parent)
        self.setHorizontalHeaderLabels(["Path", "Reason"])
        self.horizontalHeader().setSectionResizeMode(0, QHeaderView.Interactive)
        self.horizontalHeader().setStretchLastSection(True)
        self.horizontalHeader().resizeSection(0, 420)
        self.verticalHeader().setVisible(False)
        self.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.setWordWrap(False)
        self._seen: set[str] = set()

    def add_problem(self, path: str, reason: str) -> None:
        if path in self._seen:
            return
        self._seen.add(path)
        row = self.rowCount()
        self.insertRow(row)
        for col, text in enumerate((path, reason)):
            item = QTableWidgetItem(text)
            item.setToolTip(text)
            self.setItem(row, col, item)
        self.count_changed.emit(self.rowCount())

    def problems(self) -> list[tuple[str, str]]:
        return [(self.item(r, 0).text(), self.item(r, 1).text()) for r in range(self.rowCount())]

    def clear_problems(self) -> None:
        self._seen.clear()
        self.setRowCount(0)
        self.count_changed.emit(0)

    def paintEvent(self, event) -> None:  # noqa: N802 - Qt API
        super().paintEvent(event)
        if self.rowCount() == 0:
            painter = QPainter(self.viewport())
            painter.setPen(self.palette().placeholderText().color())
            painter.drawText(self.viewport().rect().adjusted(12, 8, -12, -8), Qt.AlignCenter | Qt.TextWordWrap,
                             EMPTY_TEXT)
            painter.end()

    def keyPressEvent(self, event) -> None:  # noqa: N802 - Qt API
        if event.matches(QKeySequence.StandardKey.Copy):
            rows = sorted({i.row() for i in self.selectedIndexes()})
            QGuiApplication.clipboard().setText(
                "\n".join(f"{self.item(r, 0).text()}\t{self.item(r, 1).text()}" for r in rows))
            return
        super().keyPressEvent(event)
