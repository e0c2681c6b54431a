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

- Binomial deviance has three presets (``--binomial``):

  ``dgml`` (the default; seed 001 as its official code computes it, DGML-master
  ``criteria/binomial_deviance.py``): positive term log(1 + exp(-alpha (s - m))), negative term
  log(1 + exp(alpha (s - m) C)) with alpha = 2, m = 0.5 and C = 25, i.e. the scale 25 sits on the
  *negative* pairs and the positive pairs have scale 1; each kind of pair is averaged on its own
  (the loss is the mean over positive pairs plus the mean over negative pairs), and the
  positive mask includes each image paired with itself (its term is a constant without
  gradient, but it counts in the positive mean, which halves the positive gradient at two images
  per class).

  ``dgml_printed`` (seed 001 Table 1 as printed): beta_1 = 25 on the positive term, beta_0 = 1 on
  the negative term, the plain mean over all pairs p != q (the 1/N_b of Eq. 14).

  ``deml`` (seed 004 Eq. 5): as ``dgml`` but gamma = 35 on the negative term and pairs p != q
  only, each weighted 1/w_pq (w_pq the number of positive, resp. negative, pairs).

- Diversity (seed 001 Eq. 4) has two variants (``--diversity-variant``). Both read s_ij as the
  cosine *similarity* of groups i and j of one image (the paper calls it a distance, but the form
  is the negative-pair binomial term, which pushes similarity down), with alpha = 2 and mu = 0.5.

  ``official`` (the default; DGML-master ``criteria/diversity.py``): beta_0 = 25 (the same C as the
  metric loss's negative scale), the term averaged over the images of the batch and *summed*
  over the unordered group pairs i < j, then divided by P - 1 (not by the number of pairs).

  ``printed``: beta_0 = 1 (Table 1's binomial deviance), the mean over images and group pairs
  (the 1/N_g of Eq. 14).

- Eq. 6's trace of a Hadamard product, tr[(w w^T - I) o (w w^T - I)], keeps only the diagonal:
  it equals sum_k (|w_k|^2 - 1)^2 over the rows w_k of a learner's weight matrix.
- Constants the papers do not fix for our setting: triplet margin 0.1 by default
  (``--triplet-margin``; seed 003 uses 0.01), with semi-hard mining; multi-similarity alpha = 2,
  beta = 50, base = 0.5 (Wang et al., pytorch-metric-learning's defaults); proxy-NCA on squared
  distances scaled by 9 (the reference code's 3x scaling of embeddings and proxies).
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .config import BINOMIAL_PRESETS, DIVERSITY_VARIANTS, METRIC_LOSSES, MINERS  # noqa: F401 - re-exported

#: absolute learning rates of the losses' own parameters, from the papers
LOSS_PARAM_LR = {
    "margin": 5e-4,  # lr_eta of the learnable margin beta, seed 001 Table 1
    "proxy_nca": 1e-2,  # proxy learning rate, seed 003 Table 2
}

class BinomialDevianceLoss(nn.Module):
    """Binomial deviance over all pairs of a batch (seed 001 Eq. 2, seed 004 Eq. 5).

    ``l = l_pq log(1 + exp(-alpha (s - m) scale_pos)) + (1 - l_pq) log(1 + exp(alpha (s - m) scale_neg))``
    with s the cosine similarity; ``balanced`` weights each pair by 1 / (number of pairs of its
    kind) (Eq. 5), otherwise the mean over all pairs is taken (Eq. 14). ``self_pairs`` counts each
    image with itself among the positive pairs (the official DGML code's mask)."""

    def __init__(self, alpha: float = 2.0, margin: float = 0.5, scale_pos: float = 1.0,
                 scale_neg: float = 25.0, balanced: bool = True, self_pairs: bool = False) -> None:
        super().__init__()
        self.alpha, self.margin = alpha, margin
        self.scale_pos, self.scale_neg = scale_pos, scale_neg
        self.balanced, self.self_pairs = balanced, self_pairs

    @classmethod
    def preset(cls, name: str) -> "BinomialDevianceLoss":
        return cls(**BINOMIAL_PRESETS[name])

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        x = F.normalize(embeddings, dim=1)
        sim = x @ x.T
        same = labels[:, None] == labels[None, :]
        off_diag = ~torch.eye(len(labels), dtype=torch.bool, device=labels.device)
        pos, neg = (same if self.self_pairs else same & off_diag), ~same
        z = self.alpha * (sim - self.margin)
        pos_loss = F.softplus(-z * self.scale_pos)
        neg_loss = F.softplus(z * self.scale_neg)
        if self.balanced:
            return _masked_mean(pos_loss, pos) + _masked_mean(neg_loss, neg)
        total = (pos_loss * pos).sum() + (neg_loss * neg).sum()
        return total / off_diag.sum().clamp(min=1)


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (values * mask).sum() / mask.sum().clamp(min=1)


def diversity_loss(groups: torch.Tensor, variant: str = "official", alpha: float = 2.0,
                   mu: float = 0.5) -> torch.Tensor:
    """Seed 001 Eq. 4 between every two groups i < j of the same image:
    ``log(1 + exp(alpha (s_ij - mu) beta0))``, averaged over the images; over the group pairs
    summed and divided by P - 1 (``variant="official"``, beta0 = 25) or averaged
    (``"printed"``, beta0 = 1; Eq. 14). ``groups``: B x P x Dg."""
    spec = DIVERSITY_VARIANTS[variant]
    p = groups.shape[1]
    if p < 2:
        return groups.new_zeros(())
    x = F.normalize(groups, dim=2)
    sim = x @ x.transpose(1, 2)  # B x P x P
    i, j = torch.triu_indices(p, p, offset=1, device=groups.device)
    terms = F.softplus(alpha * (sim[:, i, j] - mu) * spec["beta0"])  # B x pairs
    if spec["pair_norm"] == "mean":
        return terms.mean()
    return terms.mean(dim=0).sum() / (p - 1)


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
                      binomial_preset: str = "dgml", triplet_margin: float = 0.1) -> nn.Module:
    """One metric loss for a ``dim``-dimensional embedding. Losses from
    pytorch-metric-learning use its defaults except where a paper gives a value."""
    from pytorch_metric_learning import losses

    if name == "contrastive":  # seed 001 Eq. 1, m = 1
        return losses.ContrastiveLoss(pos_margin=0.0, neg_margin=1.0)
    if name == "triplet":
        return losses.TripletMarginLoss(margin=triplet_margin)
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


def build_miner(name: str, loss: str, triplet_margin: float = 0.1) -> Callable | None:
    """A pytorch-metric-learning miner, or None. ``auto``: semi-hard triplets for the triplet
    loss (seed 003 Sec. 5), the multi-similarity miner for the MS loss, none otherwise."""
    from pytorch_metric_learning import miners

    if name == "auto":
        name = {"triplet": "semihard", "ms": "multi_similarity"}.get(loss, "none")
    if name == "none" or loss in ("binomial", "proxy_nca"):
        return None
    if name == "semihard":
        return miners.TripletMarginMiner(margin=triplet_margin, type_of_triplets="semihard")
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
                 miner: str = "auto", binomial_preset: str = "dgml", triplet_margin: float = 0.1) -> None:
        super().__init__()
        self.name = name
        self.group_slices = list(group_slices)
        self.losses = nn.ModuleList(
            build_metric_loss(name, num_classes, s.stop - s.start, binomial_preset, triplet_margin)
            for s in self.group_slices
        )
        self.miner = build_miner(miner, name, triplet_margin)

    def forward(self, embedding_raw: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        total = embedding_raw.new_zeros(())
        for s, loss in zip(self.group_slices, self.losses):
            x = F.normalize(embedding_raw[:, s], dim=1)
            if self.miner is not None:
                total = total + loss(x, labels, self.miner(x, labels))
            else:
                total = total + loss(x, labels)
        return total / len(self.group_slices)
