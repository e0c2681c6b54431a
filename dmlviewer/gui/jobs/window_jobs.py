"""The main window's background jobs for the open dataset and model: feature extraction and the
Grad-CAM weights of grad-weight transfer.

Each job runs in the window's ``JobRunner`` and is held by the session with the stamp of what
was open when it started (``session.add_job``); its result is shown only when the session still
accepts that stamp, so a result of a dataset or model closed meanwhile is dropped. The jobs run
the shared model under ``model_lock``, batch by batch, as every other user of the model does (a
device change moves it under the lock).
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any

from dmlviewer.gui.common import errors

from dmlviewer.gui.window import settings
from dmlviewer.gui.jobs.job import Job

log = logging.getLogger(__name__)


class WindowJobs:
    """Starts, follows and cancels the ``extract`` and ``grad`` jobs of ``window`` (the
    ``MainWindow``, whose ``runner`` runs them); keeps the Grad-CAM weights computed in this
    process by (checkpoint sha, dataset identity)."""

    def __init__(self, window: Any) -> None:
        self.window = window
        self.session = window.session
        self.runner = window.runner
        self._grad_job_key: tuple | None = None
        self._grad_banks: dict[tuple, object] = {}  # (checkpoint sha, dataset) -> GradWeightBank

    # -- feature extraction
    def extract_features(self, slot: str = "primary") -> None:
        """Embed the open dataset with ``slot``'s model (model A, or model B: ``"compare"``) in
        the job queue; open the HDF5 file as that slot's features (a file this window wrote
        earlier is reopened when it fits the dataset's identity)."""
        window = self.window
        held = self.session.slot(slot)
        if held is None or window.dataset is None or self._current_job("extract", slot) is not None:
            return
        sha = held.sha256
        out = self.features_path(slot)
        from dmlviewer.core.evaluate.extract import extract_features, features_fit

        if out.exists() and features_fit(out, held.model, window.dataset):  # else: extracted before per-branch (issue 25)
            if self._open_extracted(out, quiet=True, slot=slot):
                return

        model, dataset, device, lock = held.model, window.dataset, window.device, window.model_lock

        def factory(cancel):
            return _under_lock(extract_features(model, dataset, out, batch_size=32, device=device, num_workers=0,
                                                cancel=cancel, checkpoint_sha256=sha), lock)

        self.submit("extract", f"Extract features of {Path(window.dataset_path).name} with "
                               f"{window.labels.job_name(slot)}", factory, slot)

    def features_path(self, slot: str = "primary") -> Path:
        """Where the features of the open dataset under ``slot``'s model are written: the output
        folder (visible, changeable under File ▸ Output Folder), one file per (model, dataset),
        named after both, without ``:`` or separators (Windows, SMB shares)."""
        window = self.window
        held = self.session.slot(slot)
        source = None if held is None else held.source
        checkpoint = (None if held is None or (source is not None and source.kind not in ("checkpoint", "pretrained"))
                      else held.info.get("path"))  # as ``MainWindow.checkpoint_path`` for model A
        sha = (None if held is None else held.sha256) or hashlib.sha256(str(checkpoint).encode()).hexdigest()
        where = hashlib.sha256(str(Path(window.dataset_path).resolve()).encode()).hexdigest()[:8]
        model = source.stem() if source is not None else "model"
        folder = settings.output_dir(window.settings) / "features"
        folder.mkdir(parents=True, exist_ok=True)
        return folder / f"{Path(window.dataset_path).name}-{model}-{sha[:12]}-{where}.h5"

    def _open_extracted(self, path: str | Path, quiet: bool = False, slot: str = "primary") -> bool:
        """Open features this window extracted for what is open now as ``slot``'s, when they fit the open
        dataset's identity (``quiet``: a file found from an earlier run that does not fit is
        replaced without a word). False when not opened."""
        from dmlviewer.core.evaluate import read_features

        try:
            features = read_features(path)
        except Exception as exc:  # noqa: BLE001
            if not quiet:
                errors.report_exception(self.window, "Cannot open features", exc, path=str(path))
            return False
        if not self.session.features_fit(features, slot):
            log.info("not opening %s: computed from another dataset than %s", path, self.window.dataset_path)
            return False
        self.session.set_features(features, str(path), slot=slot)
        return True

    # -- the jobs held by the session with their stamps
    def submit(self, kind: str, name: str, factory, slot: str = "primary") -> Job:
        """Queue a job (``kind``: ``extract`` or ``grad``) for what is open now, with ``slot``'s
        model: its result is shown only if the session still accepts the job's stamp when it ends."""
        job = self.runner.submit(name, factory)
        self.session.add_job(job.id, kind, name, stamp=self.session.stamp(slot), handle=job)
        return job

    def _current_job(self, kind: str, slot: str = "primary") -> Job | None:
        """The running job of ``kind`` that works for what is open with ``slot``'s model (None: none)."""
        for job_id in self.session.running(kind, slot):
            return self.session.jobs[job_id].handle
        return None

    @property
    def extract_job(self) -> Job | None:
        """The running extraction for what is open (None: none)."""
        return self._current_job("extract")

    @property
    def grad_job(self) -> Job | None:
        """The running Grad-CAM weights job for what is open (None: none)."""
        return self._current_job("grad")

    def drop_stale(self) -> None:
        """The dataset or model changed: cancel the jobs working for what is no longer open
        (a result that still arrives is dropped by the stamp check)."""
        for job_id in self.session.stale_jobs():
            entry = self.session.jobs[job_id]
            if entry.kind in ("extract", "grad") and entry.handle is not None and not entry.handle.ended:
                log.info("cancelling %s: its dataset or model is no longer open", entry.name)
                self.runner.cancel(entry.handle)

    def cancel_model_jobs(self) -> list[str]:
        """Cancel the extraction and Grad-CAM weight jobs of the open model; their kinds."""
        kinds = []
        for job_id, entry in list(self.session.jobs.items()):
            if entry.kind in ("extract", "grad") and entry.handle is not None and not entry.handle.ended:
                self.session.end_job(job_id)
                self.runner.cancel(entry.handle)
                kinds.append(entry.kind)
        return kinds

    def on_job_finished(self, job, result) -> None:
        """Runner signal: show the result if the session still accepts the job's stamp."""
        entry = self.session.end_job(job.id)
        if entry is None:
            return  # not one of this window's jobs (the tools have their own)
        if not self.session.accepts(entry.stamp):  # the one check: is its dataset and model still open?
            log.info("dropped the result of %s: its dataset or model is no longer open", job.name)
            return
        if entry.kind == "extract":
            path = (result or {}).get("path") if isinstance(result, dict) else None
            if path:
                self._open_extracted(path, slot=entry.stamp.slot)
        elif entry.kind == "grad" and isinstance(result, tuple):
            self._on_grad_bank(*result)

    def on_job_failed(self, job, text: str) -> None:
        """Runner signal: the one dialog of any failed job says why (the job's own handlers
        update their views only, see ``JobEvents``); the pair view also says it, for the Grad-CAM
        weights."""
        entry = self.session.end_job(job.id)
        first, details = errors.split_failure(text)
        if entry is not None and entry.kind == "grad" and self.session.accepts(entry.stamp):
            self.window.pair_view.set_grad_bank(None, f"the Grad-CAM weights could not be computed: {first}")
        errors.show_error(self.window, job.failure_title or f"Job failed: {job.name}", first, details)

    def on_job_cancelled(self, job) -> None:
        """Runner signal: a cancelled Grad-CAM weights job is said in the pair view."""
        entry = self.session.end_job(job.id)
        if entry is not None and entry.kind == "grad" and self.session.accepts(entry.stamp):
            self.window.pair_view.show_grad_progress("cancelled; choose the map again to restart it.")

    # -- grad-weight transfer
    def grad_key(self) -> tuple:
        """The Grad-CAM weights belong to a model's weights and a dataset (its identity)."""
        return ((self.window.checkpoint_info or {}).get("sha256"), self.session.dataset_identity)

    def known_grad_bank(self):
        """The Grad-CAM weights computed for the open model and dataset (None: not yet)."""
        return self._grad_banks.get(self.grad_key())

    def compute_grad_bank(self) -> None:
        """Grad-weight transfer needs Grad-CAM weights of labelled images (seed 002): compute
        them for the open dataset's training split in the job queue, as ``localize`` does."""
        window = self.window
        pair_view = window.pair_view
        key = self.grad_key()
        if key in self._grad_banks:
            pair_view.set_grad_bank(self._grad_banks[key])
            return
        if window.model is None or window.dataset is None:
            pair_view.set_grad_bank(None, "open a dataset with a training split: the method borrows the "
                                          "Grad-CAM weights of its labelled training images")
            return
        train = window.dataset.select_split("train")
        if len(train) < 2:
            pair_view.set_grad_bank(None, "the open dataset has no training split: the method borrows the "
                                          "Grad-CAM weights of labelled training images")
            return
        running = self.grad_job
        if running is not None and not running.ended:
            if self._grad_job_key == key:
                return
            self.runner.cancel(running)  # weights of another model or dataset
        from dmlviewer.core.explain.grad_transfer import compute_grad_weights

        model, device, lock = window.model, window.device, window.model_lock

        def factory(cancel):
            for event in _under_lock(compute_grad_weights(model, train, device=device, cancel=cancel), lock):
                if event.kind == "done":
                    event.data["result"] = (key, event.data["result"])
                yield event

        self._grad_job_key = key
        self.submit("grad", f"Grad-CAM weights of {len(train):,} training images of "
                            f"{Path(window.dataset_path).name} with {window.labels.job_name()}", factory)
        pair_view.show_grad_progress(f"computing the Grad-CAM weights of {len(train):,} training images "
                                     "(see View ▸ Jobs)…")

    def _on_grad_bank(self, key, result) -> None:
        from dmlviewer.core.explain.grad_transfer import GradWeightBank

        if key is None or result is None:
            return
        try:
            bank = GradWeightBank(result["embeddings"], result["weights"])
        except ValueError as exc:
            self.window.pair_view.set_grad_bank(None, str(exc))
            return
        self._grad_banks[key] = bank
        if key == self.grad_key():
            self.window.pair_view.set_grad_bank(bank)


def _under_lock(events, lock):
    """The events of a job generator, each step run while holding ``lock`` (the shared model's
    ``model_lock``): a device change, which moves the model under the lock, waits for the batch
    in progress, and the pair view's work interleaves with the job between batches."""
    try:
        while True:
            with lock:
                try:
                    event = next(events)
                except StopIteration:
                    return
            yield event
    finally:
        with lock:
            events.close()  # the model's mode is restored under the lock too
