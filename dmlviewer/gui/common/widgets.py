"""Small helpers shared by the windows: screen fitting, tool windows that stay in front,
scrolling forms, a wrapping row, spin boxes that leave the mouse wheel to the form unless they
have the focus, a path field with a browse button, and the one plot style of the tool windows
(:func:`style_plot`, :func:`series_pen`, :func:`add_legend`).

Screens: every top-level window and dialog is sized with :func:`fit_to_screen`, which never
makes it larger than the available area of its screen (1366 x 768 laptops included) and keeps
it on that screen; :func:`clamp_to_screen` does the same for a geometry restored from the
settings (a size saved on a larger monitor must not come back partly off-screen).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from PySide6.QtCore import QEvent, QObject, QPoint, QRect, QSize, Qt, Signal
from PySide6.QtGui import (QColor, QFontMetrics, QFontMetricsF, QGuiApplication, QPainter, QPen, QScreen, QTextCursor,
                           QTextDocument)
from PySide6.QtWidgets import (QAbstractScrollArea, QAbstractSpinBox, QApplication, QComboBox, QFileDialog, QFrame,
                               QHBoxLayout, QLabel, QLayout, QLineEdit, QScrollArea, QSizePolicy, QSlider, QStyle,
                               QStyledItemDelegate, QToolButton, QWidget, QWidgetItem)

#: Room left around a window for its frame and title bar (the geometry we set is the client area).
FRAME_MARGIN = QSize(16, 40)


def screen_of(widget: QWidget) -> QScreen | None:
    """The screen ``widget`` is on (its parent's for a window not shown yet), else the primary."""
    for w in (widget, widget.parentWidget()):
        if w is not None and w.screen() is not None:
            return w.screen()
    return QGuiApplication.primaryScreen()


def available_rect(widget: QWidget) -> QRect:
    """The available area (without panels and docks) of ``widget``'s screen."""
    screen = screen_of(widget)
    return screen.availableGeometry() if screen is not None else QRect(0, 0, 1366, 768)


def fitted_size(preferred: QSize, available: QRect, minimum: QSize | None = None) -> QSize:
    """``preferred`` shrunk to the ``available`` area less the window frame, but never below
    ``minimum`` where the screen allows it."""
    room = QSize(max(200, available.width() - FRAME_MARGIN.width()),
                 max(150, available.height() - FRAME_MARGIN.height()))
    size = preferred.boundedTo(room)
    if minimum is not None:
        size = size.expandedTo(minimum.boundedTo(room))
    return size


def fit_to_screen(widget: QWidget, width: int, height: int) -> QSize:
    """Resize ``widget`` to ``width x height`` or the available screen area, whichever is
    smaller, and keep it on its screen. Returns the size set."""
    available = available_rect(widget)
    size = fitted_size(QSize(width, height), available)
    widget.resize(size)
    clamp_to_screen(widget)
    return size


def clamp_to_screen(widget: QWidget) -> None:
    """Shrink ``widget`` to its screen's available area and move it fully onto it (after
    ``restoreGeometry`` of a size saved on another monitor)."""
    available = available_rect(widget)
    size = fitted_size(widget.size(), available)
    if size != widget.size():
        widget.resize(size)
    frame = widget.frameGeometry()
    fw = max(frame.width(), size.width())
    fh = max(frame.height(), size.height())
    x = min(max(frame.x(), available.x()), available.right() + 1 - fw)
    y = min(max(frame.y(), available.y()), available.bottom() + 1 - fh)
    x, y = max(x, available.x()), max(y, available.y())
    if (x, y) != (frame.x(), frame.y()):
        widget.move(QPoint(x, y))


def keep_in_front(window: QWidget) -> None:
    """Make ``window`` (a tool window whose parent is the main window) a dialog-type window with
    the usual title-bar buttons: window managers keep a dialog in front of its parent, where a
    plain window with a parent may drop behind the main window when that is clicked."""
    window.setWindowFlags(Qt.Dialog | Qt.WindowTitleHint | Qt.WindowSystemMenuHint
                          | Qt.WindowMinMaxButtonsHint | Qt.WindowCloseButtonHint)


def scrolling(widget: QWidget, horizontal: bool = False) -> QScrollArea:
    """``widget`` inside a frameless scroll area (vertical scrolling; horizontal on request),
    so a long form never forces its window taller than the screen."""
    area = QScrollArea()
    area.setWidgetResizable(True)
    area.setFrameShape(QFrame.NoFrame)
    area.setHorizontalScrollBarPolicy(Qt.ScrollBarAsNeeded if horizontal else Qt.ScrollBarAlwaysOff)
    area.setWidget(widget)
    guard_wheel(widget)
    return area


class _WheelGuard(QObject):
    """Event filter: a wheel event over an unfocused spin box, combo box or slider scrolls the
    surrounding form instead of changing the value."""

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt API
        if event.type() != QEvent.Wheel or not isinstance(obj, QWidget):
            return False
        parent = obj.parentWidget()
        owner = parent if isinstance(parent, QAbstractSpinBox) else obj  # a spin box's text field
        if owner.hasFocus():
            return False
        area = owner.parentWidget()
        while area is not None and not isinstance(area, QAbstractScrollArea):
            area = area.parentWidget()
        if area is not None:
            QGuiApplication.sendEvent(area.viewport(), event)
        return True


_GUARD: _WheelGuard | None = None


def guard_wheel(root: QWidget) -> None:
    """Spin boxes, combo boxes and sliders under ``root`` take the mouse wheel only when they
    have the keyboard focus (clicked or tabbed into); otherwise the wheel scrolls the form."""
    global _GUARD
    if _GUARD is None:
        _GUARD = _WheelGuard()
    for kind in (QAbstractSpinBox, QComboBox, QSlider):
        for widget in root.findChildren(kind):
            if widget.property("wheelGuarded"):
                continue
            widget.setProperty("wheelGuarded", True)
            widget.setFocusPolicy(Qt.StrongFocus)  # the wheel alone no longer focuses it
            widget.installEventFilter(_GUARD)
            if isinstance(widget, QAbstractSpinBox):  # the wheel over its text lands there first
                widget.lineEdit().installEventFilter(_GUARD)


class FlowLayout(QLayout):
    """Lays its items out left to right and wraps to a new row when the width runs out (the
    pair view's toolbar on a narrow window). Items keep their size hints; a stretch item
    (``addStretch``) is not supported: use :meth:`add_right` for items that should sit at the
    right end of the last row."""

    def __init__(self, parent: QWidget | None = None, spacing: int = 6, row_spacing: int = 4) -> None:
        super().__init__(parent)
        self._items: list = []
        self._right: set[int] = set()
        self._hspace = spacing
        self._vspace = row_spacing
        self.setContentsMargins(0, 0, 0, 0)

    # -- QLayout API
    def addItem(self, item) -> None:  # noqa: N802 - Qt API
        self._items.append(item)

    def add_right(self, widget: QWidget) -> None:
        """Add ``widget`` flushed to the right end of its row."""
        self.addWidget(widget)
        self._right.add(id(self._items[-1]))

    def count(self) -> int:
        return len(self._items)

    def itemAt(self, index: int):  # noqa: N802 - Qt API
        return self._items[index] if 0 <= index < len(self._items) else None

    def takeAt(self, index: int):  # noqa: N802 - Qt API
        if 0 <= index < len(self._items):
            item = self._items.pop(index)
            self._right.discard(id(item))
            return item
        return None

    def expandingDirections(self) -> Qt.Orientations:  # noqa: N802 - Qt API
        return Qt.Orientations(0)

    def hasHeightForWidth(self) -> bool:  # noqa: N802 - Qt API
        return True

    def heightForWidth(self, width: int) -> int:  # noqa: N802 - Qt API
        return self._arrange(QRect(0, 0, width, 0), apply=False)

    def setGeometry(self, rect: QRect) -> None:  # noqa: N802 - Qt API
        super().setGeometry(rect)
        self._arrange(rect, apply=True)

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt API
        width = sum(self._hint(i).width() for i in self._visible()) + self._hspace * max(0, len(self._visible()) - 1)
        height = max((self._hint(i).height() for i in self._visible()), default=0)
        m = self.contentsMargins()
        return QSize(width + m.left() + m.right(), height + m.top() + m.bottom())

    def minimumSize(self) -> QSize:  # noqa: N802 - Qt API
        size = QSize()
        for item in self._visible():
            size = size.expandedTo(item.minimumSize())
        m = self.contentsMargins()
        return size + QSize(m.left() + m.right(), m.top() + m.bottom())

    # -- layout
    def _visible(self) -> list:
        return [i for i in self._items if not (isinstance(i, QWidgetItem) and i.widget() is not None
                                                and i.widget().isHidden())]

    @staticmethod
    def _hint(item) -> QSize:
        return item.sizeHint().expandedTo(item.minimumSize())

    def _rows(self, width: int) -> list[list]:
        rows: list[list] = [[]]
        used = 0
        for item in self._visible():
            w = self._hint(item).width()
            if rows[-1] and used + self._hspace + w > width:
                rows.append([])
                used = 0
            used += (self._hspace if rows[-1] else 0) + w
            rows[-1].append(item)
        return rows

    def _arrange(self, rect: QRect, apply: bool) -> int:
        m = self.contentsMargins()
        inner = rect.adjusted(m.left(), m.top(), -m.right(), -m.bottom())
        y = inner.y()
        for row in self._rows(inner.width()):
            if not row:
                continue
            height = max(self._hint(i).height() for i in row)
            if apply:
                right = [i for i in row if id(i) in self._right]
                x = inner.x()
                for item in row:
                    if item in right:
                        continue
                    hint = self._hint(item)
                    item.setGeometry(QRect(QPoint(x, y + (height - hint.height()) // 2), hint))
                    x += hint.width() + self._hspace
                x = inner.right() + 1
                for item in reversed(right):
                    hint = self._hint(item)
                    x -= hint.width()
                    item.setGeometry(QRect(QPoint(x, y + (height - hint.height()) // 2), hint))
                    x -= self._hspace
            y += height + self._vspace
        return y - self._vspace - inner.y() + m.top() + m.bottom()


#: Where a text may be shortened: after a space or a path or name separator ("/", "_", "·"),
#: so that what is left of it are whole words ("computed from … the open one", never
#: "computed from a…n the open one"; issue 42 item 4).
_WORD_END = re.compile(r"(?<=[\s/\\_·])(?=\S)")


def words(text: str) -> list[str]:
    """``text`` cut at the places :func:`elide_words` may shorten it (the pieces join to it)."""
    cuts = [0] + [m.start() for m in _WORD_END.finditer(text)] + [len(text)]
    return [text[a:b] for a, b in zip(cuts, cuts[1:]) if b > a]


def elide_words(metrics: QFontMetrics | QFontMetricsF, text: str, width: float,
                mode: Qt.TextElideMode = Qt.ElideMiddle) -> str:
    """``text`` as it fits in ``width`` pixels of ``metrics``' font: whole, or shortened with
    "…" at word ends only (:func:`words`), keeping its start (``ElideRight``), its end
    (``ElideLeft``) or both (``ElideMiddle``: words taken from each end in turn, the end's first). Where not
    even one word fits, "…" alone (the caller's tooltip says the whole text); "" where that
    does not fit either."""
    if metrics.horizontalAdvance(text) <= width or mode == Qt.ElideNone:
        return text
    pieces = words(text)
    head: list[str] = []
    tail: list[str] = []

    def joined(h: list[str], t: list[str]) -> str:
        front, back = "".join(h).rstrip().rstrip("_·"), "".join(t).lstrip()  # "triangle…0003.jpg"
        if front and back:
            return f"{front} … {back}" if "".join(h)[-1:].isspace() else f"{front}…{back}"
        return f"{front}…" if front else f"…{back}" if back else "…"

    # in the middle: the end first (a file name's number, a message's "[pinned, Esc to release]")
    sides = {Qt.ElideRight: ("head",), Qt.ElideLeft: ("tail",)}.get(mode, ("tail", "head"))
    open_sides = list(sides)
    while open_sides and len(head) + len(tail) < len(pieces):
        for side in list(open_sides):
            if len(head) + len(tail) >= len(pieces):
                break
            h, t = (head + [pieces[len(head)]], tail) if side == "head" else \
                (head, [pieces[len(pieces) - 1 - len(tail)]] + tail)
            if metrics.horizontalAdvance(joined(h, t)) <= width:
                head, tail = h, t
            else:
                open_sides.remove(side)
    shown = joined(head, tail)
    return shown if metrics.horizontalAdvance(shown) <= width else ""


#: Places inside a long name (a file name, a path) after which a wrapped label may break it:
#: after "-", "_", "/" or "." followed by more of the name.
_NAME_BREAK = re.compile(r"(?<=[-_/.])(?=[^\s<>&])")
#: Rich text cut into tags and text (only the text gets break opportunities).
_TAGS = re.compile(r"(<[^>]*>)")


def breakable(text: str) -> str:
    """``text`` (plain or rich) with a zero-width space after the separators inside names, so
    that a word-wrapped label breaks a long file name there instead of widening its dock
    (Qt breaks only at spaces and some hyphens: "checkpoint-6a5eee6f2e2c-07a19c94.h5" was one
    word of 280 px, issue 42 item 4)."""
    parts = _TAGS.split(text)
    return "".join(part if part.startswith("<") else _NAME_BREAK.sub("\u200b", part) for part in parts)


class WrappedLabel(QLabel):
    """A word-wrapped label whose long names break at their separators (:func:`breakable`)
    rather than setting the width of the dock it is in; ``text()`` is the text as set."""

    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWordWrap(True)
        self._text = ""
        self.setText(text)

    def text(self) -> str:
        return self._text

    def setText(self, text: str) -> None:  # noqa: N802 - Qt API
        self._text = text
        super().setText(breakable(text))


class WordElideDelegate(QStyledItemDelegate):
    """An item delegate that shortens an item's text at word ends (:func:`elide_words`, in the
    view's elide mode) to its cell, instead of the view's eliding mid-word ("…/demo_c…");
    the whole text stays the item's (and its tooltip, where the view sets one)."""

    def initStyleOption(self, option, index) -> None:  # noqa: N802 - Qt API
        super().initStyleOption(option, index)
        if option.text:
            widget = option.widget
            style = widget.style() if widget is not None else QApplication.style()
            margin = style.pixelMetric(QStyle.PM_FocusFrameHMargin, None, widget) + 1  # QCommonStyle's, each side
            room = style.subElementRect(QStyle.SE_ItemViewItemText, option, widget).width() - 2 * margin
            option.text = elide_words(option.fontMetrics, option.text, room, option.textElideMode)


class ElidedLabel(QLabel):
    """A one-line label that shortens its text at word ends (in the middle by default,
    :func:`elide_words`) to the width it gets, instead of wrapping mid-word, cutting a word or
    widening its dock; the whole text is its tooltip."""

    def __init__(self, text: str = "", mode: Qt.TextElideMode = Qt.ElideMiddle, parent: QWidget | None = None) -> None:
        super().__init__(text, parent)
        self.mode = mode
        self.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Preferred)
        self.setToolTip(text)

    def setText(self, text: str) -> None:  # noqa: N802 - Qt API
        super().setText(text)
        self.setToolTip(text)

    def elided(self, width: int) -> str:
        """The text as drawn in ``width`` pixels (the whole text when it fits)."""
        return elide_words(self.fontMetrics(), self.text(), width, self.mode)

    def paintEvent(self, event) -> None:  # noqa: N802 - Qt API
        painter = QPainter(self)
        rect = self.contentsRect()
        painter.drawText(rect, int(self.alignment()) | Qt.TextSingleLine, self.elided(rect.width()))
        painter.end()


class ElidedRichLabel(QLabel):
    """A one-line rich-text label (a pane's caption) that ends in "…" after the last whole word
    its width holds, formatting kept, instead of being cut mid-letter or mid-word; ``text()``
    and the tooltip are the whole caption."""

    #: room kept beside the text (QLabel's own rendering is a pixel or two wider than the layout)
    SLACK = 4

    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setTextFormat(Qt.RichText)
        self._full = ""
        self._fitted_width = -1
        self.setText(text)

    def text(self) -> str:
        return self._full

    def setText(self, text: str) -> None:  # noqa: N802 - Qt API
        self._full = text
        self.setToolTip(text)
        self._fitted_width = -1
        self._fit()

    def elided(self) -> bool:
        """Whether the caption shown is shorter than the whole one."""
        return super().text() != self._full

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt API
        super().resizeEvent(event)
        self._fit()

    def _fit(self) -> None:
        width = self.contentsRect().width() - self.SLACK
        if width == self._fitted_width:
            return
        self._fitted_width = width
        doc = QTextDocument()
        doc.setDefaultFont(self.font())
        doc.setDocumentMargin(0)
        doc.setHtml(self._full)
        if width <= 0 or doc.idealWidth() <= width:
            QLabel.setText(self, self._full)
            return
        end = doc.characterCount() - 1
        # the longest prefix of whole words (issue 42 item 4) that fits with the ellipsis
        ends = [0] + [m.start() for m in _WORD_END.finditer(doc.toPlainText())]
        low, high = 0, len(ends) - 1
        while low < high:
            mid = (low + high + 1) // 2
            if self._prefix(ends[mid], end).idealWidth() <= width:
                low = mid
            else:
                high = mid - 1
        QLabel.setText(self, self._prefix(ends[low], end).toHtml())

    def _prefix(self, count: int, end: int) -> QTextDocument:
        """The caption's first ``count`` characters and "…", formatting kept."""
        doc = QTextDocument()
        doc.setDefaultFont(self.font())
        doc.setDocumentMargin(0)
        doc.setHtml(self._full)
        cursor = QTextCursor(doc)
        cursor.setPosition(count)
        cursor.setPosition(end, QTextCursor.KeepAnchor)
        cursor.removeSelectedText()
        cursor.insertText("…")
        return doc


def format_eta(seconds: float | None) -> str:
    """``mm:ss`` or ``h:mm:ss`` of a time left; ``--:--`` when unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "--:--"
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


class PathEdit(QWidget):
    """A line edit with a browse button (file or folder). Typing only edits the text: whether
    the path exists is for the form to check when it is used."""

    changed = Signal()

    def __init__(self, mode: str = "dir", caption: str = "Choose", filter: str = "",
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.mode, self.caption, self.filter = mode, caption, filter
        self.edit = QLineEdit()
        self.button = QToolButton()
        self.button.setText("...")
        self.button.setToolTip(caption)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.edit, 1)
        layout.addWidget(self.button)
        self.edit.textChanged.connect(self._on_text)
        self.button.clicked.connect(self.browse)

    def _on_text(self, _text: str) -> None:
        self.changed.emit()

    def text(self) -> str:
        return self.edit.text().strip()

    def setText(self, text: str) -> None:  # noqa: N802 - mirrors QLineEdit
        self.edit.setText(text)

    def browse(self) -> None:
        from dmlviewer.gui.window import settings

        # Start at the current file's folder unless it is the package's or the cache's.
        start = settings.start_dir(self.text())
        if self.mode == "save" and self.text():
            start = str(Path(start) / Path(self.text()).name)
        if self.mode == "dir":
            path = QFileDialog.getExistingDirectory(self, self.caption, start)
        elif self.mode == "save":
            path, _ = QFileDialog.getSaveFileName(self, self.caption, start, self.filter)
        else:
            path, _ = QFileDialog.getOpenFileName(self, self.caption, start, self.filter)
        if path:
            self.setText(path)


# -- plots: one style for every pyqtgraph plot of the tool windows

#: Curve colours (colour-blind friendly, Okabe-Ito, with white instead of black on the dark
#: plot background).
PALETTE = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#FFFFFF"]
#: Line styles cycled with the colours (8 colours x 5 styles: no two of 40 curves alike, and
#: neighbours differ in both, so the curves stay apart in grey print too).
DASHES = [Qt.SolidLine, Qt.DashLine, Qt.DotLine, Qt.DashDotLine, Qt.DashDotDotLine]
#: Background of the plots: the dark theme's (gui/window/app.py), as behind the image panes.
PLOT_BACKGROUND = "#1e1e1e"
#: Text colour of legends on that background.
LEGEND_TEXT = "#e0e0e0"


def no_si_prefix(plot) -> None:
    """Plain numbers on the axes (no "(x0.001)" scaling of fractions)."""
    for name in ("left", "bottom"):
        plot.getAxis(name).enableAutoSIPrefix(False)


def style_plot(plot, grid: bool = True) -> None:
    """The tool windows' plot style on a ``pg.PlotWidget``: dark background, light grid, plain
    axis numbers, and Export View in its right-click menu."""
    from dmlviewer.gui.window.export import add_plot_entry

    plot.setBackground(PLOT_BACKGROUND)
    add_plot_entry(plot)
    if grid:
        plot.showGrid(x=True, y=True, alpha=0.2)
    no_si_prefix(plot)


#: One colour per explanation method (issue 31 item 8), the same in every plot that draws a
#: curve per method: far apart on the dark background and in print (Okabe-Ito, and lavender).
METHOD_COLORS = {
    "decomposition": "#0072B2",       # blue
    "decomposition_bias": "#E69F00",  # orange
    "gradcam": "#009E73",             # green
    "gradcam_nonorm": "#CC79A7",      # pink
    "rgradcam": "#F0E442",            # yellow
    "grad_transfer": "#D55E00",       # vermillion (never beside the sanity check's orange)
    "occlusion": "#B39DDB",           # lavender (white is the oracle's line; not a palette colour,
                                      # which stay spare for the groups)
    "point_to_point": "#56B4E9",      # sky blue (the one palette colour no other method has)
}


def method_color(method: str, index: int = 0) -> str:
    """The colour of ``method``'s curves (:data:`METHOD_COLORS`; another method: the
    ``index``-th series colour)."""
    return METHOD_COLORS.get(method) or series_color(index)


def series_color(index: int) -> str:
    """Colour of the ``index``-th curve of a plot."""
    return PALETTE[index % len(PALETTE)]


def series_pen(index: int, width: float = 2.0, color: str | None = None,
               style: Qt.PenStyle | None = None) -> QPen:
    """Pen of the ``index``-th curve of a plot: its own colour and its own line style
    (:data:`PALETTE` and :data:`DASHES` cycled together); ``color``/``style`` override."""
    pen = QPen(QColor(color or series_color(index)))
    pen.setWidthF(width)
    pen.setCosmetic(True)  # the width is in pixels whatever the axes' scale
    pen.setStyle(DASHES[index % len(DASHES)] if style is None else style)
    return pen


class LegendStrip(QWidget):
    """A legend outside the plots, for plots that share their curves' names (deletion and
    insertion, one curve per method each): it never hides a curve, and its rows wrap into
    ``columns`` columns. ``set_items([(curve, name), ...])`` fills it."""

    def __init__(self, columns: int = 4, parent: QWidget | None = None) -> None:
        import pyqtgraph as pg

        super().__init__(parent)
        self.view = pg.GraphicsLayoutWidget()
        self.view.setBackground(PLOT_BACKGROUND)
        self.view.setVerticalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        self.view.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        self.legend = pg.LegendItem(colCount=columns, labelTextColor=LEGEND_TEXT, frame=False)
        self.view.addItem(self.legend)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.view)
        self.setSizePolicy(QSizePolicy.Expanding, QSizePolicy.Fixed)
        self.set_items([])

    def set_items(self, items) -> None:
        """The legend's entries: ``(curve, name)`` pairs (the curve's pen is drawn)."""
        self.legend.clear()
        for curve, name in items:
            self.legend.addItem(curve, name)
        self.legend.updateSize()
        height = int(self.legend.layout.preferredHeight()) + 6 if items else 0
        self.setFixedHeight(height)
        self.setVisible(bool(items))

    def names(self) -> list[str]:
        return [label.text for _, label in self.legend.items]


def add_legend(plot, corner: str = "top-right"):
    """A legend in ``corner`` of ``plot`` (``top-right``, ``bottom-right``, ``top-left``,
    ``bottom-left``) on a translucent dark box, its labels never elided; returns it."""
    vertical, horizontal = corner.split("-")
    offset = (-10 if horizontal == "right" else 10, -10 if vertical == "bottom" else 10)
    legend = plot.addLegend(offset=offset, labelTextColor=LEGEND_TEXT, brush=QColor(30, 30, 30, 200),
                            pen=QColor("#555555"))
    return legend
