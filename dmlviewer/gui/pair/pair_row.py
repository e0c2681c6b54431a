"""One model's row of panes (issue 30): the pair view shows one row per model (A, then B, ...),
the group tabs one row for the open model.

A row holds what one model shows of a pair: the pair's explanation by that model, its state,
the overall maps computed so far, the hover renderers of its point-to-point tensor
(:mod:`dmlviewer.core.explain.hover`), two panes (one in each column of the view's
:class:`~dmlviewer.gui.pair.pane_column.PaneColumns`, under the other rows' panes: one graphics
view per side, issue 40), and two background runners (the pair's preparation, overall maps on
request). The model itself is not kept here: the row reads
it from its slot of the session (``"primary"`` for row A, ``"compare"`` for row B), and runs on
the session's device (issue 39 item 5). Freshness is the session's one rule: every preparation
takes a stamp from the session (:meth:`~dmlviewer.core.session.Session.stamp` with the pair),
every job carries the stamp it was started under, and its result is used only while
:meth:`~dmlviewer.core.session.Session.accepts` it.
"""

from __future__ import annotations

import traceback
from typing import Any, Callable

from PySide6.QtCore import QObject

from dmlviewer.core.progress import Cancelled
from dmlviewer.core.session import Session, Stamp
from dmlviewer.gui.jobs.latest import LatestRunner
from dmlviewer.gui.pair.hover_link import QUERY, REFERENCE
from dmlviewer.gui.pair.image_pane import ImagePane
from dmlviewer.gui.pair.pane_column import PaneColumns

#: A job for a row's runner: ``job(cancel) -> value`` in the worker thread.
Job = Callable[[Any], Any]


class PairRow(QObject):
    """One model's panes and everything it shows on them (see the module docstring).

    ``letter``: the row's name in titles and read-outs ("A", "B", ...); ``slot``: the session's
    model slot it shows; ``name``: the model's display name; ``methods``: the overall maps this
    row offers (registry keys); ``sides``: the view's two columns its panes go into (None: two
    of its own, as the group tabs' row)."""

    def __init__(self, letter: str, slot: str, session: Session, methods: tuple[str, ...],
                 parent: QObject | None = None, sides: PaneColumns | None = None) -> None:
        super().__init__(parent)
        self.letter = letter
        self.slot = slot
        self.session = session
        self.name = letter
        self.methods = methods
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
        #: the session's stamp of the row's preparation (None: never prepared)
        self.stamp: Stamp | None = None
        #: the two columns the row's panes are drawn in
        self.sides = sides if sides is not None else PaneColumns()
        self.panes = (ImagePane("Query", self.sides.columns[0]), ImagePane("Reference", self.sides.columns[1]))
        self.runner = LatestRunner(self)  # the pair's preparation
        self.overall_runner = LatestRunner(self)  # overall maps on request
        self._done: dict[LatestRunner, tuple[Callable, Callable]] = {}
        for runner in (self.runner, self.overall_runner):
            runner.result_ready.connect(lambda _id, value, k=runner: self._arrived(k, value))

    @property
    def model(self) -> Any:
        """The model of the row's session slot (None: the slot is empty)."""
        slot = self.session.slot(self.slot)
        return None if slot is None else slot.model

    @property
    def device(self) -> str:
        return self.session.device

    @property
    def similarity(self) -> float | None:
        """The model's cosine similarity of the pair (None until it is prepared)."""
        return None if self.explanation is None or self.state != "ready" else float(self.explanation.similarity)

    def prepared_for_model(self) -> bool:
        """Was the row's last preparation started for the model now in its slot?"""
        slot = self.session.slot(self.slot)
        return self.stamp is not None and slot is not None and self.stamp.model_serial == slot.serial

    # -- freshness: the session's stamps
    def restart(self) -> Stamp:
        """A new pair, model or size: forget the explanation, its maps and renderers, drop every
        job in flight; returns the session's stamp the row's jobs are started under now."""
        self.stamp = self.session.stamp(self.slot, pair=True)
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

    def run(self, runner: LatestRunner, job: Job, done: Callable[[Any], None],
            failed: Callable[[str], None]) -> None:
        """Run ``job`` on ``runner`` (the row's preparation or overall runner) under the row's
        stamp; ``done(value)`` (or ``failed(text)``) in the GUI thread if the session still
        accepts the stamp."""
        stamp = self.stamp
        self._done[runner] = (done, failed)

        def work(cancel):
            try:
                return stamp, True, job(cancel)
            except Cancelled:
                raise
            except Exception as exc:  # noqa: BLE001 - said by ``failed`` if still fresh
                return stamp, False, f"{type(exc).__name__}: {exc}\n\n{traceback.format_exc()}"

        runner.submit(work, cancel_aware=True)

    def _arrived(self, runner: LatestRunner, value: tuple[Stamp, bool, Any]) -> None:
        stamp, ok, result = value
        if self.session.accepts(stamp):
            self._done[runner][0 if ok else 1](result)

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

    @property
    def shown(self) -> bool:
        """Is the row on screen (its panes laid out in their columns)?"""
        return self.panes[0].shown

    def set_shown(self, shown: bool) -> None:
        for pane in self.panes:
            pane.set_shown(shown)

    def set_images(self, query, reference) -> None:
        self.panes[QUERY].set_image(query)
        self.panes[REFERENCE].set_image(reference)

    def shutdown(self) -> None:
        self.runner.stop(1.0)
        self.overall_runner.stop(1.0)
