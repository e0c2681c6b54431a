"""Losses, samplers, adversarial modules, recipes and the training loop (see docs/internals.md).

The options (``config``) and recipes import no torch, so the command line can build its parser
from them; every other name is imported on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from .config import TrainConfig, validate
from .recipes import RECIPES, apply_recipe

_LAZY_NAMES = {
    "ClassAdversary": "adversarial", "DemlAdversary": "adversarial", "GradientReversal": "adversarial",
    "adaptive_lambda": "adversarial", "reverse_gradient": "adversarial",
    "BinomialDevianceLoss": "losses", "GroupedMetricLoss": "losses", "activation_decay": "losses",
    "build_metric_loss": "losses", "diversity_loss": "losses", "non_trivial_penalty": "losses",
    "Trainer": "loop", "TrainingError": "loop", "train": "loop",
    "MPerClassBatches": "sampler",
}

__all__ = sorted([*_LAZY_NAMES, "RECIPES", "TrainConfig", "apply_recipe", "validate"])


def __getattr__(name: str) -> Any:
    if name in _LAZY_NAMES:
        return getattr(importlib.import_module(f".{_LAZY_NAMES[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
