"""Gradient reversal and the adversarial modules of seeds 003 and 004."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from dmlviewer.core.train.adversarial import (
    ClassAdversary,
    DemlAdversary,
    GradientReversal,
    adaptive_lambda,
    reverse_gradient,
)


@pytest.mark.parametrize("scale", [1.0, 0.3, -2.0])
def test_gradient_reversal_is_identity_forward_and_flips_gradient_with_scale(scale):
    x = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, 5, dtype=torch.float64)
    for layer in (lambda t: reverse_gradient(t, scale), GradientReversal(scale)):
        x.grad = None
        y = layer(x)
        assert torch.equal(y, x)
        (w * y).sum().backward()
        torch.testing.assert_close(x.grad, -scale * w)


def test_adaptive_lambda_eq25():
    assert adaptive_lambda(1.5, 0.5) == 0.0
    assert adaptive_lambda(4.0, 1.0, 1.5) == pytest.approx(-math.tanh(2.5))
    assert adaptive_lambda(0.2, 0.5, 1.5) == pytest.approx(0.5 * math.tanh(1.3))  # adversarial once l_c is low


def test_smooth_adversary_is_label_smoothed_cross_entropy_eq20():
    torch.manual_seed(0)
    adv = ClassAdversary(6, num_classes=4, mode="smooth", weight=0.5, smoothing=0.15).eval()
    f = torch.randn(8, 6, dtype=torch.float32)
    y = torch.randint(0, 4, (8,))
    term, l_c = adv(f, y)
    logp = F.log_softmax(adv.classifier(f), dim=1).detach()
    expected = 0.0
    for i in range(8):
        for k in range(4):
            y_ls = (1 - 0.15) * float(y[i] == k) + 0.15 / 4  # Eq. 19
            expected -= y_ls * float(logp[i, k])
    assert float(l_c.detach()) == pytest.approx(expected / 8, rel=1e-5)
    assert float(term.detach()) == pytest.approx(0.5 * expected / 8, rel=1e-5)  # Eq. 21


def test_adaptive_adversary_gradients_follow_eq23_and_eq24():
    """Features receive -lambda * d l_c / d f, the classifier d l_c / d theta_c."""
    torch.manual_seed(1)
    adv = ClassAdversary(6, num_classes=5, mode="adaptive", weight=0.7).eval()
    assert float(adv.lam) == pytest.approx(adaptive_lambda(math.log(5), 0.7))
    adv.end_epoch(0.4)  # low classification loss: lambda > 0, adversarial
    lam = adaptive_lambda(0.4, 0.7)
    assert float(adv.lam) == pytest.approx(lam) and lam > 0
    f = torch.randn(10, 6, requires_grad=True)
    y = torch.randint(0, 5, (10,))
    term, _ = adv(f, y)
    term.backward()
    grad_f = f.grad.clone()
    grad_w = adv.classifier[0].weight.grad.clone()

    adv.zero_grad()
    f2 = f.detach().clone().requires_grad_()
    F.cross_entropy(adv.classifier(f2), y).backward()
    torch.testing.assert_close(grad_f, -lam * f2.grad)
    torch.testing.assert_close(grad_w, adv.classifier[0].weight.grad)


def test_deml_adversary_eq4_loop_and_min_max_gradients():
    torch.manual_seed(2)
    adv = DemlAdversary(group_dim=3, weight=2.0)
    groups = torch.randn(4, 3, 3, requires_grad=True)
    out = adv.net(F.normalize(groups, dim=2)).detach()
    expected = sum(
        float((out[n, j] - out[n, k]).pow(2).sum()) for n in range(4) for j in range(3) for k in range(j + 1, 3)
    ) / 4
    assert float(adv.discrepancy(groups).detach()) == pytest.approx(expected, rel=1e-5)

    adv(groups).backward()  # through the GRL
    grad_groups, grad_net = groups.grad.clone(), adv.net[0].weight.grad.clone()
    groups.grad = None
    adv.zero_grad()
    (2.0 * adv.discrepancy(groups)).backward()  # plain minimization
    torch.testing.assert_close(grad_groups, -groups.grad)  # learners maximize L_adv
    torch.testing.assert_close(grad_net, adv.net[0].weight.grad)  # F minimizes it
