"""A training run's lifecycle: where it goes (a fresh run folder), its start as a process job of
the :class:`~dmlviewer.gui.jobs.runner.JobRunner` (a crash in training cannot take the app down),
its events into the monitor, its cancel, and its end (the checkpoint to open)."""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal

from dmlviewer.core.progress import Progress
from dmlviewer.gui.common import errors
from dmlviewer.gui.jobs.job import Job
from dmlviewer.gui.jobs.runner import JobRunner
from dmlviewer.gui.training.monitor import TrainingMonitor, breakable

log = logging.getLogger(__name__)


def read_run_settings(path: str | Path):
    """The :class:`TrainConfig` saved in a run folder (``RUN/config.json``) or a config file."""
    from dmlviewer.core.train.config import TrainConfig

    return TrainConfig.read(path)


def default_run_folder(base: str | Path | None = None) -> str:
    """``<base>/run-<date-time>`` for a new run; ``base`` defaults to ``runs/`` in the app's
    output folder (never next to a dataset in the cache or the package)."""
    from dmlviewer.gui.window import settings

    base = Path(base) if base else settings.output_dir() / "runs"
    return str(base / f"run-{time.strftime('%Y%m%d-%H%M%S')}")


def next_run_folder(last: str | Path) -> str:
    """A free folder beside the run folder ``last`` for the next run: ``run`` -> ``run-2``,
    ``run-2`` -> ``run-3``, ``run-20261125-170000`` -> ``run-20261125-170000-2`` (the first
    number whose folder does not exist yet)."""
    last = Path(last)
    match = re.fullmatch(r"(.*)-(\d{1,3})", last.name)  # a counter, not the time of run-<date>-<time>
    stem, n = (match.group(1), int(match.group(2)) + 1) if match else (last.name, 2)
    while True:
        candidate = last.with_name(f"{stem}-{n}")
        try:
            if not candidate.exists():
                return str(candidate)
        except OSError:  # a name the file system refuses: the form's check will say so
            return str(candidate)
        n += 1


def _checkpoint_of(result: Any, fallback: Path) -> str | None:
    if isinstance(result, dict):
        for key in ("checkpoint", "path", "checkpoint_path"):
            if result.get(key):
                return str(result[key])
    elif isinstance(result, (str, Path)):
        return str(result)
    return str(fallback) if fallback.is_file() else None


class TrainingRun(QObject):
    """The dialog's runs, one at a time: :meth:`start` submits one (one-branch ``train``, or the
    two-branch core of ``train --branches 2`` when ``cross_view`` is given), its events go to
    ``monitor``, and ``ended`` is emitted when it finished, failed or was cancelled. ``job`` is
    the last run's job, ``config`` its :class:`TrainConfig`, ``checkpoint`` its checkpoint to
    open (known from its ``checkpoint`` events and its result)."""

    ended = Signal()

    def __init__(self, runner: JobRunner, monitor: TrainingMonitor, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.runner = runner
        self.monitor = monitor
        self.job: Job | None = None
        self.config = None
        self.checkpoint: str | None = None

    @property
    def running(self) -> bool:
        return self.job is not None and not self.job.ended

    def start(self, config, cross_view, names: dict[str, str]) -> Job:
        """Submit the run of ``config`` (a TrainConfig; ``cross_view``: the CrossViewConfig of a
        two-branch run, else None); the training process words its errors with ``names``."""
        from dmlviewer.core.train import train
        from dmlviewer.core.train.cross_view import train_cross_view_events
        from dmlviewer.core.train.errors import worded_run

        self.config = config
        self.checkpoint = None
        self.monitor.reset(cross_view is not None)
        if cross_view is not None:  # the same core as train --branches 2
            self.monitor.append_log(f"training a two-branch (cross-view) model into {config.out}")
            run, options = train_cross_view_events, cross_view
        else:
            self.monitor.append_log(f"training into {config.out}")
            run, options = train, config
        # errors come back as text from the training process: worded there with the form's labels
        job = (worded_run, (run, names, options), {})
        self.job = self.runner.submit(f"Training {Path(config.out).name}", job, process=True,
                                      started=self._on_started, progress=self._on_progress,
                                      finished=self._on_finished, failed=self._on_failed,
                                      cancelled=self._on_cancelled)
        if self.job.state == "queued":
            self.monitor.status.setText("Queued behind other jobs...")
        return self.job

    def cancel(self) -> None:
        if self.running:
            self.runner.cancel(self.job)
            self.monitor.status.setText("Cancelling: the run saves a checkpoint and stops after this batch...")

    def _on_started(self, job: Job) -> None:
        self.monitor.status.setText("Starting the training process...")

    def _on_progress(self, job: Job, event: Progress) -> None:
        self.monitor.on_event(event)
        if event.kind == "checkpoint" and event.data.get("path"):
            self.checkpoint = str(event.data["path"])

    def _on_finished(self, job: Job, result: Any) -> None:
        self.monitor.refresh()
        self.monitor.progress.setValue(1000)
        self.checkpoint = _checkpoint_of(result, self.config.checkpoint_path)
        chosen = ""
        if isinstance(result, dict) and result.get("selected_on"):
            chosen = f" (epoch {result.get('selected_epoch')}, selected on {result['selected_on']})"
        self.monitor.status.setText(breakable(f"Finished: {self.checkpoint or 'no checkpoint reported'}{chosen}"))
        self.monitor.append_log(f"finished; checkpoint {self.checkpoint}")
        self.ended.emit()

    def _on_failed(self, job: Job, text: str) -> None:
        self.monitor.refresh()
        errors.show_failure(self.monitor.status, text, wrap=breakable)
        self.monitor.append_log(text)
        self.ended.emit()

    def _on_cancelled(self, job: Job) -> None:
        self.monitor.refresh()
        path = self.config.checkpoint_path
        self.checkpoint = str(path) if path.is_file() else self.checkpoint
        saved = f"; checkpoint {self.checkpoint}" if self.checkpoint else ""
        self.monitor.status.setText(breakable(f"Cancelled{saved}"))
        self.monitor.append_log(f"cancelled{saved}")
        self.ended.emit()
