"""Metric losses, the diversity loss and activation decay.

Contrastive, triplet, margin, multi-similarity and proxy-NCA come from
pytorch-metric-learning (``build_metric_loss``); written here is what it lacks:

- :class:`BinomialDevianceLoss`: seed 001 Table 1 / Eq. 2 and seed 004 Eq. 5.
- :func:`diversity_loss`: seed 001 Eq. 4, averaged over the group pairs of each image as in
  the second term of Eq. 14.
- :func:`activation_decay` and :func:`non_trivial_penalty`: seed 004 Eq. 6.
- :class:`GroupedMetricLoss`: the metric loss applied to each group separately (seed 001
  Sec. 3.2, each group L2-normalized on its own), averaged over groups (the 1/(IJ) of seed 004
  Eq. 5).

Readings chosen where the papers leave room:

- Binomial deviance, ``preset="deml"`` (seed 004 Eq. 5, the default): pairs p != q, D the
  cosine similarity, positive term log(1 + exp(-alpha (D - beta))), negative term
  log(1 + exp(alpha (D - beta) gamma)) with gamma = 35, each pair weighted 1/w_pq where w_pq is
  the number of positive (negative) pairs in the batch: the loss is the mean over positive
  pairs plus the mean over negative pairs. ``preset="dgml"`` (seed 001 Table 1): scale beta_1
  = 25 on the positive term and beta_0 = 1 on the negative term, exactly as printed there, and
  the plain mean over all pairs (the 1/N_b of Eq. 14).
- Diversity (Eq. 4): s_ij is read as the cosine *similarity* of groups i and j of one image
  (the paper calls it a distance, but the form is the negative-pair binomial term, which
  pushes similarity down); alpha = 2, beta_0 = 1, mu = 0.5 from Table 1's binomial deviance.
  Unordered group pairs i < j.
- Eq. 6's trace of a Hadamard product, tr[(w w^T - I) o (w w^T - I)], keeps only the diagonal:
  it equals sum_k (|w_k|^2 - 1)^2 over the rows w_k of a learner's weight matrix.
- Constants the papers do not fix for our setting: triplet margin 0.1 (with semi-hard mining;
  seed 003's 0.01 belongs to its own embedding scale), multi-similarity alpha = 2, beta = 50,
  base 0.5 (Wang et al.), proxy-NCA on squared distances scaled by 9 (the reference code's
  3x scaling of embeddings and proxies).
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

METRIC_LOSSES = ("contrastive", "triplet", "margin", "binomial", "ms", "proxy_nca")
MINERS = ("auto", "none", "semihard", "multi_similarity", "distance_weighted")

#: absolute learning rates of the losses' own parameters, from the papers
LOSS_PARAM_LR = {
    "margin": 5e-4,  # lr_eta of the learnable margin beta, seed 001 Table 1
    "proxy_nca": 1e-2,  # proxy learning rate, seed 003 Table 2
}

BINOMIAL_PRESETS = {
    # seed 004 Eq. 5: alpha = 2, beta = 0.5, gamma = 1 (positive) / 35 (negative), 1/w_pq weights
    "deml": dict(alpha=2.0, margin=0.5, scale_pos=1.0, scale_neg=35.0, balanced=True),
    # seed 001 Table 1: m = 0.5, alpha = 2, beta_1 = 25, beta_0 = 1, mean over all pairs (Eq. 14)
    "dgml": dict(alpha=2.0, margin=0.5, scale_pos=25.0, scale_neg=1.0, balanced=False),
}


class BinomialDevianceLoss(nn.Module):
    """Binomial deviance over all pairs of a batch (seed 001 Eq. 2, seed 004 Eq. 5).

    ``l = l_pq log(1 + exp(-alpha (s - m) scale_pos)) + (1 - l_pq) log(1 + exp(alpha (s - m) scale_neg))``
    with s the cosine similarity; ``balanced`` weights each pair by 1 / (number of pairs of its
    kind) (Eq. 5), otherwise the mean over all pairs is taken (Eq. 14)."""

    def __init__(self, alpha: float = 2.0, margin: float = 0.5, scale_pos: float = 1.0,
                 scale_neg: float = 35.0, balanced: bool = True) -> None:
        super().__init__()
        self.alpha, self.margin = alpha, margin
        self.scale_pos, self.scale_neg = scale_pos, scale_neg
        self.balanced = balanced

    @classmethod
    def preset(cls, name: str) -> "BinomialDevianceLoss":
        return cls(**BINOMIAL_PRESETS[name])

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        x = F.normalize(embeddings, dim=1)
        sim = x @ x.T
        same = labels[:, None] == labels[None, :]
        off_diag = ~torch.eye(len(labels), dtype=torch.bool, device=labels.device)
        pos, neg = same & off_diag, ~same
        z = self.alpha * (sim - self.margin)
        pos_loss = F.softplus(-z * self.scale_pos)
        neg_loss = F.softplus(z * self.scale_neg)
        if self.balanced:
            return _masked_mean(pos_loss, pos) + _masked_mean(neg_loss, neg)
        total = (pos_loss * pos).sum() + (neg_loss * neg).sum()
        return total / off_diag.sum().clamp(min=1)


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (values * mask).sum() / mask.sum().clamp(min=1)


def diversity_loss(groups: torch.Tensor, alpha: float = 2.0, beta0: float = 1.0,
                   mu: float = 0.5) -> torch.Tensor:
    """Seed 001 Eq. 4 between every two groups of the same image, averaged over images and
    group pairs (Eq. 14): ``mean log(1 + exp(alpha (s_ij - mu) beta0))``. ``groups``: B x P x Dg."""
    p = groups.shape[1]
    if p < 2:
        return groups.new_zeros(())
    x = F.normalize(groups, dim=2)
    sim = x @ x.transpose(1, 2)  # B x P x P
    i, j = torch.triu_indices(p, p, offset=1, device=groups.device)
    return F.softplus(alpha * (sim[:, i, j] - mu) * beta0).mean()


def activation_decay(groups: torch.Tensor) -> torch.Tensor:
    """Seed 004 Eq. 6, first term without lambda_1: ``sum_j sum_n |CA_j(x_n)|^2 / (2 J N)``.
    ``groups``: B x J x Dg learner outputs (J = 1 for a single embedding)."""
    b, j = groups.shape[:2]
    return groups.pow(2).sum() / (2 * b * j)


def non_trivial_penalty(weights: Sequence[torch.Tensor]) -> torch.Tensor:
    """Seed 004 Eq. 6, L_ntri without lambda_2: ``sum_ij tr[(w w^T - I) o (w w^T - I)]``
    = ``sum_ij sum_k (|w_k|^2 - 1)^2`` over each learner's weight matrix (rows w_k)."""
    total = weights[0].new_zeros(())
    for w in weights:
        total = total + (w.flatten(1).pow(2).sum(dim=1) - 1).pow(2).sum()
    return total


def build_metric_loss(name: str, num_classes: int, dim: int,
                      binomial_preset: str = "deml") -> nn.Module:
    """One metric loss for a ``dim``-dimensional embedding. Losses from
    pytorch-metric-learning use its defaults except where a paper gives a value."""
    from pytorch_metric_learning import losses

    if name == "contrastive":  # seed 001 Eq. 1, m = 1
        return losses.ContrastiveLoss(pos_margin=0.0, neg_margin=1.0)
    if name == "triplet":
        return losses.TripletMarginLoss(margin=0.1)
    if name == "margin":  # seed 001 Eq. 3 / Table 1: m = 0.2, eta = 1.2 learnable
        return losses.MarginLoss(margin=0.2, nu=0.0, beta=1.2, learn_beta=True)
    if name == "binomial":
        return BinomialDevianceLoss.preset(binomial_preset)
    if name == "ms":
        return losses.MultiSimilarityLoss(alpha=2.0, beta=50.0, base=0.5)
    if name == "proxy_nca":
        # squared distances scaled by 9 = 3^2 as in the reference proxy-NCA code
        return losses.ProxyNCALoss(num_classes=num_classes, embedding_size=dim, softmax_scale=9.0)
    raise ValueError(f"unknown loss {name!r}; choose from {', '.join(METRIC_LOSSES)}")


def build_miner(name: str, loss: str) -> Callable | None:
    """A pytorch-metric-learning miner, or None. ``auto``: semi-hard triplets for the triplet
    loss (seed 003 Sec. 5), the multi-similarity miner for the MS loss, none otherwise."""
    from pytorch_metric_learning import miners

    if name == "auto":
        name = {"triplet": "semihard", "ms": "multi_similarity"}.get(loss, "none")
    if name == "none" or loss in ("binomial", "proxy_nca"):
        return None
    if name == "semihard":
        return miners.TripletMarginMiner(margin=0.1, type_of_triplets="semihard")
    if name == "multi_similarity":
        return miners.MultiSimilarityMiner(epsilon=0.1)
    if name == "distance_weighted":
        return miners.DistanceWeightedMiner(cutoff=0.5, nonzero_loss_cutoff=1.4)
    raise ValueError(f"unknown miner {name!r}; choose from {', '.join(MINERS)}")


class GroupedMetricLoss(nn.Module):
    """The metric loss on each group of the embedding separately, averaged over groups.

    Each group gets its own loss module (its own learnable margin or proxies) and is
    L2-normalized on its own; a model without groups is one group."""

    def __init__(self, name: str, group_slices: Sequence[slice], num_classes: int,
                 miner: str = "auto", binomial_preset: str = "deml") -> None:
        super().__init__()
        self.name = name
        self.group_slices = list(group_slices)
        self.losses = nn.ModuleList(
            build_metric_loss(name, num_classes, s.stop - s.start, binomial_preset) for s in self.group_slices
        )
        self.miner = build_miner(miner, name)

    def forward(self, embedding_raw: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        total = embedding_raw.new_zeros(())
        for s, loss in zip(self.group_slices, self.losses):
            x = F.normalize(embedding_raw[:, s], dim=1)
            if self.miner is not None:
                total = total + loss(x, labels, self.miner(x, labels))
            else:
                total = total + loss(x, labels)
        return total / len(self.group_slices)
