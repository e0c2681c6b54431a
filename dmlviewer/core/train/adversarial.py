"""Adversarial modules trained through a gradient reversal layer (GRL).

- :class:`GradientReversal`: identity forward, gradient multiplied by ``-scale`` backward
  (Ganin et al., used by seed 003 Sec. 4 and seed 004 Eq. 4).
- :class:`ClassAdversary`: seed 003's class adversarial module (Eq. 17-25). A classifier with one
  hidden layer followed by dropout (Sec. 4, Fig. 11) on the feature extractor's output f_i
  (read here as the global average of the backbone's last feature map).

  ``smooth`` (Soft-Adv, Eq. 19-21): cross-entropy against label-smoothed targets
  y_ls = (1 - a) y_hot + a / C, added as ``+ weight * l_c``; classifier and feature extractor
  both minimize it (no GRL).

  ``adaptive`` (Adapt-Adv, Eq. 22-25): the classifier sits behind a GRL of scale lambda, so the
  classifier minimizes l_c (Eq. 24) while the feature extractor minimizes l_m - lambda l_c
  (Eq. 23). lambda = -tanh(l_c - l_thresh) * lambda_0 (Eq. 25) is updated once per epoch from
  the epoch's mean l_c; before the first update l_c is taken as log C, the loss of a
  classifier that knows nothing. Negative lambda (early, l_c high) makes the two cooperate.

- :class:`DemlAdversary`: seed 004 Eq. 4. An adversary network F maps each learner's output;
  L_adv = lambda_0 * mean_n sum_{j<j'} |F(CA_j(x_n)) - F(CA_j'(x_n))|^2. F minimizes L_adv and,
  through the GRL, the learners maximize it. Readings: F is a two-layer perceptron
  (Dg -> Dg -> Dg with ReLU; the paper's Fig. 3c is not in the text), and it takes the
  *L2-normalized* learner outputs, so that the maximizing side cannot grow the discrepancy by
  scaling alone (the metric loss only sees directions).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .config import ADVERSARIAL_MODES  # noqa: F401 - re-exported


class _ReverseGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(scale)
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (scale,) = ctx.saved_tensors
        return -scale.to(grad.dtype) * grad, None


def reverse_gradient(x: torch.Tensor, scale: float | torch.Tensor = 1.0) -> torch.Tensor:
    """Identity in the forward pass; multiplies the gradient by ``-scale`` in the backward pass."""
    if not isinstance(scale, torch.Tensor):
        scale = torch.tensor(float(scale), device=x.device)
    return _ReverseGrad.apply(x, scale.detach())


class GradientReversal(nn.Module):
    """Module form of :func:`reverse_gradient` with a fixed scale."""

    def __init__(self, scale: float = 1.0) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return reverse_gradient(x, self.scale)


def adaptive_lambda(class_loss: float, lambda0: float, threshold: float = 1.5) -> float:
    """Seed 003 Eq. 25: ``lambda = -tanh(l_c - l_thresh) * lambda_0``."""
    return -math.tanh(class_loss - threshold) * lambda0


class ClassAdversary(nn.Module):
    """Seed 003's classification module with the smooth or adaptive adversarial objective.

    ``forward(features, labels)`` returns the term to add to the metric loss and the plain
    classification loss l_c (for logging and the per-epoch lambda update)."""

    def __init__(self, in_dim: int, num_classes: int, mode: str, weight: float = 1.0,
                 hidden: int = 512, dropout: float = 0.1, smoothing: float = 0.15,
                 threshold: float = 1.5) -> None:
        super().__init__()
        if mode not in ("smooth", "adaptive"):
            raise ValueError(f"unknown adversarial mode {mode!r}")
        self.mode, self.weight = mode, weight
        self.smoothing, self.threshold = smoothing, threshold
        self.classifier = nn.Sequential(
            nn.Linear(in_dim, hidden), nn.ReLU(inplace=True), nn.Dropout(dropout), nn.Linear(hidden, num_classes)
        )
        start = adaptive_lambda(math.log(num_classes), weight, threshold) if mode == "adaptive" else weight
        self.register_buffer("lam", torch.tensor(float(start)))

    def forward(self, features: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.mode == "smooth":
            logits = self.classifier(features)
            l_c = F.cross_entropy(logits, labels, label_smoothing=self.smoothing)  # Eq. 19-20
            return self.lam * l_c, l_c  # Eq. 21
        logits = self.classifier(reverse_gradient(features, self.lam))
        l_c = F.cross_entropy(logits, labels)  # Eq. 18
        return l_c, l_c  # features see -lambda * grad l_c (Eq. 23), the classifier grad l_c (Eq. 24)

    def end_epoch(self, mean_class_loss: float) -> None:
        """Per-epoch update of lambda from the epoch's mean l_c (Eq. 25; adaptive mode only)."""
        if self.mode == "adaptive":
            self.lam.fill_(adaptive_lambda(mean_class_loss, self.weight, self.threshold))


class DemlAdversary(nn.Module):
    """Seed 004 Eq. 4 between the J learners (groups) of one image, through a GRL."""

    def __init__(self, group_dim: int, weight: float = 1.0) -> None:
        super().__init__()
        self.weight = weight
        self.net = nn.Sequential(nn.Linear(group_dim, group_dim), nn.ReLU(inplace=True), nn.Linear(group_dim, group_dim))

    def discrepancy(self, groups: torch.Tensor) -> torch.Tensor:
        """``mean_n sum_{j<j'} |F(a_j) - F(a_j')|^2`` of Eq. 4 (no GRL, no weight);
        ``groups``: B x J x Dg, normalized here."""
        out = self.net(F.normalize(groups, dim=2))
        j = groups.shape[1]
        a, b = torch.triu_indices(j, j, offset=1, device=groups.device)
        return (out[:, a] - out[:, b]).pow(2).sum(dim=(1, 2)).mean()

    def forward(self, groups: torch.Tensor) -> torch.Tensor:
        """The term to add to the total loss: F minimizes it, the learners maximize it."""
        return self.weight * self.discrepancy(reverse_gradient(groups, 1.0))
