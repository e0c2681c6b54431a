"""The pair view's toolbar and its binding to the display options (issue 30 item 2, issue 39
item 2): the controls (map, sign, scale, colours, opacity, resolution, matches, region, row B,
shared scale, swap, fit) in a wrapping row, each control writing its field of
:class:`~dmlviewer.core.display.DisplayOptions` and following the field when it is set
elsewhere (the session, a notebook). What a change redraws is the view's business
(:meth:`DisplayToolbar.follow` says whether it should).
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QCheckBox, QComboBox, QHBoxLayout, QLabel, QSlider, QSpinBox, QToolButton, QWidget

from dmlviewer.core.display import DisplayOptions
from dmlviewer.core.explain.methods import label as method_label, methods
from dmlviewer.gui.common.widgets import FlowLayout
from dmlviewer.gui.pair.colormaps import SEQUENTIAL

log = logging.getLogger(__name__)

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



class DisplayToolbar(QWidget):
    """The pair view's controls, bound both ways to ``display``; ``model()`` gives the open
    model A (its input sizes fill the Resolution box)."""

    #: field -> its control (``input_size``: the Resolution box, None there = the model's own size)
    CONTROLS = ("method", "sign", "scale", "colormap", "row_b", "input_size", "opacity", "shared_scale",
                "matches", "match_count")

    def __init__(self, display: DisplayOptions, model: Callable[[], Any], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.display = display
        self.model = model
        self._following = False  # True while a control is set to its option (it writes nothing back)
        self._quiet = False  # True while an option is set to follow its control (nothing redraws)
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
        self.compare_view_tip = ("The second row: model B's own maps, or model A's minus model B's on one "
                                 "symmetric scale (diverging colours: red where A's map is stronger, "
                                 "blue where B's is)")
        self.compare_view_combo.setToolTip(self.compare_view_tip)
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
        self.bar = bar
        self.setLayout(bar)

        for name in self.CONTROLS:
            self._show_field(name)
        # The controls write the display options; what they show follows the options (below).
        for name, combo in (("method", self.method_combo), ("sign", self.sign_combo), ("scale", self.scale_combo),
                            ("colormap", self.cmap_combo), ("row_b", self.compare_view_combo)):
            combo.currentIndexChanged.connect(lambda _i, n=name, c=combo: self._write(n, c.currentData()))
        self.size_combo.currentIndexChanged.connect(lambda _i: self._write("input_size", self.chosen_size()))
        self.shared_scale_box.toggled.connect(lambda on: self._write("shared_scale", on))
        self.opacity.valueChanged.connect(lambda v: self._write("opacity", v / 100.0))
        self.matches_box.toggled.connect(lambda on: self._write("matches", on))
        self.matches_n.valueChanged.connect(lambda n: self._write("match_count", n))

    # -- the display options (core.display): the toolbar writes them and follows them
    def _write(self, name: str, value: Any) -> None:
        """A control changed: set its display option (the view redraws when it hears the option's event)."""
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
            shown = self.chosen_size() if name == "input_size" else combo.currentData()
            log.warning("%s %r is not offered here; it stays %r", name, value, shown)
            self._quiet = True
            try:
                setattr(self.display, name, shown)
            finally:
                self._quiet = False
        return ok

    def follow(self, name: str) -> bool:
        """Display option ``name`` changed (from a control, the session or a notebook): show it on
        its control; True when the view should redraw what it changes (False while the option
        only follows its control, or when it was put back to what the control offers)."""
        quiet = self._quiet
        return self._show_field(name) and not quiet

    def _own_size(self) -> int | None:
        """The model's own input size (None: no model, or a two-branch model)."""
        model = self.model()
        if model is None or getattr(model, "input_shapes", None) is not None:
            return None
        return int(model.preprocess.size)

    def chosen_size(self) -> int | None:
        """The Resolution box's choice as the display option holds it (None: the model's own)."""
        size = self.size_combo.currentData()
        return None if size is None or size == self._own_size() else int(size)

    @property
    def input_size(self) -> int | None:
        """The chosen network input size (None: no model yet)."""
        return self.size_combo.currentData()

    def set_input_size(self, size: int) -> None:
        """Choose input size ``size`` (one of the Resolution entries); re-prepares the pair."""
        if self.size_combo.findData(int(size)) < 0:
            raise ValueError(f"{size} px is not a resolution choice here")
        self.display.input_size = None if int(size) == self._own_size() else int(size)

    def fill_sizes(self, images: Any, keep: bool) -> None:
        """Resolution entries for the model and ``images`` (a ``PairImages`` or None); the
        current size stays chosen when ``keep`` and it is still offered, otherwise the model's
        own size."""
        from dmlviewer.core.models.resolution import input_sizes

        current = self.size_combo.currentData() if keep else None
        if keep and self.display.input_size is not None:
            current = self.display.input_size
        shape = None
        if images is not None:
            shape = tuple(max(a, b) for a, b in zip(images.query.shape[:2], images.reference.shape[:2]))
        model = self.model()
        self.size_combo.blockSignals(True)
        self.size_combo.clear()
        shapes = getattr(model, "input_shapes", None)
        if shapes is not None:  # a two-branch model: each branch at its own input shape (issue 25)
            self.size_combo.addItem(" / ".join("×".join(map(str, shapes[s])) for s in ("query", "reference")), None)
        elif model is not None:
            for label, size in input_sizes(model, shape):
                self.size_combo.addItem(label, size)
            index = self.size_combo.findData(current) if current is not None else -1
            if index < 0:
                index = self.size_combo.findData(int(model.preprocess.size))
            self.size_combo.setCurrentIndex(max(0, index))
        self.size_combo.setEnabled(self.size_combo.count() > 1)
        self.size_combo.blockSignals(False)
        self._quiet = True  # the option follows the box here; the caller prepares the pair
        try:
            self.display.input_size = self.chosen_size()
        finally:
            self._quiet = False
