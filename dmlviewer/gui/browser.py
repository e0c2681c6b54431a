"""The dataset browser: a virtualized thumbnail grid with split/class filters and name search.

One ``QListView`` (wrapping left-to-right flow, uniform item sizes, fixed grid) over a
``QAbstractListModel`` whose rows are an index array into the :class:`Dataset`: no widget per
image, filtering is numpy on the whole listing (fast on 120,000 rows), and thumbnails come
from the shared :class:`~dmlviewer.gui.thumbnails.ThumbnailLoader` only for the rows on
screen.

Choosing images: a click makes the image the query, Ctrl+click (or "Set as reference" in the
context menu) makes it the reference. The query is framed blue with a "Q" badge, the
reference orange with an "R" badge; the hint line above the grid says so.
"""

from __future__ import annotations

import logging
import numpy as np
from PySide6.QtCore import (QAbstractListModel, QModelIndex, QPoint, QRect, QSize, Qt, QTimer,
                            Signal)
from PySide6.QtGui import QAction, QColor, QFont, QGuiApplication, QPainter, QPen
from PySide6.QtWidgets import (QComboBox, QHBoxLayout, QLabel, QLineEdit, QListView, QMenu,
                               QStyle, QStyledItemDelegate, QStyleOptionViewItem, QVBoxLayout,
                               QWidget)

from dmlviewer.gui.thumbnails import ThumbnailLoader

log = logging.getLogger(__name__)

QUERY_COLOR = QColor("#2f80ed")
REFERENCE_COLOR = QColor("#f2994a")

#: Model roles beyond Qt's.
INDEX_ROLE = Qt.UserRole + 1  # dataset index of the row
MARK_ROLE = Qt.UserRole + 2  # "query", "reference" or None
BROKEN_ROLE = Qt.UserRole + 3  # reason the image cannot be read, or None


class ThumbnailModel(QAbstractListModel):
    """Rows = filtered dataset indices; decoration = the loader's thumbnail or None."""

    def __init__(self, loader: ThumbnailLoader, parent=None) -> None:
        super().__init__(parent)
        self.loader = loader
        self.dataset = None
        self.rows = np.zeros(0, dtype=np.int64)
        self._names: np.ndarray = np.zeros(0, dtype=object)
        self._marks: dict[int, str] = {}
        loader.ready.connect(self._on_ready)

    # -- content
    def set_dataset(self, dataset) -> None:
        self.beginResetModel()
        self.dataset = dataset
        self._marks = {}
        if dataset is None:
            self.rows = np.zeros(0, dtype=np.int64)
            self._names = np.zeros(0, dtype=object)
        else:
            self.rows = np.arange(len(dataset), dtype=np.int64)
            self._names = np.array([p.rsplit("/", 1)[-1].lower() for p in dataset.paths], dtype=object)
        self.endResetModel()

    def set_filter(self, split: str | None = None, label: int | None = None, text: str = "") -> None:
        """Keep rows of ``split`` (None: all), class ``label`` (None: all) whose file name
        contains ``text`` (case-insensitive)."""
        ds = self.dataset
        if ds is None:
            return
        mask = np.ones(len(ds), dtype=bool)
        if split:
            mask &= ds.split == split
        if label is not None:
            mask &= ds.labels == label
        text = text.strip().lower()
        if text:
            candidates = np.flatnonzero(mask)
            names = self._names
            hits = [i for i in candidates.tolist() if text in names[i]]
            mask[:] = False
            mask[np.asarray(hits, dtype=np.int64)] = True
        self.beginResetModel()
        self.rows = np.flatnonzero(mask).astype(np.int64)
        self.endResetModel()

    def set_marks(self, query: int | None, reference: int | None) -> None:
        old = set(self._marks)
        self._marks = {}
        if reference is not None:
            self._marks[reference] = "reference"
        if query is not None:
            self._marks[query] = "query"
        for index in old | set(self._marks):
            self._emit_changed(index)

    def row_of(self, index: int) -> int | None:
        """Row of dataset index ``index`` in the filtered listing (rows are sorted)."""
        pos = int(np.searchsorted(self.rows, index))
        return pos if pos < len(self.rows) and self.rows[pos] == index else None

    # -- Qt model
    def rowCount(self, parent: QModelIndex = QModelIndex()) -> int:  # noqa: N802 - Qt API
        return 0 if parent.isValid() else len(self.rows)

    def data(self, index: QModelIndex, role: int = Qt.DisplayRole):
        if not index.isValid() or self.dataset is None:
            return None
        i = int(self.rows[index.row()])
        if role == Qt.DecorationRole:
            return self.loader.thumbnail(i)
        if role == Qt.DisplayRole:
            # The file's name tells the images apart (the class is the same for a whole run of
            # rows, and in the tooltip and the class filter); drawn elided in the middle.
            return self.dataset.paths[i].rsplit("/", 1)[-1]
        if role == INDEX_ROLE:
            return i
        if role == MARK_ROLE:
            return self._marks.get(i)
        if role == BROKEN_ROLE:
            return self.loader.broken_reason(i)
        if role == Qt.ToolTipRole:
            ds = self.dataset
            text = (f"{ds.paths[i]}\nclass: {ds.class_names[int(ds.labels[i])]}\n"
                    f"split: {ds.split[i]}\nindex: {i}")
            reason = self.loader.broken_reason(i)
            return text + (f"\nunreadable: {reason}" if reason else "")
        return None

    def _emit_changed(self, index: int) -> None:
        row = self.row_of(index)
        if row is not None:
            qi = self.index(row)
            self.dataChanged.emit(qi, qi, [Qt.DecorationRole])

    def _on_ready(self, index: int) -> None:
        self._emit_changed(index)


class ThumbnailDelegate(QStyledItemDelegate):
    """Paints thumbnail, query/reference frame and badge, broken marker and class name."""

    TEXT_H = 18

    def __init__(self, thumb: int, parent=None) -> None:
        super().__init__(parent)
        self.thumb = thumb

    def sizeHint(self, option, index) -> QSize:  # noqa: N802 - Qt API
        return QSize(self.thumb + 8, self.thumb + self.TEXT_H + 8)

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: QModelIndex) -> None:
        rect = option.rect.adjusted(2, 2, -2, -2)
        painter.save()
        palette = option.palette
        if option.state & QStyle.State_Selected:
            painter.fillRect(rect, palette.highlight().color().darker(150))
        elif option.state & QStyle.State_MouseOver:
            painter.fillRect(rect, palette.alternateBase())
        img_rect = QRect(rect.x() + 2, rect.y() + 2, rect.width() - 4, self.thumb)
        pix = index.data(Qt.DecorationRole)
        broken = index.data(BROKEN_ROLE)
        if pix is not None:
            size = pix.size()
            x = img_rect.x() + (img_rect.width() - size.width()) // 2
            y = img_rect.y() + (img_rect.height() - size.height()) // 2
            painter.drawPixmap(x, y, pix)
        else:
            painter.fillRect(img_rect.adjusted(8, 8, -8, -8), QColor(80, 80, 80) if not broken else QColor(90, 40, 40))
            if broken:
                painter.setPen(QPen(QColor(230, 90, 90), 3))
                r = img_rect.adjusted(24, 24, -24, -24)
                painter.drawLine(r.topLeft(), r.bottomRight())
                painter.drawLine(r.topRight(), r.bottomLeft())
        mark = index.data(MARK_ROLE)
        if mark:
            color = QUERY_COLOR if mark == "query" else REFERENCE_COLOR
            painter.setPen(QPen(color, 3))
            painter.drawRect(img_rect.adjusted(1, 1, -1, -1))
            badge = QRect(img_rect.x() + 3, img_rect.y() + 3, 18, 18)
            painter.fillRect(badge, color)
            painter.setPen(Qt.white)
            font = QFont(option.font)
            font.setBold(True)
            painter.setFont(font)
            painter.drawText(badge, Qt.AlignCenter, "Q" if mark == "query" else "R")
        text_rect = QRect(rect.x(), img_rect.bottom() + 2, rect.width(), self.TEXT_H)
        painter.setFont(option.font)
        painter.setPen(palette.text().color())
        text = option.fontMetrics.elidedText(str(index.data(Qt.DisplayRole) or ""), Qt.ElideMiddle,
                                             text_rect.width() - 4)
        painter.drawText(text_rect, Qt.AlignHCenter | Qt.AlignVCenter, text)
        painter.restore()


class _GridView(QListView):
    """The grid; remembers the keyboard modifiers of the last mouse press (Ctrl = reference)."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.press_modifiers = Qt.NoModifier

    def mousePressEvent(self, event) -> None:  # noqa: N802 - Qt API
        self.press_modifiers = event.modifiers()
        super().mousePressEvent(event)


class DatasetBrowser(QWidget):
    """Filters, hint line, the thumbnail grid and a count; emits the chosen images."""

    query_chosen = Signal(int)
    reference_chosen = Signal(int)

    def __init__(self, loader: ThumbnailLoader, parent=None) -> None:
        super().__init__(parent)
        self.loader = loader
        self.model = ThumbnailModel(loader, self)
        thumb = loader.size

        self.split_combo = QComboBox()
        self.split_combo.setToolTip("Show only this split")
        self.class_combo = QComboBox()
        self.class_combo.setToolTip("Show only this class")
        self.class_combo.setMinimumContentsLength(10)
        self.class_combo.setSizeAdjustPolicy(QComboBox.AdjustToMinimumContentsLengthWithIcon)
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search file names…")
        self.search.setClearButtonEnabled(True)
        self.hint = QLabel("Click: <b style='color:#2f80ed'>query</b> · Ctrl+click: "
                           "<b style='color:#f2994a'>reference</b>")
        self.count = QLabel("No dataset")
        self.count.setObjectName("browserCount")

        self.view = _GridView()
        self.view.setModel(self.model)
        self.view.setItemDelegate(ThumbnailDelegate(thumb, self.view))
        self.view.setViewMode(QListView.ListMode)
        self.view.setFlow(QListView.LeftToRight)
        self.view.setWrapping(True)
        self.view.setResizeMode(QListView.Adjust)
        self.view.setMovement(QListView.Static)
        self.view.setUniformItemSizes(True)
        self.view.setLayoutMode(QListView.SinglePass)
        self.view.setVerticalScrollMode(QListView.ScrollPerPixel)
        self.view.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        self.view.verticalScrollBar().setSingleStep(thumb // 3)
        self.view.setGridSize(QSize(thumb + 8, thumb + ThumbnailDelegate.TEXT_H + 8))
        self.view.setSelectionMode(QListView.SingleSelection)
        self.view.setMouseTracking(True)
        self.view.setContextMenuPolicy(Qt.CustomContextMenu)
        self.view.customContextMenuRequested.connect(self._context_menu)
        self.view.clicked.connect(self._on_clicked)
        self.view.activated.connect(self._on_activated)
        self.view.verticalScrollBar().valueChanged.connect(self._schedule_visible)
        self.model.modelReset.connect(self._schedule_visible)

        self._search_timer = QTimer(self, singleShot=True, interval=150)
        self._search_timer.timeout.connect(self._apply_filter)
        self._visible_timer = QTimer(self, singleShot=True, interval=0)
        self._visible_timer.timeout.connect(self.update_visible)
        self.split_combo.currentIndexChanged.connect(self._apply_filter)
        self.class_combo.currentIndexChanged.connect(self._apply_filter)
        self.search.textChanged.connect(lambda _t: self._search_timer.start())

        filters = QHBoxLayout()
        filters.setContentsMargins(0, 0, 0, 0)
        filters.addWidget(self.split_combo)
        filters.addWidget(self.class_combo, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.setSpacing(4)
        layout.addLayout(filters)
        layout.addWidget(self.search)
        layout.addWidget(self.hint)
        layout.addWidget(self.view, 1)
        layout.addWidget(self.count)
        self.set_dataset(None)

    # -- content
    def set_dataset(self, dataset) -> None:
        self.loader.set_paths("" if dataset is None else str(dataset.root), [] if dataset is None else dataset.paths)
        for combo in (self.split_combo, self.class_combo):
            combo.blockSignals(True)
            combo.clear()
        self.split_combo.addItem("All splits", None)
        if dataset is not None:
            for split in sorted(set(dataset.split.tolist())):
                self.split_combo.addItem(str(split), str(split))
        self.class_combo.addItem("All classes", None)
        if dataset is not None:
            for label, name in enumerate(dataset.class_names):
                self.class_combo.addItem(f"{label}: {name}", label)
        for combo in (self.split_combo, self.class_combo):
            combo.blockSignals(False)
        self.search.blockSignals(True)
        self.search.clear()
        self.search.blockSignals(False)
        self.model.set_dataset(dataset)
        self._update_count()

    def set_marks(self, query: int | None, reference: int | None) -> None:
        self.model.set_marks(query, reference)

    def select_index(self, index: int) -> None:
        """Scroll to and select dataset index ``index`` if the filter shows it."""
        row = self.model.row_of(index)
        if row is not None:
            qi = self.model.index(row)
            self.view.setCurrentIndex(qi)
            self.view.scrollTo(qi)

    def visible_rows(self) -> range:
        """Rows whose cells intersect the viewport (from the fixed grid geometry)."""
        n = self.model.rowCount()
        grid = self.view.gridSize()
        vp = self.view.viewport()
        if n == 0 or grid.width() <= 0 or vp.width() <= 0 or vp.height() <= 0:
            return range(0)
        cols = max(1, vp.width() // grid.width())
        top = self.view.verticalScrollBar().value()
        first_line = top // grid.height()
        last_line = (top + vp.height() - 1) // grid.height()
        return range(min(n, first_line * cols), min(n, (last_line + 1) * cols))

    def update_visible(self) -> None:
        rows = self.visible_rows()
        self.loader.set_visible("browser", self.model.rows[rows.start:rows.stop].tolist())

    # -- internals
    def _schedule_visible(self, *_args) -> None:
        self._visible_timer.start()

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt API
        super().resizeEvent(event)
        self._schedule_visible()

    def _apply_filter(self) -> None:
        self.model.set_filter(self.split_combo.currentData(), self.class_combo.currentData(),
                              self.search.text())
        self._update_count()

    def _update_count(self) -> None:
        ds = self.model.dataset
        if ds is None:
            self.count.setText("No dataset")
        else:
            self.count.setText(f"{self.model.rowCount():,} of {len(ds):,} images")

    def _index_at(self, qi: QModelIndex) -> int | None:
        return None if not qi.isValid() else int(qi.data(INDEX_ROLE))

    def _on_clicked(self, qi: QModelIndex) -> None:
        index = self._index_at(qi)
        if index is None:
            return
        if self.view.press_modifiers & Qt.ControlModifier:
            self.reference_chosen.emit(index)
        else:
            self.query_chosen.emit(index)

    def _on_activated(self, qi: QModelIndex) -> None:
        # Enter on the keyboard (a click also activates on some styles: only handle keys).
        if QGuiApplication.mouseButtons() == Qt.NoButton and not self.view.underMouse():
            index = self._index_at(qi)
            if index is not None:
                self.query_chosen.emit(index)

    def _context_menu(self, pos: QPoint) -> None:
        index = self._index_at(self.view.indexAt(pos))
        if index is None:
            return
        menu = QMenu(self)
        as_query = QAction("Set as query", menu)
        as_query.triggered.connect(lambda: self.query_chosen.emit(index))
        as_ref = QAction("Set as reference", menu)
        as_ref.triggered.connect(lambda: self.reference_chosen.emit(index))
        copy = QAction("Copy path", menu)
        copy.triggered.connect(lambda: QGuiApplication.clipboard().setText(
            str(self.model.dataset.abspath(index))))
        menu.addActions([as_query, as_ref])
        menu.addSeparator()
        menu.addAction(copy)
        menu.popup(self.view.viewport().mapToGlobal(pos))
