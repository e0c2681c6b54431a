"""One model's row of panes (issue 30): the pair view shows one row per model (A, then B, ...),
the group tabs one row for the open model.

A row holds what one model needs to show a pair: the model and its device, the pair's
explanation by that model, its state, the overall maps computed so far, the hover renderers of
its point-to-point tensor (:mod:`dmlviewer.core.explain.hover`), two panes in a splitter, and
two background runners (the pair's preparation, overall maps on request). Freshness is one stamp
per row: every preparation starts a new stamp, every job carries the stamp it was started
under, and :meth:`PairRow.fresh` is the one check a result passes before it is used.
"""

from __future__ import annotations

from typing import Any, Callable

from PySide6.QtCore import QObject, Qt
from PySide6.QtWidgets import QSplitter

from dmlviewer.gui.pair.hover_link import QUERY, REFERENCE
from dmlviewer.gui.pair.image_pane import ImagePane
from dmlviewer.gui.jobs.worker import LatestRunner

#: A job for a row's runner: ``job(cancel) -> value`` in the worker thread.
Job = Callable[[Any], Any]


class PairRow(QObject):
    """One model's panes and everything it shows on them (see the module docstring).

    ``letter``: the row's name in titles and read-outs ("A", "B", ...); ``name``: the model's
    display name; ``methods``: the overall maps this row offers (registry keys)."""

    def __init__(self, letter: str, methods: tuple[str, ...], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.letter = letter
        self.name = letter
        self.methods = methods
        self.model = None
        self.device = "cpu"
        self.explanation = None
        self.state = "empty"  # empty | preparing | ready | failed
        #: method -> True (computed into the explanation), a result object (occlusion), or why
        #: it is unavailable (a line of text)
        self.overall: dict[str, Any] = {}
        self.pending: str | None = None  # the method whose maps are being computed
        #: hovered side -> the renderer of this row's own partial maps
        self.renderers: dict[int, Any] = {}
        #: the scale of this row's partial maps (None: each map its own)
        self.scale: float | None = None
        #: the hover link's row of these panes (set by the owner): what hovering draws on them
        self.link = None
        self.stamp = 0
        self.panes = (ImagePane("Query"), ImagePane("Reference"))
        self.splitter = QSplitter(Qt.Horizontal)
        for pane in self.panes:
            self.splitter.addWidget(pane)
            self.splitter.setStretchFactor(self.splitter.count() - 1, 1)
        self.splitter.setChildrenCollapsible(False)
        self.runner = LatestRunner(self)  # the pair's preparation
        self.overall_runner = LatestRunner(self)  # overall maps on request
        self._done: dict[LatestRunner, tuple[Callable, Callable]] = {}
        for runner in (self.runner, self.overall_runner):
            runner.result_ready.connect(lambda _r, value, k=runner: self._arrived(k, value))
            runner.request_failed.connect(lambda _r, text, k=runner: self._done[k][1](text))

    @property
    def similarity(self) -> float | None:
        """The model's cosine similarity of the pair (None until it is prepared)."""
        return None if self.explanation is None or self.state != "ready" else float(self.explanation.similarity)

    # -- freshness: one stamp per row
    def restart(self) -> int:
        """A new pair, model or size: forget the explanation, its maps and renderers, drop every
        job in flight; returns the new stamp."""
        self.stamp += 1
        self.explanation = None
        self.overall = {}
        self.pending = None
        self.renderers = {}
        if self.link is not None:
            self.link.renderers = {}
        self.runner.cancel()
        self.overall_runner.cancel()
        for pane in self.panes:
            pane.clear_overlay()
        return self.stamp

    def fresh(self, stamp: int) -> bool:
        """Was ``stamp`` started for what the row shows now? (The one freshness check.)"""
        return stamp == self.stamp

    def run(self, runner: LatestRunner, job: Job, done: Callable[[Any], None],
            failed: Callable[[str], None]) -> None:
        """Run ``job`` on ``runner`` (the row's preparation or overall runner); ``done(value)``
        in the GUI thread if the row is still at the stamp the job was started under."""
        stamp = self.stamp
        self._done[runner] = (done, failed)
        runner.submit(lambda cancel: (stamp, job(cancel)), cancel_aware=True)

    def _arrived(self, runner: LatestRunner, value: tuple[int, Any]) -> None:
        stamp, result = value
        if self.fresh(stamp):
            self._done[runner][0](result)

    # -- what the panes say
    def set_state(self, state: str, message: str | None = None, busy_text: str = "preparing…") -> None:
        """The row's state; its panes show ``message`` (or ``busy_text`` while preparing)."""
        self.state = state
        for pane in self.panes:
            pane.show_message(message if message else (busy_text if state == "preparing" else None))

    def say(self, text: str | None) -> None:
        """Both panes: no overlay and a notice (None: no notice, overlays kept)."""
        for pane in self.panes:
            if text:
                pane.clear_overlay()
            pane.show_message(text)

    def set_images(self, query, reference) -> None:
        self.panes[QUERY].set_image(query)
        self.panes[REFERENCE].set_image(reference)

    def shutdown(self) -> None:
        self.runner.stop(1.0)
        self.overall_runner.stop(1.0)
