"""The pair view: query and reference side by side with overall maps and live point-to-point maps.

A pair is prepared once in the background (``core.explain.explain_pair`` in a
:class:`~dmlviewer.gui.jobs.latest.LatestRunner`: forward passes, contributions, the point-to-point
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
:attr:`PairView.rows` (its session slot, runners, explanation, overall maps, renderers and panes,
the session's stamp of its preparation); model A is row 0 and
:meth:`PairView.set_compare_model` adds model B as row 1 under it. The rows' panes are drawn in
one graphics view per side (:class:`~dmlviewer.gui.pair.pane_column.PaneColumns`, issue 40): a
hover repaints each side once, however many rows; the rows share the height equally and one
divider sets the query's and the reference's widths for all rows. The pair is prepared by every
row's model (each in its own background runner); each row has its own colour scale, or one scale for all with "Shared scale". Hovering any row's query
(or reference) draws every row's partial map of that point
(:class:`~dmlviewer.gui.pair.hover_link.HoverLink`: one core call, ``hover_points``, gives each row's
overlay, share and peak, and the link writes every pane). "Difference" shows A minus B
in the second row instead: the overall maps subtracted at image size, the partial maps by
:class:`~dmlviewer.core.explain.hover.DifferenceRenderer`, both on one symmetric scale with the
diverging colour map. B's overall maps are those that come with its pair and the Grad-CAM
family; grad-weight transfer and occlusion are shown for A only. The read-out gives both
similarities. Model B's row may show a reference of its own (the session's ``reference_b``,
``PairImages.reference_b``: A's and B's top-1 of one query, issue 41): it is prepared, titled
and hovered on its own pair, a reference's point is drawn on its own row only, and Difference
waits for one pair.
"""

from __future__ import annotations

import html
import threading
from dataclasses import dataclass

import numpy as np
import shiboken6
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import QHBoxLayout, QLabel, QVBoxLayout, QWidget

from dmlviewer.core.display import DisplayOptions
from dmlviewer.core.explain.methods import methods
from dmlviewer.core.session import SLOTS, Session
from dmlviewer.gui.pair.display_toolbar import DisplayToolbar
from dmlviewer.gui.pair.hover_link import QUERY, HoverLink
from dmlviewer.gui.pair.image_pane import ImagePane
from dmlviewer.gui.pair.match_lines import MatchLines
from dmlviewer.gui.pair.pair_info import INFO_LINES, ClampedLabel, similarity_info
from dmlviewer.gui.pair.pair_maps import PairMaps
from dmlviewer.gui.pair.pair_row import PairRow
from dmlviewer.gui.pair.pane_column import PaneColumns
from dmlviewer.gui.pair.row_controller import OCCLUSION, RowController

__all__ = ["INFO_LINES", "OCCLUSION", "PairImages", "PairView"]

#: Overall maps the compare row (model B) shows (the registry's ``compare_row`` use: those that
#: come with the pair and the Grad-CAM family).
COMPARE_METHODS = methods("compare_row")
#: the street panorama's share of the pane row for a cross-view pair
PANORAMA_SHARE = 0.55


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
    #: model B's own reference and its caption (issue 41: A's and B's top-1 of one query);
    #: None: every row shows ``reference``
    reference_b: np.ndarray | None = None
    reference_b_title: str = "Reference"

    def row_reference(self, k: int) -> tuple[np.ndarray, str]:
        """The reference photograph of row ``k`` (0: A, 1: B) and its caption."""
        if k > 0 and self.reference_b is not None:
            return self.reference_b, self.reference_b_title
        return self.reference, self.reference_title

    @property
    def own_references(self) -> bool:
        """Does model B's row show a reference of its own?"""
        return self.reference_b is not None


class PairView(RowController, PairMaps, QWidget):
    """The toolbar, one :class:`~dmlviewer.gui.pair.pair_row.PairRow` per model (A, then B) and the
    background preparation of the pair by each row's model: layout and binding here; the
    toolbar's binding to the display options in :mod:`.display_toolbar`, the rows' jobs in
    :mod:`.row_controller`, what the panes show in :mod:`.pair_maps`, the match lines in
    :mod:`.match_lines`, the orientation overlay in :mod:`.orientation_overlay` and the
    read-out under the panes in :mod:`.pair_info`."""

    pair_ready = Signal(object)  # model A's PairExplanation
    images_changed = Signal(object)  # the pair's PairImages (None: no pair), after set_pair showed them
    status_message = Signal(str)  # hover/pin read-out for the status bar
    similarity_changed = Signal(object)  # float, or None while preparing
    region_query = Signal(tuple)  # (y0, x0, y1, x1) drawn on the query, pixel edges
    _occlusion_progress = Signal(object, float)  # (row A's session stamp, fraction), from the worker thread
    grad_bank_needed = Signal()  # grad-weight transfer chosen without Grad-CAM weights at hand

    #: the toolbar's controls, as attributes of the view
    _TOOLBAR_CONTROLS = ("method_combo", "sign_combo", "scale_combo", "cmap_combo", "opacity", "matches_box",
                         "matches_n", "region_button", "swap_button", "fit_button", "size_combo",
                         "compare_view_combo", "shared_scale_box", "compare_controls")

    def __init__(self, parent: QWidget | None = None, model_lock: threading.RLock | None = None,
                 display: DisplayOptions | None = None, session: Session | None = None) -> None:
        super().__init__(parent)
        #: Where the models, the pair's freshness and the pinned point are kept: the app's
        #: session, or (a view on its own) one of the view's own.
        self.session = session if session is not None else Session()
        #: The display options this view shows and its toolbar writes (the session's, or those given).
        self.display = display if display is not None else self.session.display
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

        self.link = HoverLink(self._show_overall, self._describe, parent=self, pins=self.session)
        self.link.message.connect(self.status_message)
        #: the query's column and the reference's, every row's pane in each
        self.sides = PaneColumns()
        #: The rows on screen, one per model: A first, then B while comparing (issue 24).
        self.rows: list[PairRow] = []
        self._made: list[PairRow] = []  # every row made so far (a row B comes back when comparing again)
        self._add_row()
        self.toolbar_widget = DisplayToolbar(self.display, lambda: self.model)
        self.toolbar = self.toolbar_widget.bar
        for name in self._TOOLBAR_CONTROLS:  # the controls, as the view's own (tests and the window use them)
            setattr(self, name, getattr(self.toolbar_widget, name))
        self.region_button.toggled.connect(self._on_region_mode)
        self.swap_button.clicked.connect(self.swap)
        self.fit_button.clicked.connect(lambda: [p.fit() for p in self.all_panes])
        self.body = QWidget()
        body_layout = QVBoxLayout(self.body)
        body_layout.setContentsMargins(0, 0, 0, 0)
        body_layout.addWidget(self.sides)
        self.lines = MatchLines(self.panes, self.body)
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
        for pane in self.panes:  # row A's panes moved, zoomed or resized: its match lines follow
            pane.view.sigRangeChanged.connect(self._update_lines)
            pane.view.geometryChanged.connect(self._update_lines)
        self.sides.splitterMoved.connect(self._update_lines)
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
            row = PairRow(chr(ord("A") + k), SLOTS[min(k, len(SLOTS) - 1)], self.session,
                          methods("pair_view") if k == 0 else COMPARE_METHODS, self, self.sides)
            self._made.append(row)
            row.link = self.link.add_row(row.panes)
            if self.images is not None:  # a row made for a pair already on screen
                row.set_images(self.images.query, self.images.row_reference(k)[0])
                row.link.reference = self._reference_key(k)
            opacity = float(self.display.opacity)
            for pane in row.panes:
                pane.set_opacity(opacity)
        self.rows.append(row)
        row.set_shown(True)
        self.link.set_row_shown(row.link, True)
        return row

    def set_opengl(self, on: bool) -> bool:
        """Both sides' views, and so every row's panes (those of rows made later too), draw
        through an OpenGL viewport (``on``) or a raster one (``gui/pair/gl_viewport.py``);
        returns whether they now use OpenGL (False where it is unavailable: they stay raster)."""
        used = [column.set_opengl(on) for column in self.sides.columns]
        return on and all(used)

    def _drop_row(self) -> None:
        """The last row goes (its model is closed): its jobs are dropped, its panes hidden."""
        row = self.rows.pop()
        row.restart()
        row.set_state("empty")
        row.set_shown(False)
        self.link.set_row_shown(row.link, False)

    def _reference_key(self, k: int) -> int:
        """Which reference row ``k`` shows: 0 (the pair's) or 1 (model B's own)."""
        return int(k > 0 and self.images is not None and self.images.own_references)

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
        return self.comparing and self.display.row_b == "difference" and not self.own_references

    @property
    def own_references(self) -> bool:
        """Does model B's row show its own reference (then A minus B is not defined on it:
        the rows show their own maps)?"""
        return self.images is not None and self.images.own_references

    @property
    def shared_scale(self) -> bool:
        return self.comparing and bool(self.display.shared_scale)

    def _share_for_panorama(self, cross_view: bool) -> None:
        """A 1:4 street panorama beside a square aerial image: the panorama's pane gets the
        larger share of the row; other pairs share it equally (when cross-view pairs start or
        end; a dragged splitter stays otherwise)."""
        total = sum(self.sides.sizes())
        if total > 0:
            first = round(total * PANORAMA_SHARE) if cross_view else total // 2
            self.sides.setSizes([first, total - first])

    # -- the display options: the toolbar shows them, the view redraws what they change
    def _on_display(self, info) -> None:
        """A display option changed (from the toolbar, the session or a notebook): its control
        follows it, and what it changes is redrawn."""
        name = info.signal.name
        if name not in DisplayToolbar.CONTROLS or not shiboken6.isValid(self):
            return
        if not self.toolbar_widget.follow(name):
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
        return self.toolbar_widget.input_size

    def set_input_size(self, size: int) -> None:
        """Choose input size ``size`` (one of the Resolution entries); re-prepares the pair."""
        self.toolbar_widget.set_input_size(size)

    def _fill_sizes(self, keep: bool) -> None:
        self.toolbar_widget.fill_sizes(self.images, keep)

    def _on_size(self) -> None:
        if self.images is not None and self.model is not None:
            self.session.renew_pair()  # explanations at the previous size are stale
            self.link.reset()
            self._prepare()

    def set_method(self, method: str) -> None:
        """Show overall maps of ``method`` (a key of ``methods("pair_view")``)."""
        self.display.method = method  # checked on assignment (DisplayError names the field)

    def set_model(self, model, device: str = "cpu") -> None:
        """Show the pair explained by ``model`` on ``device``: the session's primary model and
        device (put there when they are not: a view on its own). A new model drops the Grad-CAM
        weights (:meth:`set_grad_bank` gives its own afterwards); the pair is prepared again
        (also for the same model on another device: a preparation in flight would run on the
        device the model left)."""
        row = self.rows[0]
        if self.session.model is not model:
            self.session.set_model(model)
        if self.session.device != str(device):
            self.session.set_device(str(device))
        new = not row.prepared_for_model()
        if new:  # Grad-CAM weights belong to one model
            self.grad_bank = None
            self._grad_missing = None
        self._fill_sizes(keep=not new)  # a new model starts at its own size
        if self.images is not None:
            self._prepare()

    def set_pair(self, images: PairImages | None) -> None:
        """Show two photographs and prepare their explanation in the background; then
        ``images_changed`` hands them on (the group tabs show the same photographs)."""
        self._show_pair(images)
        self.images_changed.emit(images)

    def _show_pair(self, images: PairImages | None) -> None:
        self.session.renew_pair()  # what was prepared for the previous photographs is stale
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
        for k, row in enumerate(self._made):
            row.set_images(images.query, images.row_reference(k)[0])
            row.link.reference = self._reference_key(k)  # a point of a reference: drawn on its rows only
        # A minus B needs one pair: with B on its own reference the second row shows B's maps
        self.compare_view_combo.setEnabled(not images.own_references)
        self.compare_view_combo.setToolTip(self.toolbar_widget.compare_view_tip if not images.own_references else
                                           "Model B shows its own reference: A − B needs one pair for both rows")
        self._update_titles()
        self._prepare()

    def set_compare_model(self, model, device: str = "cpu", name: str = "B") -> None:
        """Show ``model`` (any dmlviewer model) as model B under the open one (A), named
        ``name`` in the titles; None stops comparing (one row again). The model is the session's
        compare slot (put there when it is not: a view on its own)."""
        slot = self.session.slot("compare")
        if (slot.model if slot is not None else None) is not model:
            self.session.set_model(model, slot="compare")
        if self.session.device != str(device):
            self.session.set_device(str(device))
        if model is None:
            while self.comparing:
                self._drop_row()
        else:
            row = self.rows[1] if self.comparing else self._add_row()
            row.name = name
        on = self.comparing
        self.compare_controls.setVisible(on)
        self.toolbar.invalidate()
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
        # the other rows show the same query as row A and the same reference, or their own: their
        # captions name the model and the role only (and, with its own reference, its file), so
        # that the model's name is not cut off (the whole caption is the tooltip)
        for k, row in enumerate(self.rows[1:], 1):
            b = (f"<b>A − {row.letter}</b> · " if self.difference
                 else f"<b>{row.letter}</b> {html.escape(row.name)} · ")
            reference_title = images.row_reference(k)[1]
            short = (_role(images.query_title),
                     reference_title if images.own_references else _role(reference_title))
            for pane, title, brief in zip(row.panes, (images.query_title, reference_title), short):
                pane.set_title(b + brief, tooltip=b + title)

    def swap(self) -> None:
        """Exchange the roles: the reference becomes the query (the explanation, captions and
        bias terms follow the roles, not the screen positions)."""
        if self.images is None:
            return
        if self.swap_handler is not None:
            self.swap_handler()
            return
        i = self.images  # model B's own reference, if any, goes: both rows on the swapped pair
        self.set_pair(PairImages(i.reference, i.query, i.reference_title, i.query_title))

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
        line, tooltip, short, detail = similarity_info(self.explanation, self.rows[1:] if self.comparing else [],
                                                   self.own_references)
        self.info.setText(line)
        self.info.setToolTip(tooltip)
        self.rule_label.setText(short)
        self.rule_label.setToolTip(detail)

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
        shown = self.display.matches and self.state == "ready"
        self.lines.show_matches(self.explanation if shown else None, self.display.match_count)
        if self.lines.matches:  # what the shares are of, as the report and the figures say it (issue 42 item 8)
            from dmlviewer.core.explain.matches import match_shares_text

            self.status_message.emit(match_shares_text(self.lines.matches, self.explanation.point_to_point,
                                                       float(self.explanation.similarity)))

    def _update_lines(self, *_args) -> None:
        self.lines.follow()

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt API
        super().resizeEvent(event)
        QTimer.singleShot(0, self._update_lines)

    def shutdown(self) -> None:
        self.display.events.disconnect(self._on_display, missing_ok=True)
        self.link.close()
        for row in self._made:
            row.shutdown()

