"""The pair view's row controller (issue 39 item 2): each model's row is explained in the
background (``core.explain.pair.explain_pair``: forward passes, contributions, the
point-to-point tensor) and its overall maps are computed on request (the Grad-CAM family,
grad-weight transfer, occlusion), every job with the stamp of what it works for; a result is
used only while it is still fresh. :class:`RowController` is a part of
:class:`~dmlviewer.gui.pair.pair_view.PairView` (it reads the view's rows, images, display and
model lock, and calls its drawing methods when a result arrives).
"""

from __future__ import annotations

import logging

from dmlviewer.core.explain.methods import label as method_label
from dmlviewer.gui.common import errors
from dmlviewer.gui.pair.hover_link import SIDE_NAMES
from dmlviewer.gui.pair.orientation_overlay import show_orientation
from dmlviewer.gui.pair.pair_row import PairRow

log = logging.getLogger(__name__)

#: Map choice computed by occlusion (model-agnostic; its hover shows the occlusion interaction)
OCCLUSION = "occlusion"


class RowController:
    """Preparation and overall-map jobs of the pair view's rows (see the module docstring)."""

    def set_occlusion_baseline(self, baseline: str) -> None:
        """What an occluded cell shows (blur, mean, noise); drops computed occlusion maps."""
        if baseline == self.occlusion_baseline:
            return
        self.occlusion_baseline = baseline
        if self.rows[0].overall.pop(OCCLUSION, None) is not None and self.method == OCCLUSION:
            self._on_method()

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
    def _prepare(self) -> None:
        """Explain the pair again with every row's model (a new pair, model A or size)."""
        for pane in self.panes:
            pane.set_markers([])
            pane.set_guides([])
        self.orientation = None
        self.lines.clear()
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
        model, device, lock, query = row.model, row.device, self.model_lock, self.images.query
        reference = self.images.row_reference(self.rows.index(row))[0]  # the row's own (model B's top-1)
        # Each model at its own input size, or every model at the size chosen for model A.
        size = self.toolbar_widget.chosen_size()

        def job(cancel):
            from dmlviewer.core.explain.pair import explain_pair

            with lock:
                cancel.raise_if_cancelled()
                return explain_pair(model, query, reference, device=device, size=size)

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
            self.orientation = show_orientation(self.panes, self.images, expl, self.model)
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

    def _on_occlusion_progress(self, stamp, fraction: float) -> None:
        row = self.rows[0]
        if self.session.accepts(stamp) and self.method == OCCLUSION and OCCLUSION not in row.overall:
            for pane in row.panes:
                pane.show_message(f"computing Occlusion… {100 * fraction:.0f} %")

    def _on_overall_failed(self, row: PairRow, method: str, text: str) -> None:
        first, _ = errors.split_failure(text)
        row.pending = None
        row.overall[method] = first
        log.warning("overall map %s of model %s failed: %s", method, row.letter, text)
        self._show_overall()


def _occlusion_maps(expl, model, images, device: str, baseline: str, size: int | None, cancel, report):
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
