"""Group attention: one tab per embedding group of a grouping head (seed 001, seed 003, seed 004).

For a grouping head the embedding is the concatenation of P group embeddings. Each tab shows,
on both images of the current pair, a map of that group chosen in the "Map" box: by default the
group's *decomposition map* (``core.explain.groups``: where each image supports the group's
share of the similarity; exact for every head, and on one scale for all groups of the pair so
that a weak group looks weak), or an attention map the head computed (A-grouping: the softmax
attention of the group's query over positions, seed 001 Eq. 9-10; G-/C-grouping: the strongest
channel of the group, a rough spatial proxy for channel attention; the multi-layer head of seed
003: its per-layer attention; DeML: the object attention of seed 004 Eq. 2-3), the group's share
of the similarity, and group-wise point-to-point hover: hovering one image shows the partial map of
that point restricted to the group's embedding slice (``group_point_to_point(p)``, which sums
over groups to the whole tensor because it uses the global normalization).

A head without groups has nothing to split: the area then says so instead of staying empty.

Given a :class:`~dmlviewer.core.session.Session` (``session=``), the tabs follow its primary
model, whoever set it. The pair's photographs are not session state (the session holds indices;
the pair view reads the images): they come from the pair view (``PairView.images_changed`` to
:meth:`GroupTabs.set_pair`), its explanation from ``PairView.pair_ready``.
"""

from __future__ import annotations

import logging
import threading

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QStackedWidget, QTabBar, QVBoxLayout, QWidget

from dmlviewer.core.explain.groups import concentration_text
from dmlviewer.core.scene.colormaps import lift_alpha
from dmlviewer.core.scene.group import CELL_ALPHA, GROUP_OPACITY, SPARSE_GAMMA, SPARSE_RAMP
from dmlviewer.core.session import Session
from dmlviewer.gui.common import errors
from dmlviewer.gui.pair.colormaps import STATIC_OVERLAY, overlay_lut
from dmlviewer.gui.pair.hover_link import QUERY, SIDE_NAMES, HoverLink
from dmlviewer.gui.pair.image_pane import ImagePane
from dmlviewer.gui.pair.pair_row import PairRow
from dmlviewer.gui.pair.pair_view import PairImages
from dmlviewer.gui.window.session_links import SessionLinks

log = logging.getLogger(__name__)

NO_MODEL_TEXT = "Open a checkpoint: grouping heads get one tab per group here."
NO_GROUPS_TEXT = (
    "<b>This model has no groups.</b><br><br>Its head (grouping: <i>{grouping}</i>) produces one "
    "embedding vector, so there are no per-group attention maps to show. Models trained with a "
    "grouping head (<tt>--grouping a</tt> for attentive grouping, or <tt>m</tt>, <tt>g</tt>, "
    "<tt>c</tt>) get one tab per group here, with the group's attention on both images, its share "
    "of the similarity and group-wise point-to-point hover.")


#: The group's exact map, first in the Map box (the default).
GROUP_DECOMPOSITION = "group_decomposition"
#: Display names of the maps (``PairExplanation.attention_maps`` keys; ``multilayer/<layer>``
#: maps are named after their layer).
MAP_LABELS = {
    GROUP_DECOMPOSITION: "Group decomposition (exact)",
    "a_grouping": "Group attention (A-grouping softmax)",
    "g_grouping_gate": "Gate of the group's strongest channel",
    "g_grouping_gate_mean": "Group gate, mean over channels",
    "c_grouping_map": "Group's strongest weighted channel",
    "random_walk": "Object attention (random walk, whole model)",
}


#: The group decomposition's overlay: transparent at zero, light colours, alpha rising as the
#: square root of the value, at GROUP_OPACITY, the cells carrying most of the share at least
#: CELL_ALPHA opaque and outlined (issue 42 item 6): the core's group scene's constants, so that
#: Export View draws what the tab shows (:mod:`dmlviewer.core.scene.group`).
SPARSE_LUT = overlay_lut(STATIC_OVERLAY, ramp=SPARSE_RAMP, gamma=SPARSE_GAMMA)


def sparse_lut(cut: float) -> np.ndarray:
    """:data:`SPARSE_LUT` with every value from ``cut`` (a fraction of the scale: the weakest
    of the cells that carry most of the share) up at least :data:`CELL_ALPHA` opaque."""
    return lift_alpha(SPARSE_LUT, int(np.floor(cut * 256)), CELL_ALPHA)  # pyqtgraph's index of a value


#: The head's attention maps (on their own range): alpha rising linearly.
STATIC_LUT = overlay_lut(STATIC_OVERLAY)


def map_label(key: str) -> str:
    if key.startswith("multilayer/"):
        return f"Layer attention: {key.split('/', 1)[1]}"
    return MAP_LABELS.get(key, key.replace("_", " "))


def model_groups(model) -> int:
    """Number of embedding groups of ``model`` (1 for a head without groups, 0 for no model)."""
    return 0 if model is None else len(model.group_slices)


def model_layers(model) -> list[str]:
    """Intermediate maps the seed-003 multi-layer head attends over (empty for other heads)."""
    return [] if model is None else list(model.config.get("multilayer") or [])


class GroupTabs(QWidget):
    """Tab bar of groups, attention-map choice, share read-out and two hoverable panes: one
    :class:`~dmlviewer.gui.pair.pair_row.PairRow` (the open model's), whose runner computes the
    groups' data and whose renderers are built like the pair view's."""

    status_message = Signal(str)

    def __init__(self, parent: QWidget | None = None, model_lock: threading.RLock | None = None,
                 session: Session | None = None) -> None:
        super().__init__(parent)
        self.model_lock = model_lock or threading.RLock()
        #: where the open model is kept (the app's session, or one of the tabs' own)
        self._own_session = session is None
        self.session = session if session is not None else Session()
        self._links = SessionLinks()
        self.images: PairImages | None = None
        self._data: dict | None = None  # attention maps, group tensors, shares of the pair
        #: The open model's row (the pair view's explanation, its group data's runner, its panes).
        self.rows = [PairRow("A", "primary", self.session, (), self)]

        self.tabs = QTabBar()
        self.tabs.setExpanding(False)
        self.tabs.setDocumentMode(True)
        self.kind_combo = QComboBox()
        self.kind_combo.setToolTip("Group decomposition: where each image supports the group's share of the "
                                   "similarity (exact, one scale for all groups); or an attention map of the head")
        self.kind_combo.setSizeAdjustPolicy(QComboBox.AdjustToContents)
        self.share_label = QLabel("")
        self.share_label.setObjectName("groupShare")
        self.share_label.setWordWrap(True)
        header = QHBoxLayout()
        header.addWidget(self.tabs, 1)
        header.addWidget(QLabel("Map"))
        header.addWidget(self.kind_combo)
        content = QWidget()
        content_layout = QVBoxLayout(content)
        content_layout.setContentsMargins(0, 0, 0, 0)
        content_layout.addLayout(header)
        content_layout.addWidget(self.share_label)
        content_layout.addWidget(self.rows[0].sides, 1)

        self.explain_label = QLabel(NO_MODEL_TEXT)
        self.explain_label.setObjectName("emptyExplanation")
        self.explain_label.setWordWrap(True)
        self.explain_label.setAlignment(Qt.AlignCenter)
        self.explain_label.setMargin(40)
        self.stack = QStackedWidget()
        self.stack.addWidget(self.explain_label)
        self.stack.addWidget(content)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.stack)

        self.link = HoverLink(self._show_attention, self._describe, parent=self)
        self.rows[0].link = self.link.add_row(self.panes)
        self.link.message.connect(self.status_message)
        self.tabs.currentChanged.connect(self._on_group)
        self.kind_combo.currentIndexChanged.connect(self._show_attention)
        for pane in self.panes:
            pane.set_lut(STATIC_LUT)
            pane.set_opacity(GROUP_OPACITY)
        self._links.connect(self.session.events.model, self._on_model)
        if self.session.model is not None:
            self._on_model("primary")

    # -- session events
    def _on_model(self, slot: str) -> None:
        """The session's model of ``slot`` changed: the primary one is shown here (with the pair
        shown, its photographs again, waiting for the new model's explanation)."""
        if slot != "primary":
            return
        self.set_model(self.session.model)
        if self.images is not None:
            self.set_pair(self.images)

    # -- state
    @property
    def panes(self) -> tuple[ImagePane, ImagePane]:
        return self.rows[0].panes

    @property
    def model(self):
        """The open model (the row's)."""
        return self.rows[0].model

    @property
    def explanation(self):
        """The pair's explanation by the open model (the pair view's), None until it is ready."""
        return self.rows[0].explanation

    @property
    def group_count(self) -> int:
        return self.tabs.count()

    @property
    def group(self) -> int:
        return max(0, self.tabs.currentIndex())

    def set_model(self, model) -> None:
        """Show the groups of ``model``: the session's primary model (put there when it is not)."""
        if self.session.model is not model:
            self.session.set_model(model)  # announced: _on_model shows it
            return
        self.rows[0].restart()
        self._data = None
        while self.tabs.count():
            self.tabs.removeTab(0)
        n = model_groups(model)
        layers = model_layers(model)
        if model is None:
            self.explain_label.setText(NO_MODEL_TEXT)
            self.stack.setCurrentIndex(0)
        elif n <= 1 and not layers:
            self.explain_label.setText(NO_GROUPS_TEXT.format(grouping=model.config.get("grouping", "none")))
            self.stack.setCurrentIndex(0)
        else:
            # A multi-layer head has one embedding (one tab) whose per-layer attention maps
            # are chosen in the "Map" box.
            self.tabs.blockSignals(True)
            for p in range(n):
                self.tabs.addTab(f"Group {p + 1}" if n > 1 else "Whole embedding")
            self.tabs.blockSignals(False)
            self.stack.setCurrentIndex(1)
        self._clear_panes("waiting for a pair…" if self.active else None)

    @property
    def active(self) -> bool:
        """Whether this model has anything to show here (groups or per-layer attention)."""
        return self.stack.currentIndex() == 1

    def set_pair(self, images: PairImages | None) -> None:
        """New photographs (the pair view prepares the explanation; :meth:`set_explanation`
        follows)."""
        self.images = images
        if self._own_session:  # in the app the pair view renews the session's pair
            self.session.renew_pair()
        self.rows[0].restart()
        self._data = None
        self.link.reset()
        for pane, image, title in zip(self.panes, (images.query, images.reference) if images else (None, None),
                                      (images.query_title, images.reference_title) if images else ("", "")):
            pane.set_image(image)
            pane.set_title(title)
        self._clear_panes("preparing…" if images is not None and self.active else None)

    def set_explanation(self, explanation) -> None:
        """The pair's explanation is ready: compute attention maps and group tensors."""
        row = self.rows[0]
        row.restart()
        row.explanation = explanation
        if explanation is None or not self.active:
            return
        slices, lock = list(self.model.group_slices), self.model_lock

        def job(cancel):
            with lock:
                cancel.raise_if_cancelled()
                return _group_data(explanation, slices)

        row.run(row.runner, job, self._on_data, self._on_failed)

    # -- results
    def _on_data(self, data: dict) -> None:
        self._data = data
        current = self.kind_combo.currentData()
        self.kind_combo.blockSignals(True)
        self.kind_combo.clear()
        keys = ([GROUP_DECOMPOSITION] if GROUP_DECOMPOSITION in data["attention"][QUERY] else []) + sorted(
            k for k in data["attention"][QUERY] if k != GROUP_DECOMPOSITION)
        for key in keys:
            self.kind_combo.addItem(map_label(key), key)
        if current and self.kind_combo.findData(current) >= 0:
            self.kind_combo.setCurrentIndex(self.kind_combo.findData(current))
        self.kind_combo.blockSignals(False)
        self._on_group()

    def _on_failed(self, text: str) -> None:
        first, details = errors.split_failure(text)
        self._clear_panes("group attention unavailable")
        errors.show_error(self, "Group attention failed", first, details)

    def _on_group(self, *_args) -> None:
        self.link.reset()
        self._build_renderers()
        self._show_attention()
        self._show_share()

    def _show_attention(self, *_args) -> None:
        data, p, kind = self._data, self.group, self.kind_combo.currentData()
        if data is None or kind is None:
            return
        for side, pane in enumerate(self.panes):
            maps = data["attention"][side].get(kind)
            pane.show_message(None)
            pane.show_readout(None)
            if maps is None or len(maps) == 0:
                pane.clear_overlay()
                pane.show_message(f"no '{map_label(kind)}' map")
                continue
            # One map for the whole head (object attention, per-layer attention) is the same
            # on every tab; per-group maps have one entry per group.
            values = np.asarray(maps[p] if len(maps) > 1 else maps[0], dtype=np.float32)
            if kind == GROUP_DECOMPOSITION:
                # The grid's own cells (not an upsampled image), on one scale for every group of
                # the pair (both images): a group that explains little looks faint next to one
                # that explains much. Global max pooling puts a group's share on a few cells, so
                # weak cells fade in early (SPARSE_LUT), and the cells that carry most of the
                # share are drawn at least CELL_ALPHA opaque and outlined (issue 42 item 6).
                levels = (0.0, data["decomposition_max"])
                cells = data["cells"][side][p]
                positive = np.maximum(values, 0.0)
                pane.set_lut(sparse_lut(float(positive[cells].min()) / levels[1]) if cells.any() else SPARSE_LUT)
                pane.set_map(positive, levels)
                pane.set_cells(cells)
                pane.set_colorbar(STATIC_OVERLAY, False, levels, "similarity share per cell")
                continue
            pane.set_lut(STATIC_LUT)
            pane.set_cells(None)
            # Attention levels span the map's own range: attention is often nearly uniform and
            # its structure would vanish on a 0..max scale.
            lo, hi = (float(values.min()), float(values.max())) if values.size else (0.0, 1.0)
            levels = (lo, hi if hi > lo else lo + 1.0)
            pane.set_map(values, levels)
            pane.set_colorbar(STATIC_OVERLAY, False, levels, "attention (own range)")

    def _show_share(self) -> None:
        data, p = self._data, self.group
        if data is None:
            self.share_label.setText("")
            return
        share, total = data["shares"][p], data["similarity"]
        if self.group_count <= 1:
            self.share_label.setText(f"One embedding (no groups), similarity {total:+.4f}. Per-layer and "
                                     "object attention in the Map box; hover for the partial map.")
            return
        part = f" ({100.0 * share / total:.1f}% of it)" if abs(total) > 1e-12 else ""
        self.share_label.setText(
            f"Group {p + 1} of {self.group_count}: contributes {share:+.4f} to the similarity "
            f"{total:+.4f}{part}; its point-to-point terms sum to {data['p2p_sums'][p]:+.4f}. "
            f"{concentration_text([data['cells'][side][p] for side in range(len(SIDE_NAMES))], SIDE_NAMES)}   "
            "Hover a point for its group-wise partial map.")

    # -- group-wise hover
    def _build_renderers(self) -> None:
        """The group's partial maps on the pair view's whole-pair scale (``pair_scale`` of the
        whole tensor): a group's map is coloured by how much of the cosine it carries,
        comparable across groups and with the pair view; built as the pair view builds its
        rows' (``core.explain.hover.side_renderers``)."""
        from dmlviewer.core.explain.hover import pair_scale, side_renderers  # the core's hover path

        row, link = self.rows[0], self.rows[0].link
        row.renderers, link.renderers = {}, {}
        data, e = self._data, self.explanation
        if data is None or e is None:
            return
        row.scale = pair_scale(e.point_to_point)
        row.renderers = dict(enumerate(side_renderers(
            data["tensors"][self.group], (tuple(e.image_shape_query), tuple(e.image_shape_reference)),
            (tuple(e.grid_query), tuple(e.grid_reference)), lut=overlay_lut("jet"), scale=row.scale,
            similarity=float(e.similarity) if e.similarity else None)))
        group = self.group + 1
        link.renderers = row.renderers
        link.colorbar = ("jet", False, (0.0, row.scale), f"group {group}: contribution to the cosine")
        link.readout = lambda p: (None if p.share is None
                                  else f"{100.0 * p.share:+.1f}% of the similarity (group {group})")

    def _describe(self, side: int | None, x: float, y: float, _point, pinned: bool) -> str | None:
        if side is None:
            return None  # the status line keeps the last point
        return (f"group {self.group + 1}, {SIDE_NAMES[side]} ({x:.0f}, {y:.0f})"
                + ("   [pinned, Esc to release]" if pinned else ""))

    def unpin(self) -> None:
        self.link.unpin()

    def _clear_panes(self, message: str | None) -> None:
        self.rows[0].renderers, self.rows[0].link.renderers = {}, {}
        self.share_label.setText("")
        for pane in self.panes:
            pane.clear_overlay()
            pane.show_message(message)

    def shutdown(self) -> None:
        """Stop the group data's runner and following the session (it may outlive the tabs)."""
        self.rows[0].shutdown()
        self._links.close()


def _group_data(explanation, slices: list[slice]) -> dict:
    """Attention maps of both images, the P group tensors, each group's share and, per image,
    the cells that carry most of each group's share (``cells[side][p]``) (worker).

    A group's share of the cosine is its term ``Eq_p . Er_p / (|Eq||Er|)``, the dot product of
    the group's slices of the two L2-normalized embeddings (the terms sum over groups to the
    similarity, bias included); ``p2p_sums`` is the part of it its point-to-point tensor holds.
    """
    from dmlviewer.core.explain.groups import concentration, group_maps

    tensors = [explanation.group_point_to_point(p) for p in range(len(slices))]
    eq, er = explanation.embedding("query"), explanation.embedding("reference")
    attention = [dict(explanation.attention_maps(side)) for side in SIDE_NAMES]
    peak = 0.0
    cells: list[list[np.ndarray]] = [[], []]
    for side, name in enumerate(SIDE_NAMES):
        if len(slices) > 1:
            grid_maps = group_maps(explanation, name).astype(np.float32)
            peak = max(peak, float(grid_maps.max()))
            attention[side][GROUP_DECOMPOSITION] = grid_maps  # the grid itself, stretched over the image
            cells[side] = [concentration(m) for m in grid_maps]
    return {
        "attention": attention,
        "decomposition_max": peak if peak > 0 else 1.0,
        "cells": cells,
        "tensors": tensors,
        "shares": [float(np.dot(eq[sl], er[sl])) for sl in slices],
        "p2p_sums": [float(t.sum(dtype=np.float64)) for t in tensors],
        "similarity": float(explanation.similarity),
    }
