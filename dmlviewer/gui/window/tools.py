"""The Tools menu of the main window: training, evaluation, localization, embedding, jobs, and
the faithfulness of the pair on screen (with the pair view's occlusion baseline).

``install_tools(main_window)`` adds one action per tool through
``main_window.add_tool_action`` and a "Jobs" dock (toggled under View, through
``main_window.add_view_action``). Each tool window is created on first use,
kept (closing it only hides it, a run keeps going) and prefilled with the main window's
current dataset, checkpoint and features each time it is shown. The tools use the main
window's ``runner``; their results flow back through its public methods (``open_checkpoint``,
``set_pair``) and signals.

Used from the main window: ``runner``, and its read-only views of ``main_window.session`` (the
app's state, ``core.session``): ``dataset`` (with ``paths``), ``dataset_path``,
``dataset_format``, ``checkpoint_path`` (None for a model from code or a live module),
``features_path``, ``open_checkpoint(path)``,
``set_pair(query_index, reference_index)``, ``add_tool_action(action)``,
``add_view_action(dock, text)``, ``addDockWidget(area, dock)``, and for the pair's faithfulness
``model``, ``model_lock``, ``device``, ``pair_view`` (``images``, ``set_occlusion_baseline``),
``tools_menu``.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QActionGroup, QKeySequence
from PySide6.QtWidgets import QWidget

from dmlviewer.gui.jobs.jobs_view import JobsDock

log = logging.getLogger(__name__)


class Tools:
    """The tool windows of one main window (created on first use)."""

    def __init__(self, main_window: Any) -> None:
        self.main_window = main_window
        self.runner = main_window.runner
        self.jobs_dock = JobsDock(self.runner, main_window)
        self.training = None
        self.evaluation = None
        self.localization = None
        self.embedding = None
        self.pair_faithfulness = None
        self._path_index: tuple[Any, dict[str, int]] | None = None  # (dataset, path -> index)

    # -- the current sources of the main window
    def _sources(self) -> dict[str, Any]:
        mw = self.main_window
        return {"checkpoint": getattr(mw, "checkpoint_path", None), "dataset": getattr(mw, "dataset_path", None),
                "dataset_format": getattr(mw, "dataset_format", None)}

    @staticmethod
    def _show(window: QWidget) -> QWidget:
        window.show()
        window.raise_()
        window.activateWindow()
        return window

    # -- tool windows
    def show_training(self):
        from dmlviewer.gui.training.dialog import TrainingDialog

        src = self._sources()
        if self.training is None:
            self.training = TrainingDialog(self.runner, src["dataset"], src["dataset_format"],
                                           open_checkpoint=self.main_window.open_checkpoint,
                                           parent=self.main_window)
        elif src["dataset"] and not self.training.form.widgets["dataset"].text():
            self.training.set_dataset(src["dataset"], src["dataset_format"])
        return self._show(self.training)

    def show_evaluation(self):
        from dmlviewer.gui.evaluation.evaluation_view import EvaluationView

        if self.evaluation is None:
            self.evaluation = EvaluationView(self.runner, self.main_window)
            self.evaluation.setWindowFlag(Qt.Window)
            self.evaluation.evaluated.connect(self._offer_features)
        self._prefill(self.evaluation)
        return self._show(self.evaluation)

    def show_localization(self):
        from dmlviewer.gui.evaluation.localization_view import LocalizationView

        if self.localization is None:
            self.localization = LocalizationView(self.runner, self.main_window)
            self.localization.setWindowFlag(Qt.Window)
            self.localization.localization_computed.connect(self._add_localization_row)
        self._prefill(self.localization)
        return self._show(self.localization)

    def show_embedding(self):
        from dmlviewer.gui.retrieval.embedding_view import EmbeddingView

        if self.embedding is None:
            self.embedding = EmbeddingView(self.runner, self.main_window)
            self.embedding.setWindowFlag(Qt.Window)
            self.embedding.query_selected.connect(self.select_query)
        features = getattr(self.main_window, "features_path", None)
        if features and not self.embedding.features.text():
            self.embedding.set_features(features)
        return self._show(self.embedding)

    def show_pair_faithfulness(self):
        """Deletion and insertion curves of the pair on screen, in a small window."""
        from dmlviewer.gui.evaluation.faithfulness_view import PairFaithfulnessWindow

        mw = self.main_window
        images = getattr(getattr(mw, "pair_view", None), "images", None)
        if getattr(mw, "model", None) is None or images is None:
            mw.statusBar().showMessage("Open a checkpoint and choose a pair first", 6000)
            return None
        if self.pair_faithfulness is None:
            self.pair_faithfulness = PairFaithfulnessWindow(self.runner, mw)
            self.pair_faithfulness.setWindowFlag(Qt.Window)
        title = f"{images.query_title}  vs  {images.reference_title}"
        self.pair_faithfulness.set_pair(mw.model, images, mw.device, mw.model_lock, title)
        return self._show(self.pair_faithfulness)

    def _prefill(self, view) -> None:
        src = self._sources()
        if not view.inputs.checkpoint.text() and src["checkpoint"]:
            view.set_sources(checkpoint=src["checkpoint"])
        if not view.inputs.dataset.text() and src["dataset"]:
            view.set_sources(dataset=src["dataset"], dataset_format=src["dataset_format"])

    # -- results back to the main window
    def _add_localization_row(self, checkpoint: str, method: str, accuracy: float) -> None:
        if self.evaluation is None:
            from dmlviewer.gui.evaluation.evaluation_view import EvaluationView

            self.evaluation = EvaluationView(self.runner, self.main_window)
            self.evaluation.setWindowFlag(Qt.Window)
            self.evaluation.evaluated.connect(self._offer_features)
        self.evaluation.add_localization(checkpoint, method, accuracy)

    def _offer_features(self, column) -> None:
        if self.embedding is not None and column.features and not self.embedding.features.text():
            self.embedding.set_features(column.features)

    def select_query(self, row: int, path: str) -> None:
        """Make the image ``path`` (a features file's row) the main window's query."""
        dataset = getattr(self.main_window, "dataset", None)
        if dataset is None:
            self.main_window.statusBar().showMessage("Open the dataset of these features to explore them", 6000)
            return
        if self._path_index is None or self._path_index[0] is not dataset:
            self._path_index = (dataset, {p: i for i, p in enumerate(dataset.paths)})
        index = self._path_index[1].get(path)
        if index is None:
            self.main_window.statusBar().showMessage(f"{path} is not in the open dataset", 6000)
            return
        self.main_window.set_pair(query_index=index, reference_index=None)


def install_tools(main_window: Any) -> Tools:
    """Add the tools' actions to ``main_window``'s Tools menu and the Jobs dock; returns the
    :class:`Tools` (also kept as ``main_window.tools``)."""
    tools = Tools(main_window)
    main_window.addDockWidget(Qt.BottomDockWidgetArea, tools.jobs_dock)
    entries: list[tuple[str, str | None, Callable]] = [
        ("&Train a Model…", "Ctrl+Shift+T", tools.show_training),
        ("&Evaluate Checkpoints…", "Ctrl+Shift+E", tools.show_evaluation),
        ("&Localization and Correspondence…", None, tools.show_localization),
        ("Embedding &Projection…", None, tools.show_embedding),
    ]
    for text, shortcut, slot in entries:
        action = QAction(text, main_window)
        if shortcut:
            action.setShortcut(QKeySequence(shortcut))
        action.triggered.connect(slot)  # the slots take no argument: "checked" is dropped
        main_window.add_tool_action(action)
    _install_pair_actions(main_window, tools)
    from dmlviewer.gui.jobs import report_job  # Tools > Report (issue 33)

    report_job.install(main_window)
    # The Jobs dock is shown and hidden from the View menu, with the other docks.
    main_window.add_view_action(tools.jobs_dock, "&Jobs")
    main_window.tools = tools
    return tools


def _install_pair_actions(main_window: Any, tools: Tools) -> None:
    """"Faithfulness of This Pair" and the "Occlusion Baseline" choice of the pair view's
    Occlusion map (blur, mean, noise)."""
    action = QAction("&Faithfulness of This Pair…", main_window)
    action.triggered.connect(tools.show_pair_faithfulness)
    main_window.add_tool_action(action)
    pair_view = getattr(main_window, "pair_view", None)
    menu = getattr(main_window, "tools_menu", None)
    if pair_view is None or menu is None:
        return
    baselines = menu.addMenu("Occlusion &Baseline")
    group = QActionGroup(baselines)
    for name, text in (("blur", "Blurred image"), ("mean", "Mean colour"), ("noise", "Noise")):
        choice = baselines.addAction(text)
        choice.setCheckable(True)
        choice.setChecked(name == pair_view.occlusion_baseline)
        choice.triggered.connect(lambda _=False, n=name: pair_view.set_occlusion_baseline(n))
        group.addAction(choice)
