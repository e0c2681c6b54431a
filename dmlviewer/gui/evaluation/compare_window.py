"""Tools > Compare Models: model diagnosis of the two open models (issue 24 item 3).

The window runs :func:`dmlviewer.core.explain.compare.compare_models` on the open dataset with
model A (the session's ``"primary"`` slot) and model B (its ``"compare"`` slot, File > Compare
With Model) in the main window's :class:`~dmlviewer.gui.jobs.runner.JobRunner`, each step under the
window's model lock (the pair view's preparations use the same models). It shows

- the **diagnosis table** of seed 000 Sec. 5.2 / Tables 2-3: per model, Recall@1 of the train
  and test splits, best localization accuracy of the Decomposition and Decomposition+Bias maps
  on the training split (where it has boxes) and the test MAP@R (split ``both``, the default;
  another split fills only its own columns), with which model each column ranks first;
- the **pairs** ranked by disagreement (``1 -`` Spearman of the overall maps), with both
  similarities and the agreement measures;
- the **retrieval disagreements**: the queries where exactly one model's nearest neighbour is
  of the query's class (``retrieval_disagreements``); a row opens the query with the wrong
  model's neighbour, a click in a model's neighbour column with that model's;
- **what changed** (issue 41, :mod:`.changes_panel`, its own job): the change table of A and B
  on the split (test for ``both``) and the queries B broke and fixed;
- the **sanity-check curve**: :func:`dmlviewer.core.explain.randomization.randomization_check`
  on model A or B (its own job), the mean Spearman of each method's overall maps with the
  trained model's per randomized depth (depth 0: the trained model, 1 by definition), drawn
  with the tool windows' plot style (``widgets.style_plot``, ``series_pen``, ``add_legend``).

Clicking a row of either list opens its pair in the pair view. A result arrives only while the
session still ``accepts`` the stamps of the slots taken when the job was queued: a result of a
model (or dataset) replaced meanwhile is dropped.
"""

from __future__ import annotations

import html
import logging
from pathlib import Path
from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QAbstractItemView, QComboBox, QFileDialog, QGroupBox, QHBoxLayout, QHeaderView,
                               QLabel, QPushButton, QSizePolicy, QSpinBox, QSplitter, QTableWidget,
                               QTableWidgetItem, QTabWidget, QVBoxLayout, QWidget)

from dmlviewer.core.explain import methods as registry
from dmlviewer.gui.common.widgets import LegendStrip, method_color, series_pen, style_plot
from dmlviewer.gui.evaluation.changes_panel import ChangesPanel
from dmlviewer.gui.evaluation.two_models import locked_steps, open_models, queue_two_model_job

log = logging.getLogger(__name__)

#: (column title, key of a pair row of ``compare_models``, format)
COLUMNS = [
    ("Rank", "rank", "{}"),
    ("Query", "query_path", "{}"),
    ("Reference", "reference_path", "{}"),
    ("Similarity A", None, "{:+.4f}"),
    ("Similarity B", None, "{:+.4f}"),
    ("Map Spearman", "overall_map_spearman", "{:+.3f}"),
    ("IoU", "iou", "{:.3f}"),
    ("Peak distance", "peak_distance", "{:.3f}"),
    ("Point-to-point Spearman", "point_to_point_spearman", "{:+.3f}"),
    ("Right neighbour A / B", None, "{}"),
]

#: (column title, split, figure) of the diagnosis table; figure: a key of a model's figures or
#: ``localization/<method>`` (its best accuracy over thresholds)
DIAGNOSIS_COLUMNS = [
    ("Recall@1 train", "train", "recall@1"),
    ("Recall@1 test", "test", "recall@1"),
    *((f"Localization train ({registry.label(m)})", "train", f"localization/{m}")
      for m in registry.methods("diagnosis")),
    ("MAP@R test", "test", "map@r"),
]

#: columns of the retrieval disagreements: (title, what)
RETRIEVAL_COLUMNS = [("Query", "path"), ("Split", "split"), ("Nearest A", 0), ("A right", "right0"),
                     ("Nearest B", 1), ("B right", "right1")]


def _cell(value: Any, fmt: str) -> str:
    if value is None:
        return "–"
    try:
        return fmt.format(value)
    except (TypeError, ValueError):
        return str(value)


def diagnosis_figures(result: dict) -> list[tuple[str, dict[str, float | None]]]:
    """``[(model name, {column title: value or None})]`` of a ``compare_models`` result, for
    :data:`DIAGNOSIS_COLUMNS` (a split the result does not hold gives ``None``)."""
    rows = []
    for model in result.get("models") or []:
        by_split = model.get("by_split") or {str(result.get("split")): model}
        values: dict[str, float | None] = {}
        for title, split, figure in DIAGNOSIS_COLUMNS:
            figures = by_split.get(split) or {}
            if figure.startswith("localization/"):
                method = figure.split("/", 1)[1]
                value = ((figures.get("localization") or {}).get(method) or {}).get("best_accuracy")
            else:
                value = figures.get(figure)
            values[title] = None if value is None else float(value)
        rows.append((str(model.get("name")), values))
    return rows


def leaders(rows: list[tuple[str, dict[str, float | None]]]) -> dict[str, str | None]:
    """Per diagnosis column, the name of the model with the larger value (``"tie"`` for equal
    values, ``None`` where a model has no value)."""
    out: dict[str, str | None] = {}
    for title, _, _ in DIAGNOSIS_COLUMNS:
        values = [(values[title], name) for name, values in rows]
        if len(values) < 2 or any(v is None for v, _ in values):
            out[title] = None
        elif values[0][0] == values[1][0]:
            out[title] = "tie"
        else:
            out[title] = max(values)[1]
    return out


#: what core.explain.randomization appends to a two-branch model's depth labels
BOTH_BRANCHES = " (both branches)"
#: The line style of each model's sanity-check curves (A solid, B dashed).
MODEL_STYLES = {"A": Qt.SolidLine, "B": Qt.DashLine}


def tick_label(depth: dict) -> str:
    """A randomized depth on the plot's axis: "+ stage 4", as the README's table names it
    (``randomization.readable_name``; a merged step by its first part, a two-branch model's
    without "(both branches)", which the caption says once)."""
    from dmlviewer.core.explain.randomization import readable_name

    label = str(depth.get("label", "")).removesuffix(BOTH_BRANCHES).split(" .. ")[0]
    return f"+ {readable_name(label)}"


class CompareWindow(QWidget):
    """See the module docstring. ``window``: the main window (its ``session``, ``runner``,
    ``model_lock``, ``device``, ``set_pair``)."""

    pair_chosen = Signal(int, int)  # (query, reference) dataset indices

    def __init__(self, window, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Compare Models")
        self.window_ = window
        self.job = None
        self.check_job = None
        self._stamps = None
        self._check_stamps = None
        self.result: dict | None = None
        self.check_result: dict | None = None  # the latest check (of model A or B)
        self.check_results: dict[str, tuple] = {}  # "A"/"B" -> (randomization_check result, the slot's stamp)
        self._idle = True  # no comparison asked for yet: the status line says what is missing
        self._check_letters: tuple[str, ...] = ()
        self._result_names: dict[str, str] = {}  # the models' names when the comparison was shown
        self.models_label = QLabel()
        self.models_label.setWordWrap(True)
        self.split_combo = QComboBox()
        for split in ("both", "test", "train"):
            self.split_combo.addItem(split, split)
        self.split_combo.setToolTip("both: the diagnosis (training-set localization beside test Recall@1); "
                                    "pairs are drawn half from each split")
        self.pairs_spin = QSpinBox()
        self.pairs_spin.setRange(1, 10000)
        self.pairs_spin.setValue(20)
        self.pairs_spin.setToolTip("Same-class pairs of the split, drawn with a fixed seed")
        self.run_button = QPushButton("Compare")
        self.run_button.clicked.connect(self.start)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self.cancel)
        self.save_button = QPushButton("Save…")
        self.save_button.setToolTip("Save the comparison: JSON as 'dmlviewer compare --json' prints it, or the "
                                    "tables as CSV")
        self.save_button.setEnabled(False)
        self.save_button.clicked.connect(self._ask_save_comparison)
        controls = QHBoxLayout()
        for widget in (QLabel("Split"), self.split_combo, QLabel("Pairs"), self.pairs_spin, self.run_button,
                       self.cancel_button, self.save_button):
            controls.addWidget(widget)
        controls.addStretch(1)
        self.status = QLabel("Open two models (File ▸ Compare With Model) and a dataset, then Compare.")
        self.status.setWordWrap(True)

        self.diagnosis_table = QTableWidget(0, 1 + len(DIAGNOSIS_COLUMNS))
        self.diagnosis_table.setHorizontalHeaderLabels(["Model"] + [c[0] for c in DIAGNOSIS_COLUMNS])
        self.diagnosis_table.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.diagnosis_table.setSelectionMode(QAbstractItemView.NoSelection)
        self.diagnosis_table.verticalHeader().hide()
        header = self.diagnosis_table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeToContents)
        header.setSectionResizeMode(0, QHeaderView.Stretch)
        self.diagnosis_table.setToolTip("Seed 000 Sec. 5.2: a model whose training-set maps lie less on the "
                                        "object (lower localization) tends to generalize worse (lower test "
                                        "Recall@1). Bold: the larger value of each column.")
        self.diagnosis_table.setVerticalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        self.diagnosis_table.setSizePolicy(QSizePolicy.Expanding, QSizePolicy.Fixed)
        self.diagnosis_note = QLabel()
        self.diagnosis_note.setWordWrap(True)
        self._fit_diagnosis_height(2)

        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels([c[0] for c in COLUMNS])
        self._list_style(self.table)
        self.table.setToolTip("The pairs, most disagreeing first (1 − Spearman of the two models' overall maps); "
                              "click a row to open the pair")
        self.table.cellClicked.connect(self._on_row)
        self.retrieval_table = QTableWidget(0, len(RETRIEVAL_COLUMNS))
        self.retrieval_table.setHorizontalHeaderLabels([c[0] for c in RETRIEVAL_COLUMNS])
        self._list_style(self.retrieval_table)
        self.retrieval_table.setToolTip("Queries where exactly one model's nearest neighbour is of the query's class; "
                                        "click a row to open the query with the wrong model's neighbour, a "
                                        "'Nearest' cell to open that model's")
        self.retrieval_table.cellClicked.connect(self._on_retrieval_row)
        self.lists = QTabWidget()
        self.lists.addTab(self.table, "Pairs by disagreement")
        self.lists.addTab(self.retrieval_table, "Retrieval disagreements")
        self.changes = ChangesPanel(window, self.split_combo.currentData)  # issue 41
        self.changes.pair_chosen.connect(window.set_pair)  # with model B's own reference
        self.lists.addTab(self.changes, "What changed")

        # the sanity check (cascading randomization)
        self.check_model_combo = QComboBox()
        self.check_model_combo.addItem("model A", "primary")
        self.check_model_combo.addItem("model B", "compare")
        self.check_model_combo.addItem("models A and B", "both")
        self.check_model_combo.setToolTip("Whose layers are re-initialized; the curves of each model's latest "
                                          "check are shown together (A solid, B dashed)")
        self.check_model_combo.currentIndexChanged.connect(self.refresh)
        self.check_pairs_spin = QSpinBox()
        self.check_pairs_spin.setRange(1, 1000)
        self.check_pairs_spin.setValue(8)
        self.check_pairs_spin.setToolTip("Same-class pairs of the split (above) whose maps are compared")
        self.check_depths_spin = QSpinBox()
        self.check_depths_spin.setRange(1, 50)
        self.check_depths_spin.setValue(5)
        self.check_depths_spin.setToolTip("At most this many randomized depths (the head first; deeper backbones "
                                          "are re-initialized a group of layers at a time)")
        self.check_button = QPushButton("Run check")
        self.check_button.setToolTip("Cascading randomization (Adebayo et al. 2018): re-initialize the layers from "
                                     "the top down; a method that explains the model must lose agreement")
        self.check_button.clicked.connect(self.start_check)
        self.check_cancel_button = QPushButton("Cancel")
        self.check_cancel_button.setEnabled(False)
        self.check_cancel_button.clicked.connect(self.cancel_check)
        self.check_save_button = QPushButton("Save…")
        self.check_save_button.setToolTip("Save the sanity check: JSON as 'dmlviewer compare --randomize --json' "
                                          "prints it, or its curves as CSV")
        self.check_save_button.setEnabled(False)
        self.check_save_button.clicked.connect(self._ask_save_check)
        check_controls = QHBoxLayout()
        for widget in (self.check_model_combo, QLabel("Pairs"), self.check_pairs_spin, QLabel("Depths"),
                       self.check_depths_spin, self.check_button, self.check_cancel_button, self.check_save_button):
            check_controls.addWidget(widget)
        check_controls.addStretch(1)
        self.check_status = QLabel("Sanity check: does each method lose agreement as layers are randomized?")
        self.check_status.setWordWrap(True)
        self.check_plot = pg.PlotWidget(title="Agreement with the trained model's maps")
        style_plot(self.check_plot)
        self.check_plot.setLabel("left", "mean Spearman")
        self.check_plot.setLabel("bottom", "layers re-initialized (top down)")
        self.check_plot.setYRange(-0.2, 1.05)
        self.check_plot.getAxis("bottom").setTicks([[(0, "trained")]])  # the depths come with a check
        self.check_plot.setXRange(-0.2, 4.2)
        self.check_plot.setMinimumWidth(300)
        self.check_legend_strip = LegendStrip(columns=3)  # beside the plot: it never hides a curve
        self.check_legend = self.check_legend_strip.legend
        check_box = QGroupBox("Sanity check")
        check_layout = QVBoxLayout(check_box)
        check_layout.addLayout(check_controls)
        check_layout.addWidget(self.check_status)
        check_layout.addWidget(self.check_plot, 1)
        check_layout.addWidget(self.check_legend_strip)

        splitter = QSplitter(Qt.Horizontal)
        splitter.addWidget(self.lists)
        splitter.addWidget(check_box)
        splitter.setStretchFactor(0, 3)
        splitter.setStretchFactor(1, 2)
        self.splitter = splitter
        layout = QVBoxLayout(self)
        layout.addWidget(self.models_label)
        layout.addLayout(controls)
        layout.addWidget(self.status)
        layout.addWidget(self.diagnosis_table)
        layout.addWidget(self.diagnosis_note)
        layout.addWidget(splitter, 1)
        self.pair_chosen.connect(window.set_pair)
        self.resize(1100, 640)
        self.refresh()

    @staticmethod
    def _list_style(table: QTableWidget) -> None:
        table.setEditTriggers(QAbstractItemView.NoEditTriggers)
        table.setSelectionBehavior(QAbstractItemView.SelectRows)
        table.setSelectionMode(QAbstractItemView.SingleSelection)
        table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeToContents)
        table.verticalHeader().hide()

    def _fit_diagnosis_height(self, rows: int) -> None:
        table = self.diagnosis_table
        height = table.horizontalHeader().sizeHint().height() + 2 * table.frameWidth()
        shown = sum(table.rowHeight(r) for r in range(table.rowCount()))
        height += shown or rows * table.verticalHeader().defaultSectionSize()
        table.setFixedHeight(height + 2)

    def refresh(self) -> None:
        """Say which models are open (and whether a comparison or a check can run)."""
        session = self.window_.session
        a, b = session.slot("primary"), session.slot("compare")
        names = [self.window_.labels.display_name(s) if slot is not None else "none"
                 for s, slot in (("primary", a), ("compare", b))]
        self.models_label.setText(f"<b>A</b>: {html.escape(names[0])}&emsp;|&emsp;<b>B</b>: {html.escape(names[1])}"
                                  f"&emsp;|&emsp;dataset: "
                                  f"{html.escape(Path(session.dataset_path).name) if session.dataset_path else 'none'}")
        ready = a is not None and b is not None and session.dataset is not None
        self.run_button.setEnabled(ready and (self.job is None or self.job.ended))
        if self._idle:  # what to do next, from what is open (never "Open two models" when two are)
            missing = [what for what, there in (("model A (File ▸ Open)", a is not None),
                                                ("model B (File ▸ Compare With Model)", b is not None),
                                                ("a dataset", session.dataset is not None)) if not there]
            self.status.setText("Models A and B and a dataset are open: choose the split and the number of pairs, "
                                "then Compare." if not missing else f"Open {' and '.join(missing)}, then Compare.")
        wanted = self.check_model_combo.currentData()
        checked = [session.slot(s) for s in (("primary", "compare") if wanted == "both" else (wanted,))]
        self.check_button.setEnabled(all(c is not None for c in checked) and session.dataset is not None
                                     and (self.check_job is None or self.check_job.ended))
        stale = [letter for letter, (_, stamp) in self.check_results.items() if not session.accepts(stamp)]
        for letter in stale:  # a check of a model (or dataset) no longer open is not shown
            del self.check_results[letter]
        if stale:
            self._draw_checks()
        self.save_button.setEnabled(self.result is not None)
        self.check_save_button.setEnabled(bool(self.check_results))
        self.changes.refresh()

    # -- the comparison job
    def start(self) -> None:
        """Queue the comparison of the open models on the chosen split."""
        from dmlviewer.core.explain.compare import compare_models

        window, session = self.window_, self.window_.session
        models = open_models(session)
        if models is None:
            self.refresh()
            return
        model_a, model_b, dataset, device = models[0].model, models[1].model, session.dataset, window.device
        split, pairs = self.split_combo.currentData(), self.pairs_spin.value()
        name = (f"Compare {window.labels.job_name('primary')} and {window.labels.job_name('compare')} on {pairs} "
                f"{split} pairs of {Path(session.dataset_path).name}")
        self._idle = False
        self.job, self._stamps = queue_two_model_job(
            window, name, lambda cancel: compare_models(model_a, model_b, dataset, split, pairs, device, cancel=cancel),
            **self._handlers())
        self.status.setText("Comparing… (see View ▸ Jobs)")
        self.cancel_button.setEnabled(True)
        self.refresh()

    def cancel(self) -> None:
        if self.job is not None and not self.job.ended:
            self.window_.runner.cancel(self.job)

    # -- the sanity-check job
    def start_check(self) -> None:
        """Queue the cascading randomization check of the chosen model (or of both, one after
        the other) on the chosen split."""
        from dmlviewer.core.explain.randomization import randomization_check

        window, session = self.window_, self.window_.session
        wanted = self.check_model_combo.currentData()
        slot_names = ("primary", "compare") if wanted == "both" else (wanted,)
        slots = [session.slot(name) for name in slot_names]
        if any(slot is None for slot in slots) or session.dataset is None:
            self.refresh()
            return
        models = [(("A" if name == "primary" else "B"), slot.model) for name, slot in zip(slot_names, slots)]
        dataset, device, lock = session.dataset, window.device, window.model_lock
        split, pairs = self.split_combo.currentData(), self.check_pairs_spin.value()
        depths = self.check_depths_spin.value()

        def factory(cancel):
            from dmlviewer.core.progress import Progress

            results = {}
            for letter, model in models:  # each check's "done" event holds its result: one "done" for all
                for event in locked_steps(randomization_check(model, dataset, pairs, split=split, device=device,
                                                              max_steps=depths, cancel=cancel), lock):
                    if event.kind == "done":
                        results[letter] = event.data.get("result")
                    else:
                        yield event
            yield Progress("done", 1, 1, "randomization check done", data={"result": results})

        self._check_stamps = tuple(session.stamp(name) for name in slot_names)
        self._check_letters = tuple(letter for letter, _ in models)
        self._check_model = " and ".join(self._check_letters)
        who = " and ".join(window.labels.job_name(name) for name in slot_names)
        self.check_job = window.runner.submit(f"Randomization check of {who} on {pairs} {split} pairs", factory,
                                              **self._handlers())
        self.check_status.setText("Checking… (see View ▸ Jobs)")
        self.check_cancel_button.setEnabled(True)
        self.refresh()

    def cancel_check(self) -> None:
        if self.check_job is not None and not self.check_job.ended:
            self.window_.runner.cancel(self.check_job)

    # -- job events (both jobs; an earlier run's are ignored)
    def _handlers(self) -> dict:
        return dict(progress=self._on_progress, finished=self._on_finished, failed=self._on_failed,
                    cancelled=self._on_cancelled)

    def _label_of(self, job) -> QLabel | None:
        return self.status if job is self.job else self.check_status if job is self.check_job else None

    def _on_progress(self, job, event) -> None:
        label = self._label_of(job)
        if label is not None and getattr(event, "total", 0):
            label.setText(f"{event.message or 'working'}: {event.current}/{event.total}")

    def _ended(self, job) -> bool:
        if job is self.job:
            self.cancel_button.setEnabled(False)
        elif job is self.check_job:
            self.check_cancel_button.setEnabled(False)
        else:
            return False
        self.refresh()
        return True

    def _on_finished(self, job, result) -> None:
        if not self._ended(job):
            return
        session = self.window_.session
        stamps = self._stamps if job is self.job else self._check_stamps
        if not all(session.accepts(stamp) for stamp in stamps or (None,)):
            log.info("dropped the result of %s: a model or the dataset was replaced meanwhile", job.name)
            self._label_of(job).setText("The models or the dataset changed meanwhile: the result was dropped. "
                                        "Run it again.")
            return
        if job is self.job:
            self.show_result(result)
        else:
            for letter, stamp in zip(self._check_letters, self._check_stamps):
                self.show_check(result[letter], letter, stamp)

    def _on_failed(self, job, text: str) -> None:
        if self._ended(job):
            from dmlviewer.gui.common import errors

            first, _details = errors.split_failure(text)
            what = "comparison" if job is self.job else "sanity check"
            self._label_of(job).setText(f"The {what} failed: {first}")  # the dialog is the window's

    def _on_cancelled(self, job) -> None:
        if self._ended(job):
            self._label_of(job).setText("Cancelled.")

    # -- the results
    def show_result(self, result: dict) -> None:
        """Fill the diagnosis table and both lists from a ``compare_models`` result."""
        self.result = result
        self._result_names = self._names()
        rows = result.get("pairs") or []
        agreement = result.get("agreement") or {}
        mean = (agreement.get("overall_map_spearman") or {}).get("mean")
        split = result.get("split")
        where = "both splits" if split == "both" else f"the {split} split"
        self.status.setText(f"{len(rows)} pairs of {where}, most disagreeing first; "
                            f"mean Spearman of the overall maps {_cell(mean, '{:+.3f}')}. Click a row to open it.")
        self._show_diagnosis(result)
        self.table.setRowCount(len(rows))
        for r, row in enumerate(rows):
            sims = row.get("similarity") or [None, None]
            right = " / ".join("–" if v is None else ("yes" if v else "no")
                               for v in row.get("nearest_same_class") or [None, None])
            values = {"Similarity A": sims[0], "Similarity B": sims[1], "Right neighbour A / B": right}
            for c, (title, key, fmt) in enumerate(COLUMNS):
                value = row.get(key) if key else values[title]
                if key in ("query_path", "reference_path") and value:
                    value = Path(str(value)).name
                item = QTableWidgetItem(_cell(value, fmt))
                item.setData(Qt.UserRole, (int(row["query"]), int(row["reference"])))
                if key in ("query_path", "reference_path"):
                    item.setToolTip(str(row.get(key)))
                self.table.setItem(r, c, item)
        self._show_retrieval(result.get("retrieval_disagreements") or [])
        self.save_button.setEnabled(True)

    def _show_diagnosis(self, result: dict) -> None:
        rows = diagnosis_figures(result)
        first = leaders(rows)
        table = self.diagnosis_table
        table.setRowCount(len(rows))
        for r, (name, values) in enumerate(rows):
            slot = ("primary", "compare")[r] if r < 2 else None
            table.setItem(r, 0, QTableWidgetItem(f"{name}: {self.window_.labels.display_name(slot)}" if slot else name))
            for c, (title, _, _) in enumerate(DIAGNOSIS_COLUMNS, start=1):
                item = QTableWidgetItem(_cell(values[title], "{:.3f}"))
                item.setTextAlignment(Qt.AlignRight | Qt.AlignVCenter)
                if first.get(title) == name:
                    font = item.font()
                    font.setBold(True)
                    item.setFont(font)
                table.setItem(r, c, item)
        self._fit_diagnosis_height(len(rows))
        ranks = {title: first.get(title) for title, _, _ in DIAGNOSIS_COLUMNS}
        test, loc = ranks["Recall@1 test"], ranks["Localization train (Decomposition)"]
        if test in (None, "tie") or loc in (None, "tie"):
            self.diagnosis_note.setText("The diagnosis needs both splits (split both) and boxes on the training split."
                                        if test is None or loc is None else
                                        "A tie: the diagnosis cannot rank the two models.")
        else:
            verdict = "agrees with" if test == loc else "does not agree with"
            self.diagnosis_note.setText(f"Training-set localization (Decomposition) ranks model {loc} first; test "
                                        f"Recall@1 ranks model {test} first: the diagnosis {verdict} the test set.")

    def _show_retrieval(self, entries: list[dict]) -> None:
        table = self.retrieval_table
        paths = getattr(self.window_.session.dataset, "paths", None)
        table.setRowCount(len(entries))
        for r, entry in enumerate(entries):
            flags, nearest = entry["nearest_same_class"], entry["nearest"]
            wrong = nearest[0] if not flags[0] else nearest[1]
            for c, (_, what) in enumerate(RETRIEVAL_COLUMNS):
                target = (entry["index"], wrong)
                if what == "path":
                    item = QTableWidgetItem(Path(str(entry["path"])).name)
                    item.setToolTip(str(entry["path"]))
                elif what == "split":
                    item = QTableWidgetItem(str(entry.get("split")))
                elif what in (0, 1):
                    path = paths[nearest[what]] if paths is not None else nearest[what]
                    item = QTableWidgetItem(Path(str(path)).name)
                    item.setToolTip(str(path))
                    target = (entry["index"], nearest[what])
                else:
                    item = QTableWidgetItem("yes" if flags[int(what[-1])] else "no")
                item.setData(Qt.UserRole, (int(target[0]), int(target[1])))
                table.setItem(r, c, item)
        self.lists.setTabText(1, f"Retrieval disagreements ({len(entries)})")

    def show_check(self, result: dict, model: str = "A", stamp=None) -> None:
        """Keep ``result`` (a ``randomization_check`` result) as model ``model``'s ("A" or "B")
        check and draw every kept check: per method the mean Spearman per depth, depth 0 the
        trained model (1)."""
        self.check_result = result
        self.check_results[model] = (result, stamp if stamp is not None else
                                     self.window_.session.stamp("primary" if model == "A" else "compare"))
        self._draw_checks()
        depths = result.get("depths") or []
        both = bool(depths) and all(str(d["label"]).endswith(BOTH_BRANCHES) for d in depths)
        labels = "; ".join(f"{d['depth']}: {d.get('name') or d['label']} "
                           f"({str(d['label']).removesuffix(BOTH_BRANCHES) if both else d['label']})" for d in depths)
        shown = " and ".join(sorted(self.check_results))
        # short enough for two lines in a narrow window; the layers of each depth in the tooltip
        self.check_status.setText(f"Model {shown}" + (" (A solid, B dashed)" if len(self.check_results) > 1 else "")
                                  + f", {result.get('num_pairs')} pairs, {len(depths)} depths"
                                  + (" (both branches each)" if both else "")
                                  + ". A method that explains the model falls towards 0.")
        self.check_status.setToolTip(f"Layers re-initialized at each depth of model {model}: {labels}")
        self.check_save_button.setEnabled(True)

    def _draw_checks(self) -> None:
        """Draw the kept checks (A solid, B dashed; one colour per method), the legend beside."""
        from dmlviewer.gui.evaluation.faithfulness_view import method_label

        plot = self.check_plot
        plot.clear()
        entries: dict[str, Any] = {}
        xs_all, ticks, lowest = [0], {0: "trained"}, []
        for letter in sorted(self.check_results):
            result = self.check_results[letter][0]
            depths = result.get("depths") or []
            xs = [0] + [int(d["depth"]) for d in depths]
            xs_all += xs
            for d in depths:
                ticks.setdefault(int(d["depth"]), tick_label(d))
            for k, method in enumerate(result.get("methods") or []):
                ys = [1.0] + [float(d["methods"][method]["overall_map_spearman"]["mean"]) for d in depths]
                lowest += [y for y in ys if y == y]  # NaN (no agreement measurable) left out
                color = method_color(method, k)
                pen = series_pen(k, color=color, style=MODEL_STYLES.get(letter, Qt.SolidLine))
                curve = plot.plot(xs, ys, pen=pen, symbol="o" if letter == "A" else "t", symbolSize=6,
                                  symbolBrush=pen.color(), name=method_label(method))
                entries.setdefault(method_label(method), curve)
        items = list(entries.items())
        if len(self.check_results) > 1:  # which line style is which model
            for letter in sorted(self.check_results):
                key = pg.PlotDataItem(pen=series_pen(0, color="#e0e0e0", style=MODEL_STYLES[letter]))
                items.append((f"model {letter}", key))
        self.check_legend_strip.set_items([(curve, name) for name, curve in items])
        plot.getAxis("bottom").setTicks([sorted(ticks.items())])
        plot.setXRange(-0.2, max(xs_all) + 0.2)
        plot.setYRange(min([-0.2] + [v - 0.05 for v in lowest]), 1.05)  # every point in sight

    # -- saving (issue 31 item 10)
    def _names(self) -> dict[str, str]:
        return {"A": self.window_.labels.display_name("primary"), "B": self.window_.labels.display_name("compare")}

    def save_comparison(self, path: str | Path) -> list[Path]:
        """Write the comparison shown: ``.csv``: the pairs table at ``path``, the diagnosis and the
        retrieval disagreements beside it (``NAME-diagnosis.csv``, ``NAME-retrieval.csv``); else
        JSON as ``compare --json`` prints it. Returns the files written."""
        from dmlviewer.core.explain.comparison_files import (comparison_document, comparison_tables, csv_text,
                                                             json_text, write_files)

        if self.result is None:
            return []
        names = self._result_names or self._names()
        if str(path).lower().endswith(".csv"):
            tables = comparison_tables(self.result, names)
            return write_files(path, {"": csv_text(tables["pairs"]), "-diagnosis": csv_text(tables["diagnosis"]),
                                      "-retrieval": csv_text(tables["retrieval"])})
        return write_files(path, {"": json_text(comparison_document(self.result, names))})

    def save_check(self, path: str | Path) -> list[Path]:
        """Write the sanity checks shown: ``.csv``: one row per model, depth and method; else JSON
        as ``compare --randomize --json`` prints it (two models: ``{"checks": [A, B]}``)."""
        from dmlviewer.core.explain.comparison_files import check_table, checks_document, csv_text, json_text, write_files

        if not self.check_results:
            return []
        names = self._names()
        checks = {letter: (result, names[letter]) for letter, (result, _) in self.check_results.items()}
        if str(path).lower().endswith(".csv"):
            return write_files(path, {"": csv_text(check_table(checks))})
        return write_files(path, {"": json_text(checks_document(checks, self.split_combo.currentData()))})

    def _ask_save(self, what: str, default: str, save) -> None:
        from dmlviewer.gui.common import errors
        from dmlviewer.gui.window import settings

        start = Path(settings.start_dir(settings=self.window_.settings)) / default
        path, chosen = QFileDialog.getSaveFileName(self, f"Save the {what}", str(start),
                                                   "JSON (*.json);;CSV tables (*.csv)")
        if not path:
            return
        if not Path(path).suffix:
            path += ".csv" if chosen.startswith("CSV") else ".json"
        try:
            written = save(path)
        except OSError as exc:
            from dmlviewer.core.files import describe_os_error

            errors.show_error(self, f"Cannot save the {what}", describe_os_error(exc, path), "")
            return
        label = self.status if what == "comparison" else self.check_status
        label.setText(f"Saved {', '.join(p.name for p in written)} in {Path(path).parent}.")

    def _ask_save_comparison(self) -> None:
        self._ask_save("comparison", "comparison.json", self.save_comparison)

    def _ask_save_check(self) -> None:
        self._ask_save("sanity check", "sanity_check.json", self.save_check)

    # -- opening pairs
    def _on_row(self, row: int, _column: int) -> None:
        item = self.table.item(row, 0)
        if item is None:
            return
        query, reference = item.data(Qt.UserRole)
        self.pair_chosen.emit(int(query), int(reference))

    def _on_retrieval_row(self, row: int, column: int) -> None:
        item = self.retrieval_table.item(row, column)
        if item is None:
            return
        query, reference = item.data(Qt.UserRole)
        self.pair_chosen.emit(int(query), int(reference))
