"""The live-module path's fast decomposition (issue 22 item 5): a head that pools each channel on
its own first is differentiated at the pooled vector (:meth:`TailRecorder.pooled`,
:func:`pooled_gradient_x_activation`), and must give the same contributions as the Jacobian rows
taken at the feature map (:func:`gradient_x_activation`, differentiating the module's own
forward). Heads that read the map otherwise are not taken for pooled ones.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dmlviewer.core.data.transforms import Preprocess
from dmlviewer.core.models import EXACT, FIRST_ORDER, ModuleModel
from dmlviewer.core.models.jacobian import (gradient_x_activation, jacobian_vector_products,
                                            pooled_gradient_x_activation)

SIZE = 48
CHANNELS = 8


def _gem(a):
    return F.avg_pool2d(a.clamp(min=1e-6).pow(3.0), (a.size(-2), a.size(-1))).pow(1.0 / 3)


#: name -> (head on the map B x 8 x h x w, pooled first?, rule)
HEADS = {
    "gap_linear": (lambda a, m: m.fc(F.adaptive_avg_pool2d(a, 1).flatten(1)), True, EXACT),
    "amax_linear": (lambda a, m: m.fc(torch.amax(a, dim=(2, 3))), True, EXACT),
    "gmp_module": (lambda a, m: m.fc(F.adaptive_max_pool2d(a, (1, 1)).squeeze(-1).squeeze(-1)), True, EXACT),
    "gem_linear": (lambda a, m: m.fc(_gem(a).flatten(1)), True, FIRST_ORDER),
    "relu_flat_mean_mlp": (lambda a, m: m.fc2(F.relu(m.bn(m.fc(F.relu(a).flatten(2).mean(-1))))), True, EXACT),
    "scaled_mean_gelu_normalized": (
        lambda a, m: F.normalize(m.fc2(F.gelu(m.fc(2.0 * a.mean(dim=[-2, -1])))), dim=1), True, FIRST_ORDER),
    "gap_wide_relu": (lambda a, m: m.wide(F.relu(F.adaptive_avg_pool2d(a, 1)).flatten(1)), True, EXACT),
    "gap_and_gmp": (lambda a, m: m.fc2(torch.cat([a.mean((2, 3)), a.amax((2, 3))], 1)), False, EXACT),
    "conv_then_gap": (lambda a, m: m.fc(m.mix(a).mean((2, 3))), False, EXACT),
    "spatial_attention": (
        lambda a, m: m.fc((a * torch.softmax(a.sum(1, keepdim=True).flatten(2), -1).view_as(a[:, :1])).sum((2, 3))),
        False, FIRST_ORDER),
    "gap_reweights_map": (lambda a, m: m.fc((a * torch.sigmoid(a.mean((2, 3), keepdim=True))).mean((2, 3))),
                          False, FIRST_ORDER),
    "channel_mean": (lambda a, m: m.fc3(a.mean(1).flatten(1)), False, EXACT),
}


class Net(nn.Module):
    def __init__(self, head) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, CHANNELS, 3, stride=4, padding=1), nn.BatchNorm2d(CHANNELS),
                                      nn.ReLU(), nn.Conv2d(CHANNELS, CHANNELS, 3, padding=1))
        self.fc = nn.Linear(CHANNELS, 6)
        self.fc2 = nn.Linear(2 * CHANNELS if head is HEADS["gap_and_gmp"][0] else 6, 5)
        self.fc3 = nn.Linear((SIZE // 4) ** 2, 5)
        self.wide = nn.Linear(CHANNELS, 160)  # more dimensions than positions (12 x 12)
        self.bn = nn.BatchNorm1d(6)
        self.mix = nn.Conv2d(CHANNELS, CHANNELS, 1)
        self.head = head

    def forward(self, x):
        return self.head(self.features(x), self)


def _model(name: str) -> ModuleModel:
    torch.manual_seed(0)
    net = Net(HEADS[name][0])
    net.bn.running_mean.uniform_(-0.3, 0.3)
    net.bn.running_var.uniform_(0.5, 1.5)
    return ModuleModel(net.eval(), "features", Preprocess(SIZE)).eval()


@pytest.mark.parametrize("name", sorted(HEADS))
def test_pooled_heads_are_found_and_give_the_jacobian_rows_contributions(name):
    _, pooled_first, rule = HEADS[name]
    model = _model(name)
    torch.manual_seed(1)
    x = torch.randn(3, 3, SIZE, SIZE)
    run = model._run(x, grad_tail=True)
    assert (run.pooled is not None) == pooled_first
    with torch.enable_grad():
        reference = gradient_x_activation(run.raw, run.feature_map)  # rows at the map
    out, lin = model.forward_decomposed(x)
    assert lin.rule == rule
    torch.testing.assert_close(lin.contributions, reference, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(lin.contributions.sum(1) + lin.bias, out.embedding_raw, atol=1e-5, rtol=1e-5)
    lin_again = model.linearize(out)  # the re-running path decomposes alike
    torch.testing.assert_close(lin_again.contributions, reference, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("positions_first", [True, False])
def test_both_ways_of_applying_the_pooled_jacobian_agree_with_the_closed_form(positions_first):
    """GAP + Linear: ``C_ij = W A_ij / hw``, whether the Jacobian is applied to the positions
    (fewer positions than dimensions: Jacobian-vector products) or taken by rows."""
    torch.manual_seed(0)
    dim = 200 if positions_first else 16  # 12 x 12 = 144 positions
    fc = nn.Linear(CHANNELS, dim)
    leaf = torch.randn(2, CHANNELS, 12, 12).requires_grad_(True)
    with torch.enable_grad():
        pooled = F.adaptive_avg_pool2d(leaf, 1)
        raw = fc(pooled.flatten(1))
        got = pooled_gradient_x_activation(raw, pooled, leaf)
    closed = torch.einsum("bcn,dc->bnd", leaf.detach().flatten(2), fc.weight.detach()) / 144
    torch.testing.assert_close(got, closed, atol=1e-6, rtol=1e-5)


def test_jacobian_vector_products_of_a_relu_mlp():
    """Reverse mode twice gives ``J v`` with this input's ReLU mask, for every tangent."""
    torch.manual_seed(0)
    first, second = nn.Linear(CHANNELS, 32), nn.Linear(32, 7)
    p = torch.randn(3, CHANNELS).requires_grad_(True)
    with torch.enable_grad():
        hidden = first(p)
        raw = second(F.relu(hidden))
    tangents = torch.randn(5, 3, CHANNELS)
    got = jacobian_vector_products(raw, p, tangents)
    assert got is not None and got.shape == (5, 3, 7)
    mask = (hidden > 0).float().detach()
    expected = torch.einsum("kbc,hc,bh,dh->kbd", tangents, first.weight.detach(), mask, second.weight.detach())
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-5)


def test_a_head_that_detaches_after_pooling_falls_back_to_the_rows_at_the_map():
    torch.manual_seed(0)
    net = Net(lambda a, m: m.fc(a.mean((2, 3))) + m.fc(a.mean((2, 3)).detach()))
    model = ModuleModel(net.eval(), "features", Preprocess(SIZE)).eval()
    x = torch.randn(2, 3, SIZE, SIZE)
    run = model._run(x, grad_tail=True)
    assert run.pooled is None  # the map's mean is read twice
    out, lin = model.forward_decomposed(x)
    torch.testing.assert_close(lin.contributions.sum(1) + lin.bias, out.embedding_raw, atol=1e-5, rtol=1e-5)
