"""The dataset browser: a virtualized thumbnail grid with split/class filters and name search.

The grid is a ``QTableView`` with fixed-size, header-less cells over a table model whose
cells, read row by row, are an index array into the :class:`Dataset` (``model.rows``; the
number of columns follows the view's width). A ``QListView`` would be the obvious choice, but
its layout asks the model for every row (three Python calls per image on every reset, 6 s for
a million images); the table view only asks for the cells on screen, and its fixed sections
cost nothing per row. No widget per image; filtering is numpy on the whole listing and name
search one substring scan over all file names joined into one string (both well under
200 ms on a million images); thumbnails come from the shared
:class:`~dmlviewer.gui.retrieval.thumbnails.ThumbnailLoader` only for the cells on screen.

Choosing images: a click makes the image the query, Ctrl+click (or "Set as reference" in the
context menu) makes it the reference. The query is framed blue with a "Q" badge, the
reference orange with an "R" badge; the hint line above the grid says so. Model B's own
reference, when its row shows one (issue 41), is framed orange with an "RB" badge.

Given a :class:`~dmlviewer.core.session.Session` (``session=``), the browser follows it: it
lists the session's dataset and marks the session's pair, whoever changed them (the window, a
notebook's ``session.set_pair``); without one, ``set_dataset`` and ``set_marks`` drive it.
"""

from __future__ import annotations

import logging

import numpy as np
from PySide6.QtCore import (QAbstractTableModel, QEvent, QModelIndex, QPoint, QRect, QSize, QStringListModel, Qt,
                            QTimer, Signal)
from PySide6.QtGui import QAction, QColor, QFont, QGuiApplication, QPainter, QPen
from PySide6.QtWidgets import (QAbstractItemView, QComboBox, QHBoxLayout, QHeaderView, QLabel,
                               QLineEdit, QMenu, QStyle, QStyledItemDelegate, QStyleOptionViewItem,
                               QTableView, QVBoxLayout, QWidget)

from dmlviewer.core.session import Session
from dmlviewer.gui.common.widgets import elide_words
from dmlviewer.gui.window.session_links import SessionLinks
from dmlviewer.gui.retrieval.thumbnails import ThumbnailLoader

log = logging.getLogger(__name__)

QUERY_COLOR = QColor("#2f80ed")
REFERENCE_COLOR = QColor("#f2994a")

#: Model roles beyond Qt's.
INDEX_ROLE = Qt.UserRole + 1  # dataset index of the row
MARK_ROLE = Qt.UserRole + 2  # "query", "reference", "reference_b" or None
#: The badge of each mark.
MARK_BADGES = {"query": "Q", "reference": "R", "reference_b": "RB"}
BROKEN_ROLE = Qt.UserRole + 3  # reason the image cannot be read, or None


class ThumbnailModel(QAbstractTableModel):
    """Cells = filtered dataset indices laid out row by row in ``columns`` columns (a
    position ``p`` of the listing is cell ``(p // columns, p % columns)``); decoration = the
    loader's thumbnail or None. Cells past the end of the listing are empty."""

    def __init__(self, loader: ThumbnailLoader, parent=None) -> None:
        super().__init__(parent)
        self.loader = loader
        self.dataset = None
        self.rows = np.zeros(0, dtype=np.int64)
        self.columns = 1
        self._names = np.zeros(0, dtype=np.uint8)  # every file name, UTF-8, lower case, each after a newline
        self._name_starts = np.zeros(0, dtype=np.int64)
        self._marks: dict[int, str] = {}
        loader.ready.connect(self._on_ready)

    # -- content
    def set_dataset(self, dataset) -> None:
        self.beginResetModel()
        self.dataset = dataset
        self._marks = {}
        if dataset is None:
            self.rows = np.zeros(0, dtype=np.int64)
            self._names, self._name_starts = np.zeros(0, dtype=np.uint8), np.zeros(0, dtype=np.int64)
        else:
            self.rows = np.arange(len(dataset), dtype=np.int64)
            joined = ("\n" + "\n".join(p.rsplit("/", 1)[-1] for p in dataset.paths)).lower().encode("utf-8")
            self._names = np.frombuffer(joined, dtype=np.uint8)
            self._name_starts = np.flatnonzero(self._names == ord("\n"))  # offset of each name's newline
            if len(self._name_starts) != len(dataset):  # a file name holding a newline
                joined = ("\n" + "\n".join(p.rsplit("/", 1)[-1].replace("\n", " ") for p in dataset.paths)).lower()
                self._names = np.frombuffer(joined.encode("utf-8"), dtype=np.uint8)
                self._name_starts = np.flatnonzero(self._names == ord("\n"))
        self.endResetModel()

    def count(self) -> int:
        """Images shown (after filtering)."""
        return len(self.rows)

    def set_columns(self, columns: int) -> None:
        columns = max(1, int(columns))
        if columns != self.columns:
            self.beginResetModel()
            self.columns = columns
            self.endResetModel()

    def name_matches(self, text: str) -> np.ndarray:
        """Sorted dataset indices whose file name contains ``text`` (lower case, no newline).

        The names are one byte array (UTF-8, lower case, each preceded by a newline): the
        positions of the first byte of ``text`` are found in one vectorized pass, then
        narrowed byte by byte, and mapped back to names by binary search over their offsets.
        A match cannot span two names since ``text`` holds no newline."""
        needle = np.frombuffer(text.lower().encode("utf-8"), dtype=np.uint8)
        data = self._names
        if len(needle) == 0 or len(needle) > len(data):
            return np.zeros(0, dtype=np.int64)
        cand = np.flatnonzero(data[: len(data) - len(needle) + 1] == needle[0])
        for j in range(1, len(needle)):
            cand = cand[data[cand + j] == needle[j]]
        names = np.searchsorted(self._name_starts, cand, side="right") - 1  # sorted, as cand is
        return names[np.concatenate(([True], names[1:] != names[:-1]))] if len(names) else names

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
        text = text.strip().lower().replace("\n", "")
        if text:
            hits = np.zeros(len(ds), dtype=bool)
            hits[self.name_matches(text)] = True
            mask &= hits
        self.beginResetModel()
        self.rows = np.flatnonzero(mask).astype(np.int64)
        self.endResetModel()

    def set_marks(self, query: int | None, reference: int | None, reference_b: int | None = None) -> None:
        old = set(self._marks)
        self._marks = {}
        if reference_b is not None:
            self._marks[reference_b] = "reference_b"
        if reference is not None:
            self._marks[reference] = "reference"
        if query is not None:
            self._marks[query] = "query"
        for index in old | set(self._marks):
            self._emit_changed(index)

    def row_of(self, index: int) -> int | None:
        """Position of dataset index ``index`` in the filtered listing (rows are sorted)."""
        pos = int(np.searchsorted(self.rows, index))
        return pos if pos < len(self.rows) and self.rows[pos] == index else None

    def cell(self, position: int) -> QModelIndex:
        """The model index of listing position ``position``."""
        return self.index(position // self.columns, position % self.columns)

    def position(self, index: QModelIndex) -> int | None:
        p = index.row() * self.columns + index.column()
        return p if index.isValid() and p < len(self.rows) else None

    # -- Qt model
    def rowCount(self, parent: QModelIndex = QModelIndex()) -> int:  # noqa: N802 - Qt API
        return 0 if parent.isValid() else -(-len(self.rows) // self.columns)

    def columnCount(self, parent: QModelIndex = QModelIndex()) -> int:  # noqa: N802 - Qt API
        return 0 if parent.isValid() else self.columns

    def flags(self, index: QModelIndex):
        return Qt.ItemIsEnabled | Qt.ItemIsSelectable if self.position(index) is not None else Qt.NoItemFlags

    def data(self, index: QModelIndex, role: int = Qt.DisplayRole):
        p = self.position(index)
        if p is None or self.dataset is None:
            return None
        i = int(self.rows[p])
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
            qi = self.cell(row)
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
        if index.data(INDEX_ROLE) is None:
            return  # a cell after the last image of the grid: no tile (it showed as an empty grey one)
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
            badge = QRect(img_rect.x() + 3, img_rect.y() + 3, 18 if len(MARK_BADGES[mark]) == 1 else 26, 18)
            painter.fillRect(badge, color)
            painter.setPen(Qt.white)
            font = QFont(option.font)
            font.setBold(True)
            painter.setFont(font)
            painter.drawText(badge, Qt.AlignCenter, MARK_BADGES[mark])
        text_rect = QRect(rect.x(), img_rect.bottom() + 2, rect.width(), self.TEXT_H)
        painter.setFont(option.font)
        painter.setPen(palette.text().color())
        text = elide_words(option.fontMetrics, str(index.data(Qt.DisplayRole) or ""), text_rect.width() - 4)
        painter.drawText(text_rect, Qt.AlignHCenter | Qt.AlignVCenter, text)
        painter.restore()


class _GridView(QTableView):
    """The grid: a header-less table of fixed cells; remembers the keyboard modifiers of the
    last mouse press (Ctrl = reference)."""

    def __init__(self, cell: QSize, parent=None) -> None:
        super().__init__(parent)
        self.press_modifiers = Qt.NoModifier
        self._cell = cell
        for header, size in ((self.horizontalHeader(), cell.width()), (self.verticalHeader(), cell.height())):
            header.hide()
            header.setSectionResizeMode(QHeaderView.Fixed)
            header.setMinimumSectionSize(1)
            header.setDefaultSectionSize(size)
        self.setShowGrid(False)
        self.setWordWrap(False)
        self.setCornerButtonEnabled(False)
        self.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.setSelectionMode(QAbstractItemView.SingleSelection)
        self.setSelectionBehavior(QAbstractItemView.SelectItems)
        self.setVerticalScrollMode(QAbstractItemView.ScrollPerPixel)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        self.setMouseTracking(True)

    viewport_resized = Signal()

    def gridSize(self) -> QSize:  # noqa: N802 - as QListView's
        return QSize(self._cell)

    def viewportEvent(self, event) -> bool:  # noqa: N802 - Qt API
        handled = super().viewportEvent(event)
        if event.type() == QEvent.Resize:
            self.viewport_resized.emit()
        return handled

    def mousePressEvent(self, event) -> None:  # noqa: N802 - Qt API
        self.press_modifiers = event.modifiers()
        super().mousePressEvent(event)


class DatasetBrowser(QWidget):
    """Filters, hint line, the thumbnail grid and a count; emits the chosen images. With a
    ``session``, shows its dataset and pair (see the module docstring)."""

    query_chosen = Signal(int)
    reference_chosen = Signal(int)

    def __init__(self, loader: ThumbnailLoader, parent=None, session: Session | None = None) -> None:
        super().__init__(parent)
        self.loader = loader
        self.session = session
        self._links = SessionLinks()
        self.model = ThumbnailModel(loader, self)
        thumb = loader.size

        self.split_combo = QComboBox()
        self.split_combo.setToolTip("Show only this split")
        self.class_combo = QComboBox()
        self.class_combo.setToolTip("Show only this class")
        self.class_combo.setMinimumContentsLength(10)
        self.class_combo.setSizeAdjustPolicy(QComboBox.AdjustToMinimumContentsLengthWithIcon)
        self._class_names = QStringListModel(self)
        self.class_combo.setModel(self._class_names)
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search file names…")
        self.search.setClearButtonEnabled(True)
        self.hint = QLabel("Click: <b style='color:#2f80ed'>query</b> · Ctrl+click: "
                           "<b style='color:#f2994a'>reference</b>")
        self.count = QLabel("No dataset")
        self.count.setObjectName("browserCount")

        self.view = _GridView(QSize(thumb + 8, thumb + ThumbnailDelegate.TEXT_H + 8))
        self.view.setModel(self.model)
        self.view.setItemDelegate(ThumbnailDelegate(thumb, self.view))
        self.view.verticalScrollBar().setSingleStep(thumb // 3)
        self.view.setContextMenuPolicy(Qt.CustomContextMenu)
        self.view.customContextMenuRequested.connect(self._context_menu)
        self.view.clicked.connect(self._on_clicked)
        self.view.activated.connect(self._on_activated)
        self.view.verticalScrollBar().valueChanged.connect(self._schedule_visible)
        self.view.viewport_resized.connect(self._fit_columns)
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
        if session is not None:
            self._links.connect(session.events.dataset, self._on_dataset)
            self._links.connect(session.events.pair, self._on_pair)
            if session.dataset is not None:
                self._on_dataset()
                self._on_pair()

    # -- session events
    def _on_dataset(self) -> None:
        """The session opened another dataset (its pair is cleared by a pair event after)."""
        self.set_dataset(self.session.dataset)

    def _on_pair(self) -> None:
        """The session's pair changed: mark it (only a whole pair is marked, as the pair view
        shows only a whole pair)."""
        query, reference = self.session.query_index, self.session.reference_index
        reference_b = self.session.reference_b
        if query is None or reference is None:
            query = reference = reference_b = None
        self.set_marks(query, reference, reference_b)

    def shutdown(self) -> None:
        """Stop following the session (it may outlive the browser)."""
        self._links.close()

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
        # One string list model (a C++ list, 0.07 s for 190,000 classes; addItem per class
        # takes seconds): entry 0 is "All classes", entry label + 1 the class ``label``.
        names = [] if dataset is None else [f"{label}: {name}" for label, name in enumerate(dataset.class_names)]
        self._class_names.setStringList(["All classes", *names])
        self.class_combo.setCurrentIndex(0)
        for combo in (self.split_combo, self.class_combo):
            combo.blockSignals(False)
        self.search.blockSignals(True)
        self.search.clear()
        self.search.blockSignals(False)
        self.model.set_dataset(dataset)
        self._update_count()

    def set_marks(self, query: int | None, reference: int | None, reference_b: int | None = None) -> None:
        """Mark the pair's images (and model B's own reference); the selection follows the query
        wherever it was picked (the retrieval panel, the embedding view, a restored session), so
        the highlight is never left on an image that is no longer the query."""
        self.model.set_marks(query, reference, reference_b)
        if query is None:
            self.view.clearSelection()
            self.view.setCurrentIndex(QModelIndex())
        elif self._index_at(self.view.currentIndex()) != query:
            self.select_index(query)

    def class_filter(self) -> int | None:
        """The class chosen in the class filter (None: all)."""
        entry = self.class_combo.currentIndex()
        return entry - 1 if entry > 0 else None

    def set_class_filter(self, label: int | None) -> None:
        self.class_combo.setCurrentIndex(0 if label is None else int(label) + 1)

    def select_index(self, index: int) -> None:
        """Scroll to and select dataset index ``index`` if the filter shows it."""
        row = self.model.row_of(index)
        if row is not None:
            qi = self.model.cell(row)
            self.view.setCurrentIndex(qi)
            self.view.scrollTo(qi)

    def position_rect(self, position: int) -> QRect:
        """The viewport rectangle of listing position ``position``."""
        return self.view.visualRect(self.model.cell(position))

    def visible_rows(self) -> range:
        """Listing positions whose cells intersect the viewport (from the fixed grid geometry)."""
        n = self.model.count()
        grid = self.view.gridSize()
        vp = self.view.viewport()
        if n == 0 or vp.width() <= 0 or vp.height() <= 0:
            return range(0)
        cols = self.model.columns
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

    def _fit_columns(self) -> None:
        """As many columns as whole cells fit the viewport (keeping the current image in view)."""
        width = self.view.viewport().width()
        if width <= 0:
            return
        columns = max(1, width // self.view.gridSize().width())
        if columns != self.model.columns:
            current = self.model.position(self.view.currentIndex())
            self.model.set_columns(columns)
            if current is not None:
                self.view.setCurrentIndex(self.model.cell(current))
                self.view.scrollTo(self.model.cell(current))

    def _apply_filter(self) -> None:
        self.model.set_filter(self.split_combo.currentData(), self.class_filter(), self.search.text())
        self._update_count()

    def _update_count(self) -> None:
        ds = self.model.dataset
        if ds is None:
            self.count.setText("No dataset")
        else:
            self.count.setText(f"{self.model.count():,} of {len(ds):,} images")

    def _index_at(self, qi: QModelIndex) -> int | None:
        return None if self.model.position(qi) is None else int(qi.data(INDEX_ROLE))

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
