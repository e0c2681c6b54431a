"""The training monitor: the run's progress bar with ETA, live plots of its loss (per step) and
metrics (per epoch), and its log, fed by the run's :class:`~dmlviewer.core.progress.Progress`
events."""

from __future__ import annotations

import math
import time

import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPlainTextEdit, QProgressBar, QSplitter, QTabWidget, QVBoxLayout, QWidget

from dmlviewer.core.progress import Progress
from dmlviewer.gui.common.widgets import LegendStrip, format_eta, series_color, series_pen, style_plot

#: The metric plot's title for one-branch (False) and two-branch (True) runs.
METRIC_TITLES = {False: "Recall@1 and NMI per epoch (0: before training)",
                 True: "Street-to-aerial Recall@1, @5 and @1 % per epoch (0: before training)"}


class _Series:
    """Points of one curve, appended as events arrive, drawn on the next refresh."""

    def __init__(self, curve: pg.PlotDataItem) -> None:
        self.curve = curve
        self.x: list[float] = []
        self.y: list[float] = []

    def add(self, x: float, y: float) -> None:
        self.x.append(x)
        self.y.append(y)

    def draw(self) -> None:
        self.curve.setData(self.x, self.y)


class TrainingMonitor(QWidget):
    """Progress bar with ETA, live plots of the training loss and of its terms (per step, on
    two tabs: the total is mostly the metric term, drawn together they would lie on top of
    each other), of Recall@1 / NMI (per epoch, from epoch 0, the model before training; with a
    validation split also its Recall@1), and the run's log. ``reset()`` before a run,
    ``on_event(Progress)`` for each event. Each plot's legend is a strip under it, outside the
    data (drawn over the view it hid the last epoch's points)."""

    REFRESH_MS = 200

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setFormat("%p%")
        self.status = QLabel("Not started")
        self.status.setWordWrap(True)  # "Finished: <long path>" wraps (see breakable) instead of widening
        self.eta = QLabel("ETA --:--")
        self.loss_plot = pg.PlotWidget(title="Training loss per step (total of the weighted terms)")
        self.loss_plot.setLabel("left", "loss")
        self.terms_plot = pg.PlotWidget(title="Loss terms per step (each before its weight)")
        self.terms_plot.setLabel("left", "term")
        self.metric_plot = pg.PlotWidget(title=METRIC_TITLES[False])
        self.metric_plot.setLabel("bottom", "epoch")
        self.metric_plot.setLabel("left", "score")
        self.loss_legend, self.terms_legend, self.metric_legend = (LegendStrip(columns=4) for _ in range(3))
        for plot in (self.loss_plot, self.terms_plot, self.metric_plot):
            style_plot(plot)
            plot.setMinimumHeight(140)
        for plot in (self.loss_plot, self.terms_plot):
            plot.setLabel("bottom", "step")
        self.loss_tabs = QTabWidget()
        self.loss_tabs.setDocumentMode(True)
        self.loss_tabs.addTab(_with_legend(self.loss_plot, self.loss_legend), "Loss")
        self.loss_tabs.addTab(_with_legend(self.terms_plot, self.terms_legend), "Loss terms")
        self.log = QPlainTextEdit()
        self.log.setReadOnly(True)
        self.log.setMaximumBlockCount(5000)
        self.log.setMinimumHeight(100)
        top = QHBoxLayout()
        top.addWidget(self.progress, 1)
        top.addWidget(self.eta)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(top)
        layout.addWidget(self.status)
        splitter = QSplitter(Qt.Vertical)
        splitter.addWidget(self.loss_tabs)
        splitter.addWidget(_with_legend(self.metric_plot, self.metric_legend))
        splitter.addWidget(self.log)
        splitter.setSizes([300, 260, 160])
        layout.addWidget(splitter, 1)
        self.loss_series: dict[str, _Series] = {}  # the total ("loss")
        self.term_series: dict[str, _Series] = {}  # the terms, by name
        self.metric_series: dict[str, _Series] = {}
        self._dirty = False
        self._timer = QTimer(self)
        self._timer.setInterval(self.REFRESH_MS)
        self._timer.timeout.connect(self.refresh)
        self._timer.start()
        self._reset_axes()

    def _plots(self) -> tuple[tuple[pg.PlotWidget, LegendStrip, dict[str, _Series]], ...]:
        return ((self.loss_plot, self.loss_legend, self.loss_series),
                (self.terms_plot, self.terms_legend, self.term_series),
                (self.metric_plot, self.metric_legend, self.metric_series))

    def _reset_axes(self) -> None:
        """Every plot's axes as before any data: 0 to 1 (scores keep 0 to 1), then following the
        data as it arrives; without this a new run showed the last run's ranges until its
        first points came."""
        for plot, _, _ in self._plots():
            view = plot.getViewBox()
            view.setRange(xRange=(0, 1), yRange=(0, 1), padding=0)
            view.enableAutoRange(x=True, y=plot is not self.metric_plot)
        self.metric_plot.getAxis("bottom").setTickSpacing()  # automatic until epochs arrive

    def reset(self, two_branch: bool = False) -> None:
        """Empty plots, fresh axes and log for a new run (``two_branch``: its metrics are
        street-to-aerial retrieval's)."""
        self.metric_plot.setTitle(METRIC_TITLES[two_branch])
        for plot, legend, series in self._plots():
            for s in series.values():
                plot.removeItem(s.curve)
            series.clear()
            legend.set_items([])
        self._reset_axes()
        self.progress.setValue(0)
        self.eta.setText("ETA --:--")
        self.log.clear()
        self.status.setText("Starting...")

    def _series(self, name: str, kind: str) -> _Series:
        """The curve ``name`` of plot ``kind`` (``loss``, ``term`` or ``metric``)."""
        plot, legend, table = self._plots()[("loss", "term", "metric").index(kind)]
        if name not in table:
            color = series_color(len(table))
            pen = series_pen(len(table), width=2 if kind != "term" else 1.5)
            kwargs = dict(symbol="o", symbolSize=7, symbolBrush=color, symbolPen=None) if kind == "metric" else {}
            table[name] = _Series(plot.plot([], [], pen=pen, name=name, **kwargs))
            legend.set_items([(s.curve, n) for n, s in table.items()])
        return table[name]

    def on_event(self, event: Progress) -> None:
        """One event of the run: the bar and ETA follow the run's overall progress (training
        steps and evaluations; 100 % only when the run has ended), the plots its numbers."""
        data = event.data or {}
        if "overall" in data:
            self.progress.setValue(min(999, int(1000 * float(data["overall"]))))
        if event.eta_s is not None:
            self.eta.setText(f"ETA {format_eta(event.eta_s)}")
        if event.kind == "step":
            x = float(event.current)
            total = data.get("loss")
            if isinstance(total, (int, float)) and math.isfinite(total):
                self._series("loss", "loss").add(x, float(total))
            for name, value in dict(data.get("losses") or {}).items():
                if name != "loss" and isinstance(value, (int, float)) and math.isfinite(value):
                    self._series(name, "term").add(x, float(value))
            epoch = data.get("epoch")
            self.status.setText(f"epoch {epoch}, step {event.current}/{event.total}" if epoch is not None
                                else f"step {event.current}/{event.total}")
            self._dirty = True
        elif event.kind == "evaluate":
            self.status.setText(f"Evaluating after epoch {data.get('epoch')}: {data.get('split')} "
                                f"{data.get('images')}/{data.get('of')} images")
        elif event.kind == "eval":
            metrics = data.get("metrics") or {}
            val = data.get("val") or {}
            epoch = data.get("epoch", len(next(iter(self.metric_series.values())).x)
                             if self.metric_series else 0)
            for key in ("recall@1", "nmi"):
                if key in metrics:
                    self._series(key, "metric").add(float(epoch), float(metrics[key]))
            if "recall@1" in val:
                self._series("val recall@1", "metric").add(float(epoch), float(val["recall@1"]))
            summary = ", ".join(f"{k} {v:.4f}" for k, v in metrics.items() if isinstance(v, float))
            best = " (best on validation so far)" if data.get("best") else ""
            self.append_log(f"epoch {epoch}: {summary}{best}")
            self._dirty = True
        if event.message and event.kind not in ("step", "evaluate"):
            self.append_log(event.message)

    def append_log(self, text: str) -> None:
        self.log.appendPlainText(f"{time.strftime('%H:%M:%S')}  {text}")

    def refresh(self) -> None:
        """Draw the points received since the last refresh (a few times a second)."""
        if not self._dirty:
            return
        self._dirty = False
        for series in (*self.loss_series.values(), *self.term_series.values(), *self.metric_series.values()):
            series.draw()
        epochs = max((len(s.x) for s in self.metric_series.values()), default=0)
        axis = self.metric_plot.getAxis("bottom")
        if 0 < epochs <= 20:
            axis.setTickSpacing(1, 1)  # whole epochs
        else:
            axis.setTickSpacing()  # automatic

    def point_counts(self) -> dict[str, int]:
        """Points drawn per curve (what the plots actually hold)."""
        out = {}
        for name, series in (*self.loss_series.items(), *self.term_series.items(), *self.metric_series.items()):
            x, _ = series.curve.getData()
            out[name] = 0 if x is None else len(x)
        return out


def _with_legend(plot: pg.PlotWidget, legend: LegendStrip) -> QWidget:
    """``plot`` with ``legend`` under it."""
    box = QWidget()
    layout = QVBoxLayout(box)
    layout.setContentsMargins(0, 0, 0, 0)
    layout.setSpacing(0)
    layout.addWidget(plot, 1)
    layout.addWidget(legend)
    return box


def breakable(text: str) -> str:
    """``text`` with a zero-width space after each path separator: a word-wrapped label breaks
    a long path there, where otherwise the whole path is one word that sets the label's (and
    the dialog side's) minimum width, and the text is clipped on a small screen."""
    return text.replace("/", "/\u200b").replace("\\", "\\\u200b")
