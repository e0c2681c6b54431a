"""The training configuration: every option of ``dmlviewer train`` in one dataclass.

``validate(config)`` lists what is wrong with a combination of options, one sentence each, so
the command line can stop before any work and the GUI dialog can explain invalid combinations
inline; each names its options by identifier (:class:`~.errors.FieldsError`), which the command
line words as its options and the dialog as its field labels. The configuration is saved with the run as ``RUN/config.json``. This module imports no
torch (the command line builds its parser from it), so the choices of the options live here.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import FieldsError, literal

BACKBONES = ("resnet18", "resnet34", "resnet50", "resnet101", "googlenet", "inception_v3",
             "mobilenet_v3_large", "efficientnet_b0", "efficientnet_lite0", "small_cnn")
POOLINGS = ("gap", "gmp", "gem")
GROUPINGS = ("none", "m", "g", "c", "a")
OPTIMIZERS = ("adam", "adamw", "sgd")
SCHEDULERS = ("constant", "cosine")
AMP_MODES = ("auto", "on", "off")
FREEZE_BN_MODES = ("auto", "on", "off")
SELECT_METRICS = ("map@r", "recall@1")
ADVERSARIAL_MODES = ("none", "smooth", "adaptive")
METRIC_LOSSES = ("contrastive", "triplet", "margin", "binomial", "ms", "proxy_nca")
MINERS = ("auto", "none", "semihard", "multi_similarity", "distance_weighted")

BINOMIAL_PRESETS = {
    # seed 001's official code: alpha = 2, m = 0.5, C = 25 on negatives, balanced, self-pairs in the positive mean
    "dgml": dict(alpha=2.0, margin=0.5, scale_pos=1.0, scale_neg=25.0, balanced=True, self_pairs=True),
    # seed 001 Table 1 as printed: m = 0.5, alpha = 2, beta_1 = 25, beta_0 = 1, mean over all pairs (Eq. 14)
    "dgml_printed": dict(alpha=2.0, margin=0.5, scale_pos=25.0, scale_neg=1.0, balanced=False, self_pairs=False),
    # seed 004 Eq. 5: alpha = 2, beta = 0.5, gamma = 1 (positive) / 35 (negative), 1/w_pq weights
    "deml": dict(alpha=2.0, margin=0.5, scale_pos=1.0, scale_neg=35.0, balanced=True, self_pairs=False),
}

#: seed 001 Eq. 4 variants: the exponent's scale beta_0 and how group pairs are averaged
DIVERSITY_VARIANTS = {
    "official": dict(beta0=25.0, pair_norm="p_minus_1"),  # DGML-master criteria/diversity.py
    "printed": dict(beta0=1.0, pair_norm="mean"),  # Table 1 and the 1/N_g of Eq. 14
}

CHECKPOINT_NAME = "checkpoint.pt"
BEST_NAME = "best.pt"
CONFIG_NAME = "config.json"
METRICS_NAME = "metrics.jsonl"


@dataclass
class TrainConfig:
    """Options of one training run (names follow the ``train`` command's options)."""

    dataset: str = ""
    out: str = ""
    format: str | None = None
    protocol: str = "default"
    # model
    backbone: str = "small_cnn"
    pretrained: str = "none"  # none | imagenet | FILE
    pooling: str = "gmp"  # from scratch (measured, README "Training quality"); the default recipe: gap when pretrained
    grouping: str = "none"
    groups: int = 4
    dim: int = 128
    image_size: int = 128
    multilayer: list[str] = field(default_factory=list)  # seed 003's attended intermediate maps
    # objective (seed 001 Eq. 14, seed 003 Eq. 21-23, seed 004 Eq. 4-6)
    loss: str = "ms"
    miner: str = "auto"
    binomial: str = "dgml"  # preset of the binomial deviance loss (see losses.py)
    triplet_margin: float = 0.1
    diversity: float = 0.0  # lambda_1 of seed 001 Eq. 14
    diversity_variant: str = "official"  # official (DGML code) | printed (seed 001 Eq. 4, 14)
    adversarial: str = "none"  # seed 003: none | smooth | adaptive
    adversarial_weight: float = 0.5  # lambda (smooth, Eq. 21) or lambda_0 (adaptive, Eq. 25)
    deml_adversary: float = 0.0  # lambda_0 of seed 004 Eq. 4
    activation_decay: float = 0.0  # lambda_1 of seed 004 Eq. 6
    non_trivial: float = 0.25  # lambda_2 of seed 004 Eq. 6 (with activation decay only)
    # optimization
    epochs: int = 10
    steps_per_epoch: int = 0  # 0: about one pass over the training images
    classes_per_batch: int = 8
    images_per_class: int = 4
    lr: float = 3e-3
    head_lr_mult: float = 1.0
    weight_decay: float = 2e-4  # lambda_2 |W|^2 of seed 001 Eq. 14 (seed 004's value)
    optimizer: str = "adam"
    scheduler: str = "cosine"
    # model selection and protection of pretrained features
    val_fraction: float = 0.0  # training classes (or images, for few classes) held out to select the checkpoint
    select_metric: str = "map@r"  # validation metric that selects best.pt
    patience: int = 0  # evaluations without a validation improvement before stopping (0: never)
    freeze_bn: str = "auto"  # BatchNorm statistics of the backbone: auto (frozen when pretrained) | on | off
    warmup_epochs: int = 0  # epochs training only the new layers (backbone frozen) first
    # machinery
    device: str = "auto"
    amp: str = "auto"  # mixed precision: auto (on for CUDA) | on | off
    deterministic: bool = False
    num_workers: int = 2
    eval_every: int = 1  # epochs between evaluations (0: only after the last epoch)
    eval_batch_size: int = 64
    log_every: int = 10  # steps between lines in metrics.jsonl
    seed: int = 0
    resume: bool = False
    ks: list[int] = field(default_factory=lambda: [1, 2, 4, 8])

    #: options that may differ between a run and its resumption
    RESUMABLE_CHANGES = ("epochs", "resume", "device", "amp", "num_workers", "eval_every",
                         "eval_batch_size", "log_every", "deterministic", "out", "dataset", "patience")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TrainConfig":
        """Build from a dict; unknown keys are an error (a typo must not be ignored)."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"unknown training option(s): {', '.join(unknown)}")
        return cls(**data)

    @classmethod
    def read(cls, path: str | Path) -> "TrainConfig":
        """The options saved in a run folder (``RUN/config.json``) or in a config file (a
        TrainConfig dict, or one under ``"config"``). The file is not trusted: size-limited, and
        unknown keys or values of the wrong type raise ``ValueError``; missing ``FileNotFoundError``."""
        import json

        from dmlviewer.core.files import read_regular

        path = Path(path)
        file = path / CONFIG_NAME if path.is_dir() else path
        if not file.is_file():
            raise FileNotFoundError(f"no training settings in {path} (expected {file.name})")
        try:
            data = json.loads(read_regular(file, 1 << 20).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{file}: not a training configuration ({exc})") from None
        if isinstance(data, dict) and isinstance(data.get("config"), dict):
            data = data["config"]
        if not isinstance(data, dict):
            raise ValueError(f"{file}: not a training configuration (a JSON object is expected)")
        try:
            return cls.from_dict(data)
        except TypeError as exc:
            raise ValueError(f"{file}: {exc}") from None

    @property
    def run_dir(self) -> Path:
        return Path(self.out)

    @property
    def checkpoint_path(self) -> Path:
        return self.run_dir / CHECKPOINT_NAME

    @property
    def best_path(self) -> Path:
        return self.run_dir / BEST_NAME

    @property
    def batch_size(self) -> int:
        return self.classes_per_batch * self.images_per_class

    @property
    def is_pretrained(self) -> bool:
        return self.pretrained != "none"

    @property
    def frozen_bn(self) -> bool:
        """Whether the backbone's BatchNorm statistics stay fixed (``freeze_bn`` resolved)."""
        return self.freeze_bn == "on" or (self.freeze_bn == "auto" and self.is_pretrained)

    def model_config(self) -> dict[str, Any]:
        """The ``build_model`` configuration of this run."""
        from dmlviewer.core.models import default_config

        return default_config(
            backbone=self.backbone,
            pretrained=None if self.pretrained == "none" else self.pretrained,
            pooling=self.pooling,
            grouping=self.grouping,
            groups=self.groups,
            dim=self.dim,
            image_size=self.image_size,
            multilayer=list(self.multilayer),
        )

    def differences(self, other: "TrainConfig") -> list[str]:
        """Options that differ from ``other`` and may not change on resumption."""
        mine, theirs = self.to_dict(), other.to_dict()
        return [k for k in mine if k not in self.RESUMABLE_CHANGES and mine[k] != theirs[k]]


def _choice(errors: list[FieldsError], name: str, value: Any, choices) -> None:
    if value not in choices:
        errors.append(FieldsError(f"{{{name}}} must be one of {literal(', '.join(map(str, choices)))} "
                                  f"(got {literal(repr(value))})"))


def path_kind(path: str | Path) -> str | None:
    """``"dir"``, ``"file"`` (anything else that exists), ``None`` (missing), or why the name
    cannot be looked at (``"file name too long"``, ...): never raises, whatever was typed."""
    import os
    import stat

    try:
        return "dir" if stat.S_ISDIR(os.stat(path).st_mode) else "file"
    except (FileNotFoundError, NotADirectoryError):
        return None
    except ValueError:  # an embedded NUL character
        return "invalid file name"
    except OSError as exc:
        return (exc.strerror or str(exc)).lower()


def pretrained_problem(backbone: str, pretrained: str | None) -> FieldsError | None:
    """What is wrong with ``pretrained`` weights for ``backbone`` (both trainers): ImageNet weights
    for a backbone that has none, or a weights file that cannot be read."""
    if pretrained in (None, "none"):
        return None
    if pretrained == "imagenet":
        from dmlviewer.core.models import BACKBONES as SPECS

        spec = SPECS.get(backbone)
        if spec is not None and spec.weights_file is None:
            return FieldsError(f"{{pretrained}} imagenet: no ImageNet weights exist for {literal(backbone)}; "
                               "use none or a weights file")
        return None
    from dmlviewer.core.files import file_problem

    problem = file_problem(pretrained)
    if problem:
        return FieldsError(f"{{pretrained}} file not found: {literal(pretrained)}" if problem == "file not found"
                           else f"{{pretrained}} {literal(pretrained)} {literal(problem)}")
    from dmlviewer.core.models.backbones import weights_head_problem

    try:  # its first bytes, before any data is read or model built
        problem = weights_head_problem(pretrained)
    except OSError as exc:
        problem = f"cannot be read ({exc.strerror or exc})"
    if problem:
        return FieldsError(f"{{pretrained}} {literal(pretrained)} {literal(problem)}; give a weights file "
                           "(torch.save or safetensors), imagenet or none")
    return None


def out_problem(out: str, out_kind: str | None) -> FieldsError | None:
    """What is wrong with the run folder ``out`` (``out_kind``: :func:`_kind` of it)."""
    if not out:
        return FieldsError("{out} is required")
    if out_kind not in (None, "dir"):
        return FieldsError(f"{{out}} {literal(out)} exists and is not a folder (the run folder)" if out_kind == "file"
                           else f"{{out}} {literal(out)}: {literal(out_kind)}")
    return None


def run_folder_problem(out: str, out_kind: str | None, resume: bool) -> FieldsError | None:
    """A run folder that holds no run to resume, or holds one and ``resume`` is off."""
    held = out_kind == "dir" and path_kind(Path(out) / CHECKPOINT_NAME) == "file"
    if out and resume and not held:
        return FieldsError(f"{{resume}} but no checkpoint to resume from: {literal(Path(out) / CHECKPOINT_NAME)}")
    if out and not resume and held:
        return FieldsError(f"{literal(out)} already holds a run ({literal(Path(out) / CHECKPOINT_NAME)}): pass "
                           "{resume} to continue it or choose another {out}")
    return None


def device_problem(device: str) -> FieldsError | None:
    """A device that cannot be used here (``resolve_device``'s sentence)."""
    from dmlviewer.core.models import resolve_device

    try:
        resolve_device(device)
    except ValueError as exc:
        return FieldsError("{device}: " + literal(exc))
    return None


def combined(errors: list[FieldsError]) -> FieldsError:
    """One error listing ``errors`` (``; `` between them), as a run refuses an invalid configuration."""
    return FieldsError("; ".join(e.template for e in errors))


def validate(config: TrainConfig) -> list[FieldsError]:
    """Everything wrong with ``config``, one clear sentence each naming its options by
    identifier (:class:`~.errors.FieldsError`; empty when it is valid)."""
    errors: list[FieldsError] = []
    E = FieldsError
    c = config
    out_kind = path_kind(c.out) if c.out else None
    if not c.dataset:
        errors.append(E("{dataset} is required"))
    elif path_kind(c.dataset) != "dir":
        errors.append(E(f"dataset folder not found: {literal(c.dataset)}"))
    errors.append(out_problem(c.out, out_kind))
    numbers = {k: v for k, v in c.to_dict().items() if isinstance(v, float)}
    errors += [E(f"{{{k}}} must be a finite number") for k, v in numbers.items() if not math.isfinite(v)]
    if not 0 <= c.seed < 2**32:
        errors.append(E(f"{{seed}} must be from 0 to {2**32 - 1} (got {c.seed})"))
    if not str(c.device).strip():
        errors.append(E("{device} must not be empty: use auto, cpu, cuda, cuda:N or mps"))
    if str(c.backbone).startswith("timm:"):  # timm:NAME: checked by its model config (imports timm)
        from dmlviewer.core.models.model import check_config

        try:
            check_config(c.model_config())
        except ValueError as exc:
            errors.append(E(f"{{backbone}} {literal(c.backbone)}: {literal(exc)}"))
    else:
        _choice(errors, "backbone", c.backbone, BACKBONES)
    _choice(errors, "pooling", c.pooling, POOLINGS)
    _choice(errors, "grouping", c.grouping, GROUPINGS)
    _choice(errors, "loss", c.loss, METRIC_LOSSES)
    _choice(errors, "miner", c.miner, MINERS)
    _choice(errors, "binomial", c.binomial, tuple(BINOMIAL_PRESETS))
    _choice(errors, "diversity_variant", c.diversity_variant, tuple(DIVERSITY_VARIANTS))
    _choice(errors, "freeze_bn", c.freeze_bn, FREEZE_BN_MODES)
    _choice(errors, "select_metric", c.select_metric, SELECT_METRICS)
    _choice(errors, "adversarial", c.adversarial, ADVERSARIAL_MODES)
    _choice(errors, "optimizer", c.optimizer, OPTIMIZERS)
    _choice(errors, "scheduler", c.scheduler, SCHEDULERS)
    _choice(errors, "amp", c.amp, AMP_MODES)
    errors.append(pretrained_problem(c.backbone, c.pretrained))

    grouped = c.grouping != "none"
    if grouped and c.groups < 2:
        errors.append(E(f"{{grouping}} {literal(c.grouping)} needs {{groups}} of at least 2 (got {c.groups})"))
    if c.dim < 1:
        errors.append(E(f"{{dim}} must be positive (got {c.dim})"))
    elif grouped and c.groups >= 1 and c.dim % c.groups:
        errors.append(E(f"{{dim}} {c.dim} must be divisible by {{groups}} {c.groups} (equal group sizes)"))
    for name in ("diversity", "deml_adversary", "activation_decay", "non_trivial"):
        if getattr(c, name) < 0:
            errors.append(E(f"{{{name}}} cannot be negative (a loss weight; got {getattr(c, name)})"))
    if c.diversity > 0 and not grouped:
        errors.append(E("{diversity} needs a grouping head ({grouping} m, g, c or a): it acts between "
                        "the groups of one image"))
    if c.deml_adversary > 0 and c.grouping != "c":
        errors.append(E("{deml_adversary} needs {grouping} c: DeML's adversary acts between "
                        "channel-attention learners"))
    if c.multilayer:
        from dmlviewer.core.models import BACKBONES as SPECS

        spec = SPECS.get(c.backbone)
        known = set(spec.channels_of) if spec is not None else set()
        unknown = [m for m in c.multilayer if spec is not None and m not in known]
        if unknown:
            errors.append(E(f"{{multilayer}}: {literal(', '.join(unknown))} not a feature map of "
                            f"{literal(c.backbone)} (choose from {literal(', '.join(sorted(known)))})"))
    if not 0 <= c.val_fraction < 1:
        errors.append(E(f"{{val_fraction}} must be at least 0 and below 1 (got {c.val_fraction})"))
    for name in ("patience", "warmup_epochs"):
        if getattr(c, name) < 0:
            errors.append(E(f"{{{name}}} cannot be negative (got {getattr(c, name)})"))
    if c.triplet_margin < 0:
        errors.append(E(f"{{triplet_margin}} cannot be negative (got {c.triplet_margin})"))
    if c.adversarial != "none" and c.adversarial_weight <= 0:
        errors.append(E(f"{{adversarial}} {literal(c.adversarial)} needs a positive {{adversarial_weight}}"))

    if c.images_per_class < 2:
        errors.append(E(f"{{images_per_class}} must be at least 2 to form positive pairs (got {c.images_per_class})"))
    if c.classes_per_batch < 2:
        errors.append(E(f"{{classes_per_batch}} must be at least 2 to form negative pairs (got {c.classes_per_batch})"))
    if c.epochs < 1:
        errors.append(E(f"{{epochs}} must be at least 1 (got {c.epochs})"))
    if c.steps_per_epoch < 0:
        errors.append(E(f"{{steps_per_epoch}} cannot be negative (got {c.steps_per_epoch})"))
    for name in ("lr", "head_lr_mult"):
        if getattr(c, name) <= 0:
            errors.append(E(f"{{{name}}} must be positive (got {getattr(c, name)})"))
    if c.weight_decay < 0:
        errors.append(E(f"{{weight_decay}} cannot be negative (got {c.weight_decay})"))
    if not 32 <= c.image_size <= 4096:
        errors.append(E(f"{{image_size}} must be from 32 to 4096 (got {c.image_size})"))
    if c.dim > 16384:
        errors.append(E(f"{{dim}} must be at most 16384 (got {c.dim})"))
    if not 1 <= c.groups <= 512:
        errors.append(E(f"{{groups}} must be from 1 to 512 (got {c.groups})"))
    for name, low in (("num_workers", 0), ("eval_every", 0), ("eval_batch_size", 1), ("log_every", 1)):
        if getattr(c, name) < low:
            errors.append(E(f"{{{name}}} must be at least {low} (got {getattr(c, name)})"))
    if not c.ks or min(c.ks) < 1:
        errors.append(E("recall K values must be positive integers"))

    problem = device_problem(c.device)
    if problem is None and c.amp == "on":
        from dmlviewer.core.models import resolve_device

        device = resolve_device(c.device)
        if device.type != "cuda":
            problem = E(f"{{amp}} on needs a CUDA device (device is {literal(device)})")
    errors.append(problem)
    errors.append(run_folder_problem(c.out, out_kind, c.resume))
    return [e for e in errors if e is not None]
