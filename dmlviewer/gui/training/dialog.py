"""The training dialog: the form (:mod:`.form`) beside the run's monitor (:mod:`.monitor`), Start,
Cancel and Open checkpoint for the run (:mod:`.run`), and the settings remembered between
openings and loaded from a run folder.

The form edits a :class:`dmlviewer.core.train.TrainConfig`; what is wrong with the current
combination (``core.train.validate``) is listed under the form and Start stays disabled until
the list is empty. The run is a process job of the :class:`~dmlviewer.gui.jobs.runner.JobRunner`.
Its ``step`` events feed a per-step loss plot, its ``eval`` events a Recall@1 / NMI per epoch
plot; the log shows the other events. The core writes the settings to ``RUN/config.json``;
"Load settings..." reads them back from a run folder. When the run ends the new checkpoint can
be opened in the main window.
"""

from __future__ import annotations

import dataclasses
import html
import json
import logging
from pathlib import Path
from typing import Any, Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialog, QFileDialog, QHBoxLayout, QLabel, QPushButton, QSplitter, QVBoxLayout, QWidget

from dmlviewer.core.fields import worded
from dmlviewer.gui.common.widgets import fit_to_screen, scrolling
from dmlviewer.gui.jobs.job import Job
from dmlviewer.gui.jobs.runner import JobRunner
from dmlviewer.gui.training.form import RESUME_TEXT, RUN_FOLDER_TEXT, TrainingForm, set_combo, field_names
from dmlviewer.gui.training.monitor import METRIC_TITLES, TrainingMonitor, breakable
from dmlviewer.gui.training.run import TrainingRun, default_run_folder, next_run_folder, read_run_settings

log = logging.getLogger(__name__)

#: QSettings key of the last settings used in the dialog (JSON of a TrainConfig).
LAST_SETTINGS_KEY = "training/last_settings"
#: the recipe fields of the last two-branch run set up (TrainingForm.cross_view_fields)
CROSS_VIEW_SETTINGS_KEY = "training/last_cross_view_settings"
#: Options not carried over from one opening to the next (a new run goes to a new folder).
_NOT_REMEMBERED = ("out", "resume")


class TrainingDialog(QDialog):
    """Configure, launch and watch a training run (non-modal; closing it keeps the run going).

    ``open_checkpoint(path)`` is called when the user opens the finished run's checkpoint
    (the main window's ``open_checkpoint``).
    """

    def __init__(self, runner: JobRunner, dataset: str | None = None, dataset_format: str | None = None,
                 open_checkpoint: Callable[[str], Any] | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Train a model")
        self.runner = runner
        self.open_checkpoint_callback = open_checkpoint
        self._progress_cache: tuple = (None, None)  # (run folder checkpoint's path, mtime, size), its progress
        self.form = TrainingForm()
        self.monitor = TrainingMonitor()
        self.run = TrainingRun(runner, self.monitor, self)
        self.problems = QLabel()
        self.problems.setWordWrap(True)
        self.problems.setTextFormat(Qt.RichText)
        self.problems.setObjectName("problems")
        self.load_button = QPushButton("Load settings...")
        self.start_button = QPushButton("Start")
        self.start_button.setDefault(True)
        self.cancel_button = QPushButton("Cancel run")
        self.open_button = QPushButton("Open checkpoint")
        self.close_button = QPushButton("Close")
        self.cancel_button.setEnabled(False)
        self.open_button.setEnabled(False)

        scroll = scrolling(self.form)  # the form scrolls; its spin boxes leave the wheel to it
        scroll.setMinimumWidth(self.form.sizeHint().width() + scroll.verticalScrollBar().sizeHint().width() + 8)
        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(0, 0, 0, 0)
        left_layout.addWidget(scroll, 1)
        left_layout.addWidget(self.problems)
        splitter = QSplitter(Qt.Horizontal)
        splitter.addWidget(left)
        splitter.addWidget(self.monitor)
        splitter.setStretchFactor(1, 1)
        buttons = QHBoxLayout()
        buttons.addWidget(self.load_button)
        buttons.addStretch(1)
        for b in (self.start_button, self.cancel_button, self.open_button, self.close_button):
            buttons.addWidget(b)
        layout = QVBoxLayout(self)
        layout.addWidget(splitter, 1)
        layout.addLayout(buttons)
        fit_to_screen(self, 1300, 860)  # Start and Close stay on a 1366 x 768 screen

        self.restore_settings()
        self.propose_run_folder()
        self.form.changed.connect(self.revalidate)
        self.load_button.clicked.connect(self.load_settings)
        self.start_button.clicked.connect(self.start)
        self.cancel_button.clicked.connect(self.cancel)
        self.open_button.clicked.connect(self.open_result)
        self.close_button.clicked.connect(self.close)
        self.run.ended.connect(self._end_run)
        if dataset:
            self.set_dataset(dataset, dataset_format)
        self.revalidate()

    @property
    def job(self) -> Job | None:
        """The last run's job."""
        return self.run.job

    @property
    def run_config(self):
        """The TrainConfig of the last run started."""
        return self.run.config

    @property
    def checkpoint(self) -> str | None:
        """The last run's checkpoint, to open."""
        return self.run.checkpoint

    # -- form
    def set_dataset(self, path: str, fmt: str | None = None) -> None:
        """Use ``path`` (the main window's current dataset) for the next run."""
        w = self.form.widgets
        w["dataset"].setText(str(path))
        if fmt is not None and w["format"].findData(fmt) >= 0:
            set_combo(w["format"], fmt)

    def propose_run_folder(self, after: str | Path | None = None) -> str:
        """Put a new run folder into the form: a fresh ``runs/run-<date-time>`` in the output
        folder at opening, or the next free folder beside ``after`` (a run that has just ended
        or been cancelled: ``run`` -> ``run-2``), with Resume unticked. The dataset field never
        changes it."""
        folder = next_run_folder(after) if after else default_run_folder()
        self.form.widgets["out"].setText(folder)
        self.form.widgets["resume"].setChecked(False)
        self.monitor.append_log(f"the next run goes to {folder}")
        return folder

    # -- remembered settings
    def save_settings(self) -> None:
        """Remember the form's settings for the next opening (run folder and resume excepted);
        a two-branch form's recipe fields are remembered apart, so that neither kind of run
        inherits the other's epochs, sizes or rates."""
        from dmlviewer.gui.window import settings

        try:
            data = self.form.config().to_dict()
        except (TypeError, ValueError):
            return
        store = settings.app_settings()
        if self.form.two_branch():
            self.form.cross_view_values = self.form.cross_view_fields()
            store.setValue(CROSS_VIEW_SETTINGS_KEY, json.dumps(self.form.cross_view_values))
        else:
            for key in _NOT_REMEMBERED:
                data.pop(key, None)
            store.setValue(LAST_SETTINGS_KEY, json.dumps(data))
        store.sync()

    def restore_settings(self) -> bool:
        """Fill the form with the settings remembered from the last opening (False when none,
        or when they no longer fit this version's options: the defaults stay)."""
        from dmlviewer.core.train.config import TrainConfig
        from dmlviewer.gui.window import settings

        self._restore_cross_view_values()
        text = settings.app_settings().value(LAST_SETTINGS_KEY, "")
        if not text:
            return False
        try:
            data = {**self.form.config().to_dict(), **json.loads(str(text))}
            for key in _NOT_REMEMBERED:
                data[key] = getattr(TrainConfig(), key)
            self.form.set_config(TrainConfig.from_dict(data))
        except (TypeError, ValueError) as exc:
            log.info("remembered training settings not used: %s", exc)
            return False
        return True

    def hideEvent(self, event) -> None:  # noqa: N802 - Qt API
        self.save_settings()
        super().hideEvent(event)

    def problems_list(self) -> list[str]:
        """What stops a run, in the dialog's words: ``core.train.validate`` with the options
        named by their fields, and the run folder's state (already holding a run, or nothing to
        resume) said in terms of the Run folder field and the Resume box."""
        from dmlviewer.core.files import file_problem
        from dmlviewer.core.train import validate

        try:
            config = self.form.config()
        except (TypeError, ValueError) as exc:
            return [str(exc)]
        held = bool(config.out) and file_problem(config.checkpoint_path) is None
        # the run folder's state is said here, in terms of the folder field and the Resume box
        if self.form.two_branch():
            problems = self._two_branch_problems(held)
        else:
            names = field_names(self.form.labels)
            problems = [worded(p, names) for p in validate(dataclasses.replace(config, resume=held))]
        resume, folder = f"“{RESUME_TEXT}”", f"“{RUN_FOLDER_TEXT}”"
        if held and not config.resume:
            problems.append(f"the {folder} already holds a run ({config.checkpoint_path.name}): tick {resume} to "
                            f"continue it, or choose another folder, e.g. {next_run_folder(config.out)}")
        elif config.resume and not held and config.out:
            problems.append(f"nothing to resume: the {folder} holds no {config.checkpoint_path.name}; untick "
                            f"{resume} to start a new run there")
        elif held and config.resume:
            done, within = self._saved_progress(config.checkpoint_path) or (0, True)
            if done >= config.epochs and not within:
                problems.append(f"nothing to resume: the run in the {folder} already finished its {done} epoch(s); "
                                f"raise “{self.form.labels.get('epochs', 'Epochs')}” above {done} to train it further")
        return problems

    def _saved_progress(self, path) -> tuple[int, bool] | None:
        """``core.train.saved_run.saved_progress`` of the run folder's checkpoint, read again
        only when the file changes (the form revalidates on every edit)."""
        from dmlviewer.core.train.saved_run import saved_progress

        try:
            st = path.stat()
        except OSError:
            return None
        key = (str(path), st.st_mtime_ns, st.st_size)
        if self._progress_cache[0] != key:
            self._progress_cache = (key, saved_progress(path))
        return self._progress_cache[1]

    def _two_branch_problems(self, held: bool) -> list[str]:
        """``validate_cross_view`` of a two-branch run, in the dialog's words, and a dataset that
        is not a cross-view one."""
        from dmlviewer.core.train.cross_view import validate_cross_view

        config = self.form.cross_view_config()
        names = field_names(self.form.labels)
        problems = [worded(p, names) for p in validate_cross_view(dataclasses.replace(config, resume=held))]
        fmt = self.form._dataset_format
        if config.dataset and fmt is not None and fmt != "cvusa":
            problems.append(f"two branches need a cross-view dataset in CVUSA's layout (street and aerial "
                            f"images, splits/*.csv); this one is {fmt}: choose 1 branch")
        return problems

    def revalidate(self) -> list[str]:
        problems = self.problems_list()
        if self.job is None or self.job.ended:  # the plot names what the next run will measure
            self.monitor.metric_plot.setTitle(METRIC_TITLES[self.form.two_branch()])
        if problems:
            items = "".join(f"<li>{breakable(html.escape(p, quote=False))}</li>" for p in problems)
            self.problems.setText(f"<span style='color:#eb5757'><b>Cannot start:</b><ul style='margin:0'>"
                                  f"{items}</ul></span>")
        else:
            self.problems.setText("<span style='color:#27ae60'>Ready.</span>")
        self._update_buttons(problems)
        return problems

    def _update_buttons(self, problems: list[str] | None = None) -> None:
        running = self.run.running
        if problems is None:
            problems = self.problems_list()
        self.start_button.setEnabled(not running and not problems)
        self.cancel_button.setEnabled(running and not self.job.cancel_requested)
        self.form.setEnabled(not running)
        self.load_button.setEnabled(not running)

    def _restore_cross_view_values(self) -> None:
        """The remembered two-branch recipe fields, those that still fit the form's options."""
        from dmlviewer.gui.window import settings

        try:
            saved = json.loads(str(settings.app_settings().value(CROSS_VIEW_SETTINGS_KEY, "") or "{}"))
        except ValueError:
            saved = {}
        defaults = self.form.cross_view_defaults()
        self.form.cross_view_values = {k: v for k, v in (saved if isinstance(saved, dict) else {}).items()
                                       if k in defaults and type(v) is type(defaults[k])}

    def load_settings(self, path: str | None = None) -> bool:
        """Fill the form from a run folder's ``config.json`` (asks for the folder if not given)."""
        if not path:
            from dmlviewer.gui.window import settings

            start = settings.start_dir(self.form.widgets["out"].text() and Path(self.form.widgets["out"].text()).parent)
            path = QFileDialog.getExistingDirectory(self, "Load settings from a run folder", start)
            if not path:
                return False
        try:
            from dmlviewer.core.train.cross_view import saved_config

            cross_view = saved_config(path) if Path(path).is_dir() else None
            if cross_view is not None:  # a two-branch run (train --branches 2, or this dialog)
                self.form.set_two_branch_settings(cross_view)
            else:
                config = read_run_settings(path)
                self.form.set_config(config)
        except (OSError, ValueError, TypeError) as exc:
            from dmlviewer.gui.common.errors import show_error

            show_error(self, "Load settings", f"Could not load training settings from {path}: {exc}")
            return False
        self.monitor.append_log(f"settings loaded from {path}")
        self.revalidate()
        return True

    # -- run
    def start(self) -> Job | None:
        """Start a run of the form's settings (None when one runs or the form has problems)."""
        if self.run.running:
            return None
        problems = self.revalidate()
        if problems:
            return None
        self.save_settings()
        self.open_button.setEnabled(False)
        cross_view = self.form.cross_view_config() if self.form.two_branch() else None
        job = self.run.start(self.form.config(), cross_view, field_names(self.form.labels))
        self._update_buttons([])
        self.problems.setText("Running: the settings are locked until the run ends.")
        return job

    def cancel(self) -> None:
        if self.run.running:
            self.run.cancel()
            self._update_buttons([])

    def open_result(self) -> None:
        if self.checkpoint and self.open_checkpoint_callback is not None:
            self.open_checkpoint_callback(self.checkpoint)

    def _end_run(self) -> None:
        """A run ended (finished, failed or cancelled): the next one is proposed in a new folder
        beside it, so Start is ready again (tick Resume and choose the old folder to continue)."""
        self.open_button.setEnabled(bool(self.checkpoint) and self.open_checkpoint_callback is not None)
        self.propose_run_folder(after=self.run_config.out)
        self.revalidate()
