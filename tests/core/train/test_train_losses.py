"""The losses written here against slow loop evaluations of the papers' formulas."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from dmlviewer.core.train.losses import (
    BINOMIAL_PRESETS,
    BinomialDevianceLoss,
    GroupedMetricLoss,
    activation_decay,
    diversity_loss,
    non_trivial_penalty,
)


def _cos(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(a @ b / (a.norm() * b.norm()))


def _batch(seed: int = 0, n: int = 12, d: int = 6):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g, dtype=torch.float64), torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2, 3, 3, 1][:n])


def _softplus(x: float) -> float:
    return math.log1p(math.exp(x))


def test_binomial_deml_matches_eq5_loop():
    """Seed 004 Eq. 5: sum_pq (1/w_pq) log(1 + exp(-(2 s_pq - 1) alpha (D_pq - beta) gamma_pq))."""
    x, y = _batch()
    alpha, beta = 2.0, 0.5
    pairs = [(p, q) for p in range(len(y)) for q in range(len(y)) if p != q]
    n_pos = sum(int(y[p] == y[q]) for p, q in pairs)
    n_neg = len(pairs) - n_pos
    expected = 0.0
    for p, q in pairs:
        s = 1 if y[p] == y[q] else 0
        gamma, w = (1.0, n_pos) if s else (35.0, n_neg)
        expected += _softplus(-(2 * s - 1) * alpha * (_cos(x[p], x[q]) - beta) * gamma) / w
    assert float(BinomialDevianceLoss.preset("deml")(x, y)) == pytest.approx(expected, rel=1e-10)


def test_binomial_dgml_matches_official_code_loop():
    """Seed 001 as its official code computes it: exponent alpha (s - m) times -1 for positive pairs
    (each image with itself included) and C = 25 for negative ones; the positive and the negative
    terms each averaged over their own pairs."""
    x, y = _batch(6)
    alpha, m, c = 2.0, 0.5, 25.0
    n = len(y)
    pos = [(p, q) for p in range(n) for q in range(n) if y[p] == y[q]]  # p == q included
    neg = [(p, q) for p in range(n) for q in range(n) if y[p] != y[q]]
    expected = sum(_softplus(-alpha * (_cos(x[p], x[q]) - m)) for p, q in pos) / len(pos)
    expected += sum(_softplus(alpha * (_cos(x[p], x[q]) - m) * c) for p, q in neg) / len(neg)
    assert float(BinomialDevianceLoss.preset("dgml")(x, y)) == pytest.approx(expected, rel=1e-10)


def test_binomial_dgml_printed_matches_table1_loop():
    """Seed 001 Table 1 as printed, with Eq. 14's mean over pairs: m = 0.5, alpha = 2, beta_1 = 25,
    beta_0 = 1."""
    x, y = _batch(1)
    m, alpha, b1, b0 = 0.5, 2.0, 25.0, 1.0
    terms = []
    for p in range(len(y)):
        for q in range(len(y)):
            if p == q:
                continue
            s = _cos(x[p], x[q])
            l = float(y[p] == y[q])
            terms.append(l * _softplus(-alpha * (s - m) * b1) + (1 - l) * _softplus(alpha * (s - m) * b0))
    loss = BinomialDevianceLoss.preset("dgml_printed")(x, y)
    assert float(loss) == pytest.approx(sum(terms) / len(terms), rel=1e-10)
    assert BINOMIAL_PRESETS["dgml_printed"]["balanced"] is False


def test_diversity_printed_matches_eq4_loop():
    g = torch.Generator().manual_seed(2)
    groups = torch.randn(5, 4, 3, generator=g, dtype=torch.float64)
    alpha, beta0, mu = 2.0, 1.0, 0.5
    terms = [
        _softplus(alpha * (_cos(groups[n, i], groups[n, j]) - mu) * beta0)
        for n in range(5) for i in range(4) for j in range(i + 1, 4)
    ]
    assert float(diversity_loss(groups, "printed")) == pytest.approx(sum(terms) / len(terms), rel=1e-10)
    assert float(diversity_loss(groups[:, :1], "printed")) == 0.0


def test_diversity_official_matches_dgml_code_loop():
    """The official code: for each group pair i < j, the negative binomial term with C = 25
    averaged over the images; the pairs summed and divided by P - 1."""
    g = torch.Generator().manual_seed(5)
    groups = torch.randn(6, 4, 3, generator=g, dtype=torch.float64)
    n, p = groups.shape[:2]
    total = 0.0
    for i in range(p):
        for j in range(i + 1, p):
            total += sum(_softplus(2.0 * (_cos(groups[k, i], groups[k, j]) - 0.5) * 25.0) for k in range(n)) / n
    assert float(diversity_loss(groups)) == pytest.approx(total / (p - 1), rel=1e-10)
    assert float(diversity_loss(groups[:, :1])) == 0.0


def test_activation_decay_and_non_trivial_penalty_match_eq6_loop():
    g = torch.Generator().manual_seed(3)
    groups = torch.randn(7, 3, 4, generator=g, dtype=torch.float64)
    expected = sum(float(groups[n, j] @ groups[n, j]) for n in range(7) for j in range(3)) / (2 * 3 * 7)
    assert float(activation_decay(groups)) == pytest.approx(expected, rel=1e-12)

    weights = [torch.randn(4, 6, generator=g, dtype=torch.float64) for _ in range(3)]
    expected = 0.0
    for w in weights:
        a = w @ w.T - torch.eye(4, dtype=torch.float64)
        expected += float(torch.trace(a * a))  # tr[(w w^T - I) o (w w^T - I)]
    assert float(non_trivial_penalty(weights)) == pytest.approx(expected, rel=1e-12)


def test_grouped_loss_is_mean_of_per_group_losses_each_normalized():
    x, y = _batch(4, d=8)
    slices = [slice(0, 4), slice(4, 8)]
    grouped = GroupedMetricLoss("binomial", slices, num_classes=4)
    single = BinomialDevianceLoss.preset("dgml")
    expected = (single(F.normalize(x[:, :4]), y) + single(F.normalize(x[:, 4:]), y)) / 2
    assert float(grouped(x, y)) == pytest.approx(float(expected), rel=1e-12)
    # each group normalized on its own: rescaling one group changes nothing
    scaled = x.clone()
    scaled[:, 4:] *= 17.0
    assert float(grouped(scaled, y)) == pytest.approx(float(expected), rel=1e-10)
    # whereas normalizing the concatenation is a different loss
    assert float(single(x, y)) != pytest.approx(float(expected), rel=1e-3)


@pytest.mark.parametrize("name", ["contrastive", "triplet", "margin", "binomial", "ms", "proxy_nca"])
def test_every_metric_loss_has_finite_gradients_per_group(name):
    x, y = _batch(5, d=8)
    x = x.float().requires_grad_()
    loss_fn = GroupedMetricLoss(name, [slice(0, 4), slice(4, 8)], num_classes=4)
    loss = loss_fn(x, y)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
    # one loss module per group: learnable margins / proxies are separate per group
    own = [sum(p.numel() for p in m.parameters()) for m in loss_fn.losses]
    assert own[0] == own[1]
