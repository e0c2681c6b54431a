"""The pair view: query and reference side by side with overall maps and live point-to-point maps.

A pair is prepared once in the background (``core.explain.explain_pair`` in a
:class:`~dmlviewer.gui.jobs.worker.LatestRunner`: forward passes, contributions, the point-to-point
tensor). Until it is ready the panes show the photographs, no overlay and "preparing…", so
nothing stale is ever drawn. Then each pane shows the overall map of the chosen method
(Decomposition and Decomposition+Bias come with the pair; the Grad-CAM family and grad-weight
transfer are computed on request, again in the background), and hovering one pane shows the
partial map of the hovered point on the other (seed 000 Sec. 3, Eq. 2-3): one call of the
core's precomputed :class:`~dmlviewer.core.explain.hover.HoverRenderer` per row and drawn event.
The toolbar is bound to :class:`~dmlviewer.core.display.DisplayOptions` (``PairView.display``)
both ways: a control sets its option, an option set elsewhere moves its control and redraws.

Display choices: *sign* ("positive" shows where the similarity is supported, "negative"
where it is opposed, "signed" both on a diverging map), *scale* ("each map", the default,
normalizes every partial map to its own maximum, so the hovered point's map shows on every
model and the colour bar reads 0..1 of it; "whole pair" uses one fixed scale for all partial
maps of the pair, ``core.explain.hover.pair_scale``: the strongest 2 % of the points saturate,
so maps of different points compare and a weak point looks weak), colour map and opacity.
The hovered point's share of the similarity (and, on "each map", its map's peak cell pair)
is printed on the other pane, next to its colour bar, whatever the scale. "Matches" draws the
top-N point-to-point correspondences (``PairExplanation.correspondences``) as numbered markers joined by lines.

*Resolution* (issue 11) is the network's input size for the pair: the model's own, 1.5x, 2x or
the images' own size (``core.models.resolution.input_sizes``); a larger input gives a finer
feature grid (224 px: 7 x 7 cells on a stride-32 backbone, 448 px: 14 x 14), so hover picks
smaller places. A change re-prepares the pair in the background like a new pair. The line
under the panes says which decomposition rule the pair was explained with (exact, or first
order where the head is not piecewise linear at the input).

*Rows* (issue 24, issue 30): each model is one :class:`~dmlviewer.gui.pair.pair_row.PairRow` of
:attr:`PairView.rows` (its model, runners, explanation, overall maps, renderers and panes, one
freshness stamp); model A is row 0 and :meth:`PairView.set_compare_model` adds model B as row 1
under it. The pair is prepared by every row's model (each in its own background runner); each
row has its own colour scale, or one scale for all with "Shared scale". Hovering any row's query
(or reference) draws every row's partial map of that point
(:class:`~dmlviewer.gui.pair.hover_link.HoverLink`: one core call, ``hover_points``, gives each row's
overlay, share and peak, and the link writes every pane). "Difference" shows A minus B
in the second row instead: the overall maps subtracted at image size, the partial maps by
:class:`~dmlviewer.core.explain.hover.DifferenceRenderer`, both on one symmetric scale with the
diverging colour map. B's overall maps are those that come with its pair and the Grad-CAM
family; grad-weight transfer and occlusion are shown for A only. The read-out gives both
similarities.
"""

from __future__ import annotations

import html
import logging
import math
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import shiboken6
from PySide6.QtCore import QPointF, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QKeySequence, QPainter, QPen, QShortcut, QTextLayout
from PySide6.QtWidgets import (QCheckBox, QComboBox, QHBoxLayout, QLabel, QSlider, QSpinBox,
                               QSplitter, QToolButton, QVBoxLayout, QWidget)

from dmlviewer.core.display import DisplayOptions, check
from dmlviewer.core.explain.methods import label as method_label, methods
from dmlviewer.core.scene.scene import overall_levels
from dmlviewer.gui.common import errors
from dmlviewer.gui.pair.colormaps import SEQUENTIAL, overlay_lut
from dmlviewer.gui.pair.hover_link import QUERY, REFERENCE, SIDE_NAMES, HoverLink
from dmlviewer.gui.pair.image_pane import MARKER_COLORS, ImagePane
from dmlviewer.gui.pair.pair_row import PairRow
from dmlviewer.gui.common.widgets import FlowLayout

log = logging.getLogger(__name__)

#: Map choice computed by occlusion (model-agnostic; its hover shows the occlusion interaction)
OCCLUSION = "occlusion"
SIGNS = [("positive", "Positive"), ("negative", "Negative"), ("signed", "Signed")]
#: "Each map" first, the default (issue 23 item 5): every hovered point's partial map is stretched
#: to its own maximum, so it shows on every model, and the point's share of the similarity is
#: printed beside the colour bar for the magnitude. On real photographs (a pretrained backbone,
#: diffuse maps over a 15 x 15 grid) "Whole pair" left the map of 38 % of the points that hold
#: at least an average share below half the colour range, i.e. nearly invisible (README "Pair view").
SCALES = [("map", "Each map"), ("pair", "Whole pair")]
#: What the second row shows when a compare model is open: its own maps, or A minus B.
COMPARE_VIEWS = [("model", "Model B"), ("difference", "Difference A − B")]
#: Overall maps the compare row (model B) shows (the registry's ``compare_row`` use: those that
#: come with the pair and the Grad-CAM family).
COMPARE_METHODS = methods("compare_row")

#: The Region button while armed (checked): the region rectangle's cyan, so it reads at a glance.
REGION_ARMED_STYLE = ("QToolButton#regionButton { padding: 1px 6px; }"
                      "QToolButton#regionButton:checked { background: #00b8cc; color: black; "
                      "border: 1px solid #007c8a; border-radius: 3px; padding: 1px 6px; }")

#: Lines of text the read-out under the panes has room for (its height never changes).
INFO_LINES = 3



def _role(title: str) -> str:
    """The first bold part of a pane caption ("<b ...>Query</b>"), or its first word."""
    head, sep, _ = title.partition("</b>")
    return head + sep if title.startswith("<b") and sep else title.split(" ", 1)[0]


@dataclass
class PairImages:
    """What the pair view shows: two photographs and their captions."""

    query: np.ndarray
    reference: np.ndarray
    query_title: str = "Query"
    reference_title: str = "Reference"
    #: a street panorama (query) against an aerial image (reference) of a cross-view dataset:
    #: with a two-branch model the pair view draws the orientation lines (issue 25)
    cross_view: bool = False
    #: the panorama's true heading in degrees (``headings.csv``), None when unknown
    true_heading: float | None = None


#: the street panorama's share of the pane row for a cross-view pair
PANORAMA_SHARE = 0.55
#: the two orientation estimates the pair view draws, with their legend names (issue 25)
ORIENTATION_MAPS = {"partial_map": "partial map", "overall_map": "overall map"}
ORIENTATION_COLORS = {"north": "#e0e0e0", "partial_map": "#00e676", "overall_map": "#ff4081", "truth": "#ffffff"}


def _ray(shape: tuple[int, int], azimuth: float) -> tuple[list[float], list[float]]:
    """The segment from the centre of an aerial image of ``shape`` (where the camera stands)
    to its inscribed circle along ``azimuth`` (degrees clockwise from north, image up; the
    convention of ``core.data.cross_view.pixel_azimuth``), in image coordinates."""
    h, w = shape
    radius, a = min(h, w) / 2.0, math.radians(azimuth)
    return [w / 2.0, w / 2.0 + radius * math.sin(a)], [h / 2.0, h / 2.0 - radius * math.cos(a)]


def rule_text(rule: str, detail: str = "") -> tuple[str, str]:
    """The rule read-out: a short label for ``PairExplanation.rule`` and its tooltip."""
    from dmlviewer.core.models import FIRST_ORDER

    if rule == FIRST_ORDER:
        return ("first-order (Jacobian) decomposition: cell shares approximate",
                (f"{detail}\nThe head is not piecewise linear at this input: each cell's share is gradient x "
                 "activation (first order); the Taylor remainder is counted in the bias terms, so the terms "
                 "still add up to the similarity."))
    return ("exact decomposition",
            (f"{detail}\nThe head is affine at this input (seed 000 Sec. 4): the cells' shares and the bias "
             "add up to the embedding exactly."))


def _labelled(label: str | None, *widgets: QWidget) -> QWidget:
    """A label and its control(s) as one toolbar item (they wrap together)."""
    box = QWidget()
    row = QHBoxLayout(box)
    row.setContentsMargins(0, 0, 0, 0)
    row.setSpacing(4)
    if label:
        row.addWidget(QLabel(label))
    for widget in widgets:
        row.addWidget(widget)
    return box


class ClampedLabel(QLabel):
    """A word-wrapped plain-text label of fixed height that shows the lines that fit and ends the
    last one with "…" (never half a line); ``text()`` is the whole text."""

    def visible_text(self) -> str:
        """The text as drawn: whole lines that fit, the last one elided if text is left over."""
        rect = self.contentsRect()
        fm = self.fontMetrics()
        text = self.text()
        layout = QTextLayout(text, self.font())
        layout.beginLayout()
        lines: list[str] = []
        y = 0.0
        while True:
            line = layout.createLine()
            if not line.isValid():
                break
            line.setLineWidth(rect.width())
            if y + 2 * fm.lineSpacing() > rect.height() and line.textStart() + line.textLength() < len(text):
                rest = text[line.textStart():]  # the last line that fits: the rest, elided
                lines.append(fm.elidedText(rest, Qt.ElideRight, rect.width()))
                break
            lines.append(text[line.textStart():line.textStart() + line.textLength()].rstrip())
            y += fm.lineSpacing()
        layout.endLayout()
        return "\n".join(lines)

    def paintEvent(self, event) -> None:  # noqa: N802 - Qt API
        painter = QPainter(self)
        painter.drawText(self.contentsRect(), int(self.alignment()), self.visible_text())
        painter.end()


class _MatchLines(QWidget):
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
            a = q.mapTo(self.parentWidget(), q.map_to_widget(*m["query_xy"]).toPoint())
            b = r.mapTo(self.parentWidget(), r.map_to_widget(*m["reference_xy"]).toPoint())
            # A line is as strong as its match: weak matches (picked once the strong cells are
            # used up) are drawn thin and faint, not like the best one.
            strength = float(m["score"]) / top if top > 0 else 1.0
            color = QColor(MARKER_COLORS[k % len(MARKER_COLORS)])
            color.setAlphaF(0.25 + 0.75 * strength)
            painter.setPen(QPen(color, 1.0 + 2.0 * strength))
            painter.drawLine(QPointF(a), QPointF(b))
        painter.end()


class PairView(QWidget):
    """The toolbar, one :class:`~dmlviewer.gui.pair.pair_row.PairRow` per model (A, then B) and the
    background preparation of the pair by each row's model."""

    pair_ready = Signal(object)  # model A's PairExplanation
    images_changed = Signal(object)  # the pair's PairImages (None: no pair), after set_pair showed them
    status_message = Signal(str)  # hover/pin read-out for the status bar
    similarity_changed = Signal(object)  # float, or None while preparing
    region_query = Signal(tuple)  # (y0, x0, y1, x1) drawn on the query, pixel edges
    _occlusion_progress = Signal(int, float)  # (row A's stamp, fraction), from the worker thread
    grad_bank_needed = Signal()  # grad-weight transfer chosen without Grad-CAM weights at hand

    def __init__(self, parent: QWidget | None = None, model_lock: threading.RLock | None = None,
                 display: DisplayOptions | None = None) -> None:
        super().__init__(parent)
        #: The display options this view shows and its toolbar writes (the session's, or its own).
        self.display = display if display is not None else DisplayOptions()
        self._following = False  # True while a control is set to its option (it writes nothing back)
        self._quiet = False  # True while an option is set to follow its control (nothing redraws)
        self.model_lock = model_lock or threading.RLock()
        self.images: PairImages | None = None
        #: ``core.explain.orientation.pair_orientation`` of a cross-view pair with each map's
        #: ``error_deg`` and ``true_heading_deg`` (None when unknown); None: no lines drawn
        self.orientation: dict | None = None
        self.occlusion_baseline = "blur"  # blur | mean | noise (core.explain.perturb.BASELINES)
        #: Grad-CAM weights of labelled images for grad-weight transfer (seed 002), or None;
        #: ``_grad_missing`` says why there are none (None: not asked for yet).
        self.grad_bank = None
        self._grad_missing: str | None = None
        #: Called by Swap (the main window swaps the roles of the two dataset images); without
        #: one, Swap exchanges the two photographs here.
        self.swap_handler = None

        self.link = HoverLink(self._show_overall, self._describe, parent=self)
        self.link.message.connect(self.status_message)
        self.row_splitter = QSplitter(Qt.Vertical)
        self.row_splitter.setChildrenCollapsible(False)
        #: The rows on screen, one per model: A first, then B while comparing (issue 24).
        self.rows: list[PairRow] = []
        self._made: list[PairRow] = []  # every row made so far (a row B comes back when comparing again)
        self._add_row()
        self._build_toolbar()
        self.body = QWidget()
        body_layout = QVBoxLayout(self.body)
        body_layout.setContentsMargins(0, 0, 0, 0)
        body_layout.addWidget(self.row_splitter)
        self.lines = _MatchLines(self.panes, self.body)
        self.lines.hide()
        self.info = ClampedLabel("Open a dataset and a checkpoint, then choose a query and a reference.")
        self.info.setObjectName("pairInfo")
        self.info.setWordWrap(True)  # a long read-out must not widen the window
        self.rule_label = QLabel("")
        self.rule_label.setObjectName("ruleLabel")
        self.rule_label.setWordWrap(True)
        self.rule_label.setAlignment(Qt.AlignRight | Qt.AlignVCenter)
        # The read-out line keeps one height whatever it says ("preparing…", the similarity's
        # terms, a progress note), so the panes above never jump while the pair is prepared or
        # a map computes: room for three lines, the whole text also in the tooltip.
        lines = self.info.fontMetrics().lineSpacing() * INFO_LINES + 4
        for label in (self.info, self.rule_label):
            label.setFixedHeight(lines)
            label.setAlignment((Qt.AlignRight if label is self.rule_label else Qt.AlignLeft) | Qt.AlignTop)
        info_row = QHBoxLayout()
        info_row.setContentsMargins(0, 0, 0, 0)
        info_row.addWidget(self.info, 4)
        info_row.addWidget(self.rule_label, 1)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.setSpacing(4)
        layout.addWidget(self.toolbar_widget)
        layout.addWidget(self.body, 1)
        layout.addLayout(info_row)

        self.escape = QShortcut(QKeySequence(Qt.Key_Escape), self, context=Qt.WindowShortcut)
        self.escape.activated.connect(self.link.unpin)
        self._occlusion_progress.connect(self._on_occlusion_progress)

        self.panes[QUERY].region_selected.connect(self.region_query)
        for pane in self.panes:
            pane.view.sigRangeChanged.connect(self._update_lines)
        self.rows[0].splitter.splitterMoved.connect(self._update_lines)
        self.row_splitter.splitterMoved.connect(self._update_lines)
        for pane in self.all_panes:
            pane.set_opacity(float(self.display.opacity))
        self.display.events.connect(self._on_display)
        self._apply_colors()

    # -- rows
    def _add_row(self) -> PairRow:
        """The next model's row (made once, shown again when it comes back)."""
        k = len(self.rows)
        if k < len(self._made):
            row = self._made[k]
        else:
            row = PairRow(chr(ord("A") + k), methods("pair_view") if k == 0 else COMPARE_METHODS, self)
            self._made.append(row)
            row.link = self.link.add_row(row.panes)
            self.row_splitter.addWidget(row.splitter)
            row.splitter.splitterMoved.connect(self._update_lines)
            if self.images is not None:  # a row made for a pair already on screen
                row.set_images(self.images.query, self.images.reference)
            opacity = float(self.display.opacity)
            for pane in row.panes:
                pane.set_opacity(opacity)
        self.rows.append(row)
        row.splitter.show()
        if k > 0:  # the same split as row A's (a panorama's larger share, or one the user dragged)
            row.splitter.setSizes(self.rows[0].splitter.sizes())
        self.link.set_row_shown(row.link, True)
        return row

    def _drop_row(self) -> None:
        """The last row goes (its model is closed): its jobs are dropped, its panes hidden."""
        row = self.rows.pop()
        row.model = None
        row.restart()
        row.set_state("empty")
        row.splitter.hide()
        self.link.set_row_shown(row.link, False)

    @property
    def panes(self) -> tuple[ImagePane, ImagePane]:
        """Model A's two panes (the query's and the reference's)."""
        return self.rows[0].panes

    @property
    def all_panes(self) -> tuple[ImagePane, ...]:
        """Every shown row's panes: model A's two, then model B's two."""
        return tuple(pane for row in self.rows for pane in row.panes)

    @property
    def model(self):
        """Model A (the open model)."""
        return self.rows[0].model

    @property
    def device(self) -> str:
        return self.rows[0].device

    @property
    def explanation(self):
        """Model A's explanation of the pair (None until prepared)."""
        return self.rows[0].explanation

    @property
    def state(self) -> str:
        """Model A's state: empty | preparing | ready | failed."""
        return self.rows[0].state

    @property
    def comparing(self) -> bool:
        """Is a compare model (B) open?"""
        return len(self.rows) > 1

    @property
    def difference(self) -> bool:
        """Does the second row show A minus B (instead of B's own maps)?"""
        return self.comparing and self.display.row_b == "difference"

    @property
    def shared_scale(self) -> bool:
        return self.comparing and bool(self.display.shared_scale)

    def _share_for_panorama(self, cross_view: bool) -> None:
        """A 1:4 street panorama beside a square aerial image: the panorama's pane gets the
        larger share of the row; other pairs share it equally (when cross-view pairs start or
        end; a dragged splitter stays otherwise)."""
        for row in self._made:
            total = sum(row.splitter.sizes())
            if total > 0:
                first = round(total * PANORAMA_SHARE) if cross_view else total // 2
                row.splitter.setSizes([first, total - first])

    # -- toolbar
    def _build_toolbar(self) -> None:
        self.method_combo = QComboBox()
        for key in methods("pair_view"):
            self.method_combo.addItem(method_label(key), key)
        self.method_combo.setToolTip("Overall map of each image")
        self.sign_combo = QComboBox()
        for key, text in SIGNS:
            self.sign_combo.addItem(text, key)
        self.sign_combo.setToolTip("Positive: supports the similarity; negative: opposes it; signed: both")
        self.scale_combo = QComboBox()
        for key, text in SCALES:
            self.scale_combo.addItem(text, key)
        self.scale_combo.setToolTip("Partial maps: each map stretched to its own maximum (the point's share of the "
                                    "similarity is printed beside the colour bar), or one scale for the whole pair "
                                    "(a point's colour says how much of the similarity it explains; the strongest "
                                    "2 % of the points saturate)")
        self.cmap_combo = QComboBox()
        for name in SEQUENTIAL:
            self.cmap_combo.addItem(name, name)
        self.cmap_combo.setToolTip("Colour map (signed display uses a diverging map)")
        self.opacity = QSlider(Qt.Horizontal)
        self.opacity.setRange(0, 100)
        self.opacity.setFixedWidth(110)
        self.opacity.setToolTip("Overlay opacity")
        self.matches_box = QCheckBox("Matches")
        self.matches_box.setToolTip("Draw the strongest point-to-point correspondences")
        self.matches_n = QSpinBox()
        self.matches_n.setRange(1, 50)
        self.matches_n.setToolTip("Number of correspondences")
        self.region_button = QToolButton()
        self.region_button.setText("Region")
        self.region_button.setCheckable(True)
        self.region_button.setObjectName("regionButton")
        self.region_button.setStyleSheet(REGION_ARMED_STYLE)
        self.region_button.setToolTip("Drag a rectangle on the query to retrieve by that region "
                                      "(Shift+drag works at any time)")
        self.swap_button = QToolButton()
        self.swap_button.setText("Swap")
        self.swap_button.setToolTip("Exchange query and reference")
        self.fit_button = QToolButton()
        self.fit_button.setText("Fit")
        self.fit_button.setToolTip("Show the whole images")
        self.size_combo = QComboBox()
        self.size_combo.setToolTip("Network input size for this pair: larger inputs give a finer grid of cells "
                                   "(the pair is explained again)")

        self.compare_view_combo = QComboBox()
        for key, text in COMPARE_VIEWS:
            self.compare_view_combo.addItem(text, key)
        self.compare_view_combo.setToolTip("The second row: model B's own maps, or model A's minus model B's on one "
                                           "symmetric scale (diverging colours: red where A's map is stronger, "
                                           "blue where B's is)")
        self.shared_scale_box = QCheckBox("Shared scale")
        self.shared_scale_box.setToolTip("One colour scale for both models' maps (off: each row, and each map, "
                                         "has its own)")

        for combo in (self.method_combo, self.sign_combo, self.scale_combo, self.cmap_combo, self.size_combo,
                      self.compare_view_combo):
            combo.setSizeAdjustPolicy(QComboBox.AdjustToContents)  # full names, never "Decomposit"
        self.opacity.setFixedWidth(80)

        # The toolbar wraps onto a second row on a narrow window (1366 px laptops with both
        # docks open) instead of forcing the window wider than the screen; each label stays
        # with its control, Swap and Fit stay at the right end.
        bar = FlowLayout(spacing=10)
        for text, widget in (("Map", self.method_combo), ("Sign", self.sign_combo),
                              ("Scale", self.scale_combo), ("Colours", self.cmap_combo),
                              ("Opacity", self.opacity), ("Resolution", self.size_combo)):
            bar.addWidget(_labelled(text, widget))
        bar.addWidget(_labelled(None, self.matches_box, self.matches_n, self.region_button))
        self.compare_controls = _labelled("Row B", self.compare_view_combo, self.shared_scale_box)
        self.compare_controls.hide()  # shown while a compare model is open
        bar.addWidget(self.compare_controls)
        bar.add_right(_labelled(None, self.swap_button, self.fit_button))
        self.toolbar_widget = QWidget()
        self.toolbar_widget.setLayout(bar)
        self.toolbar = bar

        for name in self._CONTROLS:
            self._show_field(name)
        # The controls write the display options; what they show follows the options (below).
        for name, combo in (("method", self.method_combo), ("sign", self.sign_combo), ("scale", self.scale_combo),
                            ("colormap", self.cmap_combo), ("row_b", self.compare_view_combo)):
            combo.currentIndexChanged.connect(lambda _i, n=name, c=combo: self._write(n, c.currentData()))
        self.size_combo.currentIndexChanged.connect(lambda _i: self._write("input_size", self._chosen_size()))
        self.shared_scale_box.toggled.connect(lambda on: self._write("shared_scale", on))
        self.opacity.valueChanged.connect(lambda v: self._write("opacity", v / 100.0))
        self.matches_box.toggled.connect(lambda on: self._write("matches", on))
        self.matches_n.valueChanged.connect(lambda n: self._write("match_count", n))
        self.region_button.toggled.connect(self._on_region_mode)
        self.swap_button.clicked.connect(self.swap)
        self.fit_button.clicked.connect(lambda: [p.fit() for p in self.all_panes])

    # -- the display options (core.display): the toolbar writes them and follows them
    #: field -> its control (``input_size``: the Resolution box, None there = the model's own size)
    _CONTROLS = ("method", "sign", "scale", "colormap", "row_b", "input_size", "opacity", "shared_scale",
                 "matches", "match_count")

    def _write(self, name: str, value: Any) -> None:
        """A control changed: set its display option (which redraws through :meth:`_on_display`)."""
        if not self._following:
            setattr(self.display, name, value)

    def _combo(self, name: str) -> QComboBox | None:
        return {"method": self.method_combo, "sign": self.sign_combo, "scale": self.scale_combo,
                "colormap": self.cmap_combo, "row_b": self.compare_view_combo, "input_size": self.size_combo}.get(name)

    def _show_field(self, name: str) -> bool:
        """Put display option ``name`` on its control (no redraw); False when the control has
        no such value (then the option is put back to what the control shows)."""
        value = getattr(self.display, name)
        self._following = True
        try:
            combo = self._combo(name)
            if name == "input_size":
                if self.size_combo.count() == 0 or (value is None and self._own_size() is None):
                    return True  # no model yet (the size is chosen when one opens), or one fixed entry
                index = self.size_combo.findData(self._own_size() if value is None else int(value))
                ok = index >= 0
                if ok:
                    self.size_combo.setCurrentIndex(index)
            elif combo is not None:
                index = combo.findData(value)
                ok = index >= 0
                if ok:
                    combo.setCurrentIndex(index)
            elif name == "opacity":
                self.opacity.setValue(round(100 * float(value)))
                ok = True
            else:
                control = {"shared_scale": self.shared_scale_box, "matches": self.matches_box,
                           "match_count": self.matches_n}[name]
                if name == "match_count":
                    control.setValue(int(value))
                else:
                    control.setChecked(bool(value))
                ok = True
        finally:
            self._following = False
        if not ok:
            shown = self._chosen_size() if name == "input_size" else combo.currentData()
            log.warning("%s %r is not offered here; it stays %r", name, value, shown)
            self._quiet = True
            try:
                setattr(self.display, name, shown)
            finally:
                self._quiet = False
        return ok

    def _on_display(self, info) -> None:
        """A display option changed (from the toolbar, the session or a notebook): show it on
        its control and redraw what it changes."""
        name = info.signal.name
        if name not in self._CONTROLS or not shiboken6.isValid(self):
            return
        quiet = self._quiet
        if not self._show_field(name) or quiet:
            return
        if name == "method":
            self._on_method()
        elif name == "input_size":
            self._on_size()
        elif name == "opacity":
            for row in self._made:
                for pane in row.panes:
                    pane.set_opacity(float(self.display.opacity))
        elif name in ("matches", "match_count"):
            self._update_matches()
        else:
            self._apply_colors()

    def _own_size(self) -> int | None:
        """The model's own input size (None: no model, or a two-branch model)."""
        if self.model is None or getattr(self.model, "input_shapes", None) is not None:
            return None
        return int(self.model.preprocess.size)

    def _chosen_size(self) -> int | None:
        """The Resolution box's choice as the display option holds it (None: the model's own)."""
        size = self.size_combo.currentData()
        return None if size is None or size == self._own_size() else int(size)

    # -- public API
    @property
    def method(self) -> str:
        return self.display.method

    @property
    def sign(self) -> str:
        return self.display.sign

    @property
    def input_size(self) -> int | None:
        """The chosen network input size (None: no model yet)."""
        return self.size_combo.currentData()

    def set_input_size(self, size: int) -> None:
        """Choose input size ``size`` (one of the Resolution entries); re-prepares the pair."""
        if self.size_combo.findData(int(size)) < 0:
            raise ValueError(f"{size} px is not a resolution choice here")
        self.display.input_size = None if int(size) == self._own_size() else int(size)

    def _fill_sizes(self, keep: bool) -> None:
        """Resolution entries for the model and the images; the current size stays chosen when
        ``keep`` and it is still offered, otherwise the model's own size."""
        from dmlviewer.core.models.resolution import input_sizes

        current = self.size_combo.currentData() if keep else None
        if keep and self.display.input_size is not None:
            current = self.display.input_size
        shape = None
        if self.images is not None:
            shape = tuple(max(a, b) for a, b in zip(self.images.query.shape[:2], self.images.reference.shape[:2]))
        self.size_combo.blockSignals(True)
        self.size_combo.clear()
        shapes = getattr(self.model, "input_shapes", None)
        if shapes is not None:  # a two-branch model: each branch at its own input shape (issue 25)
            self.size_combo.addItem(" / ".join("×".join(map(str, shapes[s])) for s in ("query", "reference")), None)
        elif self.model is not None:
            for label, size in input_sizes(self.model, shape):
                self.size_combo.addItem(label, size)
            index = self.size_combo.findData(current) if current is not None else -1
            if index < 0:
                index = self.size_combo.findData(int(self.model.preprocess.size))
            self.size_combo.setCurrentIndex(max(0, index))
        self.size_combo.setEnabled(self.size_combo.count() > 1)
        self.size_combo.blockSignals(False)
        self._quiet = True  # the option follows the box here; the caller prepares the pair
        try:
            self.display.input_size = self._chosen_size()
        finally:
            self._quiet = False

    def _on_size(self) -> None:
        if self.images is not None and self.model is not None:
            self.link.reset()
            self._prepare()

    def set_method(self, method: str) -> None:
        """Show overall maps of ``method`` (a key of ``methods("pair_view")``)."""
        self.display.method = check("method", method)

    def set_occlusion_baseline(self, baseline: str) -> None:
        """What an occluded cell shows (blur, mean, noise); drops computed occlusion maps."""
        if baseline == self.occlusion_baseline:
            return
        self.occlusion_baseline = baseline
        if self.rows[0].overall.pop(OCCLUSION, None) is not None and self.method == OCCLUSION:
            self._on_method()

    def set_model(self, model, device: str = "cpu") -> None:
        """Use ``model`` on ``device`` for the next preparations (and re-prepare the pair). A new
        model drops the Grad-CAM weights (:meth:`set_grad_bank` gives its own afterwards)."""
        row = self.rows[0]
        new = model is not row.model
        if new:  # Grad-CAM weights belong to one model
            self.grad_bank = None
            self._grad_missing = None
        row.model = model
        row.device = str(device)
        self._fill_sizes(keep=not new)  # a new model starts at its own size
        if self.images is not None:
            self._prepare()

    def set_pair(self, images: PairImages | None) -> None:
        """Show two photographs and prepare their explanation in the background; then
        ``images_changed`` hands them on (the group tabs show the same photographs)."""
        self._show_pair(images)
        self.images_changed.emit(images)

    def _show_pair(self, images: PairImages | None) -> None:
        was_cross_view = self.images is not None and self.images.cross_view
        if images is not None and images.cross_view != was_cross_view:
            self._share_for_panorama(images.cross_view)
        self.images = images
        self.link.reset()
        self.region_button.setChecked(False)
        self._fill_sizes(keep=True)  # the "image" entry follows the photographs
        if images is None:
            for pane in (pane for row in self._made for pane in row.panes):
                pane.set_image(None)
                pane.show_message(None)
                pane.set_guides([])
            self.orientation = None
            for row in self.rows:
                row.restart()
            self._set_state("empty")
            for row in self.rows[1:]:
                row.set_state("empty")
            return
        for row in self._made:
            row.set_images(images.query, images.reference)
        self._update_titles()
        self._prepare()

    def set_compare_model(self, model, device: str = "cpu", name: str = "B") -> None:
        """Show ``model`` (any dmlviewer model) as model B under the open one (A), named
        ``name`` in the titles; None stops comparing (one row again)."""
        if model is None:
            while self.comparing:
                self._drop_row()
        else:
            row = self.rows[1] if self.comparing else self._add_row()
            row.model, row.device, row.name = model, str(device), name
        on = self.comparing
        self.compare_controls.setVisible(on)
        self.toolbar.invalidate()
        if on:  # the rows share the height
            share = max(1, self.row_splitter.height() // len(self.rows))
            self.row_splitter.setSizes([share] * len(self.rows))
        self._apply_colors_to_panes()
        self._update_titles()
        if on:
            self._prepare_row(self.rows[1])
        if self.state == "ready":
            self._show_similarity_info()
            self._build_renderers()
            self._show_overall()
            self.link.refresh()

    def _update_titles(self) -> None:
        images = self.images
        if images is None:
            return
        a = "<b>A</b> · " if self.comparing else ""
        for pane, title in zip(self.panes, (images.query_title, images.reference_title)):
            pane.set_title(a + title)
        # the other rows show the same two images as row A: their captions name the model and
        # the role only, so that the model's name is not cut off (the whole caption is the tooltip)
        for row in self.rows[1:]:
            b = (f"<b>A − {row.letter}</b> · " if self.difference
                 else f"<b>{row.letter}</b> {html.escape(row.name)} · ")
            for pane, title in zip(row.panes, (images.query_title, images.reference_title)):
                pane.set_title(b + _role(title), tooltip=b + title)

    def swap(self) -> None:
        """Exchange the roles: the reference becomes the query (the explanation, captions and
        bias terms follow the roles, not the screen positions)."""
        if self.images is None:
            return
        if self.swap_handler is not None:
            self.swap_handler()
            return
        i = self.images
        self.set_pair(PairImages(i.reference, i.query, i.reference_title, i.query_title))

    def set_grad_bank(self, bank, reason: str | None = None) -> None:
        """Grad-CAM weights for grad-weight transfer (None with ``reason``: unavailable, and
        why). Maps computed with an older bank are dropped."""
        self.grad_bank = bank
        self._grad_missing = reason
        if self.explanation is not None:
            self.explanation.grad_bank = bank
            self.rows[0].overall.pop("grad_transfer", None)
            if self.rows[0].pending == "grad_transfer":
                self.rows[0].pending = None
        if self.state == "ready" and self.method == "grad_transfer":
            self._on_method()

    def show_grad_progress(self, text: str) -> None:
        """While the Grad-CAM weights are computed: say so on both panes."""
        self._grad_missing = None
        if self.method == "grad_transfer" and self.state == "ready":
            self.rows[0].say(f"Grad-weight transfer: {text}")

    # -- preparation
    def _set_state(self, state: str, message: str | None = None) -> None:
        """Model A's state and what the read-out under the panes says about it."""
        self.rows[0].set_state(state, message)
        if state != "ready":
            self.similarity_changed.emit(None)
            self.rule_label.setText("")
            self.rule_label.setToolTip("")
        if state == "empty":
            self.info.setText("Choose a query (click) and a reference (Ctrl+click) in the browser.")
        elif state == "preparing":
            self.info.setText("Preparing the pair (forward passes, contributions)…")

    def _prepare(self) -> None:
        """Explain the pair again with every row's model (a new pair, model A or size)."""
        for pane in self.panes:
            pane.set_markers([])
            pane.set_guides([])
        self.orientation = None
        self.lines.matches = []
        self.lines.update()
        for row in self.rows:
            self._prepare_row(row)

    def _prepare_row(self, row: PairRow) -> None:
        """Explain the pair with ``row``'s model in the background (a new stamp for the row)."""
        first = row is self.rows[0]
        row.restart()
        if row.model is None or self.images is None:
            if first:
                self._set_state("empty", "no model loaded")
                self.info.setText("Open a checkpoint to explain the pair.")
            else:
                row.set_state("empty")
            return
        if first:
            self._set_state("preparing")
        else:
            row.set_state("preparing", busy_text=f"preparing model {row.letter}…")
        model, device, lock, imgs = row.model, row.device, self.model_lock, self.images
        # Each model at its own input size, or every model at the size chosen for model A.
        size = self._chosen_size()

        def job(cancel):
            from dmlviewer.core.explain.pair import explain_pair

            with lock:
                cancel.raise_if_cancelled()
                return explain_pair(model, imgs.query, imgs.reference, device=device, size=size)

        row.run(row.runner, job, lambda expl: self._on_prepared(row, expl),
                lambda text: self._on_prepare_failed(row, text))

    def _on_prepared(self, row: PairRow, expl) -> None:
        first = row is self.rows[0]
        row.explanation = expl
        if first:
            expl.grad_bank = self.grad_bank
        # These two come with the pair; the Grad-CAM family is computed on request.
        row.overall = {"decomposition": True, "decomposition_bias": True}
        if first:
            self._set_state("ready")
        else:
            row.set_state("ready")
        if self.state != "ready":
            return  # model A's row comes first: the other rows are drawn with it
        self.similarity_changed.emit(float(self.explanation.similarity))
        self._show_similarity_info()
        self._build_renderers()
        self._show_overall()
        if first:
            self._update_matches()
            self._show_orientation()
        self.link.refresh()
        if first:
            self.pair_ready.emit(expl)

    def _on_prepare_failed(self, row: PairRow, text: str) -> None:
        first, details = errors.split_failure(text)
        if row is self.rows[0]:
            self._set_state("failed", "could not explain this pair")
            self.info.setText(f"Explanation failed: {first}")
            errors.show_error(self, "Explanation failed", first, details)
        else:
            row.set_state("failed", f"model {row.letter} could not explain this pair")
            errors.show_error(self, f"Explanation failed (model {row.letter})", first, details)

    def refresh_info(self) -> None:
        """Say the pair's line again (its similarity breakdown when ready) after another line
        took its place, e.g. the main window's "Loading the model …" of a load that failed."""
        if self.state == "ready" and self.explanation is not None:
            self._show_similarity_info()
        elif self.state == "preparing":
            self.info.setText("Preparing the pair (forward passes, contributions)…")
        elif self.model is None:
            self.info.setText("Open a checkpoint to explain the pair.")

    def _show_similarity_info(self) -> None:
        e = self.explanation
        p2p_sum = float(np.asarray(e.point_to_point).sum())
        (hq, wq), (hr, wr) = e.grid_query, e.grid_reference
        both = ""
        if self.comparing:
            both = f"Similarity A {e.similarity:+.4f}"
            for row in self.rows[1:]:
                s, k = row.similarity, row.letter
                both += f" · {k} " + ("preparing…" if s is None else f"{s:+.4f} (A − {k} {e.similarity - s:+.4f})")
            both += "   ·   A: "
        self.info.setText(
            f"{both}Similarity (cosine) {e.similarity:+.4f} = point-to-point {p2p_sum:+.4f} "
            f"+ query cells · reference bias {e.bias_query:+.4f} "
            f"+ reference cells · query bias {e.bias_reference:+.4f} + bias · bias {e.bias_both:+.4f}"
            f"   ·   grids {hq}×{wq} and {hr}×{wr}   ·   hover a point, click to pin, Esc to release")
        self.info.setToolTip(
            self.info.text() + "\n\n"  # the whole line, should a narrow window clip it
            "Seed 000 Eq. 3: with E = Σ C_ij + B for each image (C: the contributions of the grid cells, "
            "B: the head's bias), E_q·E_r/(|E_q||E_r|) = Σ C_q·C_r (point-to-point) + Σ C_q·B_r "
            "+ Σ C_r·B_q + B_q·B_r, each divided by |E_q||E_r|.")
        short, detail = rule_text(e.rule, e.rule_detail)
        others = [row for row in self.rows[1:] if row.explanation is not None]
        if others:
            shorts, details = [f"A: {short.split(':')[0]}"], [f"Model A: {detail}"]
            for row in others:
                short_k, detail_k = rule_text(row.explanation.rule, row.explanation.rule_detail)
                shorts.append(f"{row.letter}: {short_k.split(':')[0]}")
                details.append(f"Model {row.letter}: {detail_k}")
            short, detail = "\n".join(shorts), "\n\n".join(details)
        self.rule_label.setText(short)
        self.rule_label.setToolTip(detail)

    # -- cross-view orientation (issue 25)
    def _show_orientation(self) -> None:
        """With a two-branch model on a street/aerial pair: on the aerial image the 0-degree
        line (north, from the camera at the centre), the headings the partial map's and the
        overall map's peaks imply (and the true heading, dashed, when known) and the two peaks
        (dots); on the panorama the column of the query's most activated point (and a dot on
        it). The angles come from ``core.explain.orientation.pair_orientation`` (seed 000
        Sec. 5.3); the dots show where the peaks are, the lines what heading they imply."""
        from dmlviewer.core.data.cross_view import angle_error
        from dmlviewer.core.explain.orientation import pair_orientation

        self.orientation = None
        imgs, expl = self.images, self.explanation
        if (expl is None or imgs is None or not imgs.cross_view
                or getattr(self.model, "input_shapes", None) is None):
            return
        try:
            result = pair_orientation(expl)
        except Exception:  # noqa: BLE001 - the lines are an extra: never break the pair view
            log.warning("orientation unavailable for this pair", exc_info=True)
            return
        truth = imgs.true_heading
        for name in ORIENTATION_MAPS:
            heading = result[name]["heading_deg"]
            result[name]["error_deg"] = None if truth is None else float(angle_error(heading, truth))
        result["true_heading_deg"] = truth
        self.orientation = result
        shape = tuple(expl.image_shape_reference)
        guides = [("north: 0°", *_ray(shape, 0.0), ORIENTATION_COLORS["north"], False)]
        for name, label in ORIENTATION_MAPS.items():
            heading, error = result[name]["heading_deg"], result[name]["error_deg"]
            text = f"{label}: {heading:.1f}°" + ("" if error is None else f", error {error:.1f}°")
            guides.append((text, *_ray(shape, heading), ORIENTATION_COLORS[name], False))
        if truth is not None:
            guides.append((f"true heading: {truth:.1f}°", *_ray(shape, truth), ORIENTATION_COLORS["truth"], True))
        peaks = [(*result[name]["peak"], ORIENTATION_COLORS[name]) for name in ORIENTATION_MAPS]
        self.panes[REFERENCE].set_guides(guides, peaks)
        x_q, y_q = result["query_point"]
        height = expl.image_shape_query[0]
        self.panes[QUERY].set_guides([(f"most activated point: column {x_q:.0f}", [x_q, x_q], [0.0, float(height)],
                                       ORIENTATION_COLORS["partial_map"], False)],
                                     [(x_q, y_q, ORIENTATION_COLORS["partial_map"])])

    # -- overall maps
    def _on_method(self) -> None:
        """The chosen method's overall maps: requested where missing, drawn where computed."""
        for row in self.rows:
            self._request_maps(row)
        if self.state != "ready":
            return
        self._build_renderers()  # occlusion has its own point-to-point maps; B's row draws B's methods only
        if self._maps_state(self.rows[0]) != "missing":
            self._show_overall()
            self.link.refresh()

    def _maps_state(self, row: PairRow) -> str:
        """``row``'s maps of the chosen method: "absent" (not offered on this row, or the row is
        not ready), "missing" (to be computed), "done" or "failed"."""
        if row.state != "ready" or self.method not in row.methods:
            return "absent"
        done = row.overall.get(self.method)
        return "missing" if done is None else "failed" if isinstance(done, str) else "done"

    def _request_maps(self, row: PairRow) -> None:
        """Compute ``row``'s overall maps of the chosen method in the background when missing
        (or say on its row that the method is shown for model A only)."""
        method, first = self.method, row is self.rows[0]
        name = method_label(method)
        if row.state != "ready":
            return
        if method not in row.methods:
            row.say(f"{name} is shown for model A only")
            return
        if method in row.overall or row.pending == method:
            return
        if method == "grad_transfer" and row.explanation.grad_bank is None:
            # Seed 002 borrows the Grad-CAM weights of labelled training images: the owner
            # computes them in the job queue (or says why it cannot) and calls set_grad_bank.
            row.say("Grad-weight transfer unavailable:\n" + self._grad_missing if self._grad_missing
                    else "Grad-weight transfer: preparing the Grad-CAM weights of the training images…")
            if self._grad_missing is None:
                self.grad_bank_needed.emit()
            return
        row.say(f"computing {name}…" if first else f"computing {name} of model {row.letter}…")
        row.pending = method
        expl, lock, stamp = row.explanation, self.model_lock, row.stamp
        occlusion_args = (row.model, self.images, row.device, self.occlusion_baseline, self.input_size)

        def job(cancel):
            with lock:
                cancel.raise_if_cancelled()
                if method == OCCLUSION:
                    report = lambda f: self._occlusion_progress.emit(stamp, f)  # noqa: E731
                    return _occlusion_maps(expl, *occlusion_args, cancel, report)
                return _overall_maps(expl, method)

        row.run(row.overall_runner, job, lambda maps: self._on_overall(row, method, maps),
                lambda text: self._on_overall_failed(row, method, text))

    def _on_overall(self, row: PairRow, method: str, maps) -> None:
        row.pending = None
        row.overall[method] = maps
        for pane in row.panes:
            pane.show_message(None)
        if method == self.method and self.state == "ready":
            self._build_renderers()
            self._show_overall()
            self.link.refresh()

    def _on_occlusion_progress(self, stamp: int, fraction: float) -> None:
        row = self.rows[0]
        if row.fresh(stamp) and self.method == OCCLUSION and OCCLUSION not in row.overall:
            for pane in row.panes:
                pane.show_message(f"computing Occlusion… {100 * fraction:.0f} %")

    def _on_overall_failed(self, row: PairRow, method: str, text: str) -> None:
        first, _ = errors.split_failure(text)
        row.pending = None
        row.overall[method] = first
        log.warning("overall map %s of model %s failed: %s", method, row.letter, text)
        self._show_overall()

    def _row_maps(self, row: PairRow) -> dict[str, np.ndarray] | None:
        """``row``'s overall maps of the current method and sign (``side -> H x W``), or None."""
        if self._maps_state(row) != "done":
            return None
        return {side: row.explanation.overall(self.method, side, self.sign) for side in SIDE_NAMES}

    def difference_maps(self, row: int = 1) -> dict[str, np.ndarray] | None:
        """A's overall maps minus those of row ``row`` (current method and sign, at image
        size), or None."""
        if self.state != "ready" or row >= len(self.rows):
            return None
        a, other = self._row_maps(self.rows[0]), self._row_maps(self.rows[row])
        if a is None or other is None:
            return None
        return {side: a[side] - other[side] for side in SIDE_NAMES}

    def _show_overall(self) -> None:
        """Put the current method's overall maps on every row's panes (also the 'restore' of
        hover): each row on its own scale, or one scale for all rows with "Shared scale", or
        A minus the row's model on one symmetric scale with "Difference"."""
        if self.state != "ready":
            return
        if self._maps_state(self.rows[0]) == "missing":
            for row in self.rows:
                self._request_maps(row)
            return
        unit = ("similarity share per cell" if self.method.startswith("decomposition")
                else "similarity lost when hidden" if self.method == OCCLUSION else "map value")
        maps = [self._row_maps(row) for row in self.rows]
        shared = self.shared_scale and not self.difference
        name, signed = self.display.colormap, self.sign == "signed"
        for k, (row, shown) in enumerate(zip(self.rows, maps)):
            for pane in row.panes:
                pane.show_readout(None)
            state = self._maps_state(row)
            if state == "missing":
                self._request_maps(row)
                continue
            if state == "absent":
                if row.state == "ready" and self.method not in row.methods:
                    row.say(f"{method_label(self.method)} is shown for model A only")
                continue
            if state == "failed":
                row.say(f"{method_label(self.method)} unavailable:\n{row.overall[self.method]}")
                continue
            if k > 0 and self.difference:
                diff = self.difference_maps(k)
                if diff is None:
                    continue
                levels = overall_levels([self.rows[0].explanation, row.explanation], self.method, self.sign,
                                        difference=True)
                for pane, side in zip(row.panes, SIDE_NAMES):
                    pane.show_message(None)
                    pane.set_map(diff[side], levels)
                    pane.set_colorbar(name, True, levels, f"A − {row.letter} {unit.replace('similarity ', '')}")
                continue
            for pane, side in zip(row.panes, SIDE_NAMES):
                pane.show_message(None)
                together = [r.explanation for r, m in zip(self.rows, maps) if m is not None] if shared else []
                levels = overall_levels(together or [row.explanation], self.method, self.sign, side)
                pane.set_map(shown[side], levels)
                if not np.any(shown[side]):
                    pane.show_message(f"this map has no {self.sign} part")
                pane.set_colorbar(name, signed, levels, unit)

    # -- hover
    def _hover_tensor(self, row: PairRow) -> np.ndarray:
        """The point-to-point tensor hovering shows on ``row``: its decomposition's, or with the
        Occlusion map the occlusion interaction (``core.explain.occlusion``)."""
        occlusion = row.overall.get(OCCLUSION) if self.method == OCCLUSION else None
        if occlusion is not None and not isinstance(occlusion, str):
            return occlusion.point_to_point
        return row.explanation.point_to_point

    def _build_renderers(self) -> None:
        """Each row's hover renderers for the current display (cheap: no copies of the
        photographs, a few small buffers), and what the hover link writes with them."""
        from dmlviewer.core.explain.hover import DifferenceRenderer, pair_scale, side_renderers

        for row in self._made:
            row.renderers, row.scale = {}, None
            row.link.renderers = {}
        if self.state != "ready":
            return
        a = self.rows[0].explanation
        sign, by_pair = self.sign, self.display.scale == "pair"
        lut = overlay_lut(self.display.colormap, sign == "signed")
        shapes = (tuple(a.image_shape_query), tuple(a.image_shape_reference))
        drawn = [row for row in self.rows if row.state == "ready" and self.method in row.methods]
        tensors = {row: self._hover_tensor(row) for row in drawn}
        scales = {row: pair_scale(tensors[row]) if by_pair else None for row in drawn}
        if by_pair and len(drawn) > 1 and (self.shared_scale or self.difference):  # one scale for all rows
            common = max(scales.values())
            scales = dict.fromkeys(drawn, common)
        for row in drawn:
            e = row.explanation
            occluded = tensors[row] is not e.point_to_point
            row.scale = scales[row]
            row.renderers = dict(enumerate(side_renderers(
                tensors[row], shapes, (tuple(e.grid_query), tuple(e.grid_reference)), lut=lut, sign=sign,
                scale=row.scale, similarity=None if occluded else float(e.similarity))))
        first = self.rows[0]
        self.link.shared_peak = self.shared_scale and not self.difference and not by_pair
        for k, row in enumerate(self.rows):
            link = row.link
            if row not in drawn:
                continue
            if k > 0 and self.difference and first in drawn:
                lut_d = overlay_lut(self.display.colormap, True)
                link.renderers = {side: DifferenceRenderer(first.renderers[side], row.renderers[side], lut=lut_d,
                                                           scale=row.scale) for side in (QUERY, REFERENCE)}
                if row.scale is None:
                    link.colorbar = (self.display.colormap, True, (-1.0, 1.0), f"A − {row.letter} ÷ max |A − {row.letter}|")
                else:
                    link.colorbar = (self.display.colormap, True, (-row.scale, row.scale),
                                     f"A − {row.letter}, cosine contribution")
                link.readout = lambda p, k=row.letter: None if p.peak is None else f"largest |A − {k}| {p.peak:.2g}"
                continue
            link.renderers = row.renderers
            link.colorbar = self._partial_colorbar(row.scale)
            whose = f"{row.letter}’s" if self.comparing else "the"
            link.readout = lambda p, whose=whose, each=row.scale is None: self._readout(p, whose, each)

    def _partial_colorbar(self, scale: float | None) -> tuple:
        """The colour bar of partial maps on ``scale`` (None: each map its own maximum)."""
        signed = self.sign == "signed"
        if scale is None:
            levels, label = ((-1.0, 1.0) if signed else (0.0, 1.0)), "fraction of this map's maximum"
            if self.shared_scale and not self.difference:
                label = "fraction of A's and B's larger maximum"
        else:
            levels, label = ((-scale, scale) if signed else (0.0, scale)), "contribution to the cosine"
        if self.sign == "negative":
            label = "− " + label
        return self.display.colormap, signed, levels, label

    @staticmethod
    def _readout(point, whose: str, each_map: bool) -> str | None:
        """The hovered point's share of its model's similarity (and on "each map" the value its
        map's top colour stands for), printed on the other pane."""
        if point.share is None:
            return None
        text = f"<b>{100.0 * point.share:+.1f}%</b> of {whose} similarity"
        if each_map and point.peak is not None:
            text += f"<br>peak {point.peak:.2g}"
        return text

    def _describe(self, side: int | None, x: float, y: float, point, pinned: bool) -> str:
        """The status bar's line for the point on screen (model A's share); "" when cleared."""
        if side is None:
            return ""
        text = f"{SIDE_NAMES[side]} ({x:.0f}, {y:.0f})"
        first = self.rows[0]
        if first.explanation is not None and self._hover_tensor(first) is not first.explanation.point_to_point:
            text += ": occlusion interaction (similarity that this cell and each other-image cell hold together)"
        elif point is not None and point.share is not None:
            text += f": {100.0 * point.share:+.2f}% of the similarity"  # short: read whole in a 1366-px status bar
        if pinned:
            text += "  [pinned, Esc to release]"
        return text

    # -- display options
    def _apply_colors_to_panes(self) -> None:
        lut = overlay_lut(self.display.colormap, self.sign == "signed")
        lut_b = overlay_lut(self.display.colormap, True) if self.difference else lut
        for k, row in enumerate(self._made):
            for pane in row.panes:
                pane.set_lut(lut if k == 0 else lut_b)

    def _apply_colors(self) -> None:
        self._apply_colors_to_panes()
        self._update_titles()
        if self.state == "ready":
            self._build_renderers()
            self._show_overall()
            self.link.refresh()

    def _on_region_mode(self, on: bool) -> None:
        self.panes[QUERY].view.region_mode = on
        self.panes[QUERY].graphics.setCursor(Qt.CrossCursor if on else Qt.ArrowCursor)
        # Armed or not must be plain to see: the style's checked state is too faint on some themes.
        self.region_button.setText("Region: drag on the query" if on else "Region")
        self.region_button.updateGeometry()  # the toolbar makes room for the longer text
        self.toolbar.invalidate()

    def clear_region(self) -> None:
        """Retrieval is back to the whole image: the query's region rectangle goes, region mode ends."""
        self.panes[QUERY].clear_region()
        self.region_button.setChecked(False)

    # -- matches
    def _update_matches(self) -> None:
        matches = []
        if self.display.matches and self.state == "ready":
            try:
                matches = list(self.explanation.correspondences(int(self.display.match_count)))
            except Exception as exc:  # noqa: BLE001
                errors.report_exception(self, "Correspondences failed", exc)
        self.panes[QUERY].set_markers([m["query_xy"] for m in matches])
        self.panes[REFERENCE].set_markers([m["reference_xy"] for m in matches])
        self.lines.matches = matches
        self.lines.setVisible(bool(matches))
        if matches:  # what the shares are of, as the report and the figures say it (issue 42 item 8)
            from dmlviewer.core.explain.matches import match_shares_text

            self.status_message.emit(match_shares_text(matches, self.explanation.point_to_point,
                                                       float(self.explanation.similarity)))
        self._update_lines()

    def _update_lines(self, *_args) -> None:
        if self.lines.isVisible():
            self.lines.setGeometry(self.body.rect())
            self.lines.raise_()
            self.lines.update()

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt API
        super().resizeEvent(event)
        QTimer.singleShot(0, self._update_lines)

    def shutdown(self) -> None:
        self.display.events.disconnect(self._on_display, missing_ok=True)
        for row in self._made:
            row.shutdown()


def _occlusion_maps(expl, model, images: PairImages, device: str, baseline: str, size: int | None, cancel, report):
    """Occlusion of the pair (``core.explain.occlusion``, cached per pair there), attached to
    ``expl`` as its ``occlusion`` overall maps; runs in the worker, ``report(fraction)``."""
    from dmlviewer.core.explain.occlusion import occlusion

    result = None
    for event in occlusion(model, images.query, images.reference, baseline, device=device, size=size,
                           cancel=cancel):
        if event.kind == "done":
            result = event.data["result"]
        elif event.total:
            report(event.fraction)
    expl.add_overall(OCCLUSION, result.overall_grid("query"), result.overall_grid("reference"))
    return result


def _overall_maps(expl, method: str) -> bool:
    """Compute (and cache in ``expl``) both overall maps of ``method``; runs in the worker
    because the Grad-CAM family needs backward passes."""
    for side in SIDE_NAMES:
        expl.overall(method, side)
    return True
