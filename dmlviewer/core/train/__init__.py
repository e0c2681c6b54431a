"""Losses, samplers, adversarial modules and the training loop (see docs/internals.md)."""

from .adversarial import ClassAdversary, DemlAdversary, GradientReversal, adaptive_lambda, reverse_gradient
from .config import TrainConfig, validate
from .losses import (BinomialDevianceLoss, GroupedMetricLoss, activation_decay, build_metric_loss,
                     diversity_loss, non_trivial_penalty)
from .loop import Trainer, TrainingError, train
from .sampler import MPerClassBatches

__all__ = [
    "BinomialDevianceLoss", "ClassAdversary", "DemlAdversary", "GradientReversal", "GroupedMetricLoss",
    "MPerClassBatches", "TrainConfig", "Trainer", "TrainingError", "activation_decay", "adaptive_lambda",
    "build_metric_loss", "diversity_loss", "non_trivial_penalty", "reverse_gradient", "train", "validate",
]
