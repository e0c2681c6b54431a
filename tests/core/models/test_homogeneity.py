"""Exact where the maths allows (issue 22 item 5): a head that is positively homogeneous of
degree 1 (GeM, max pooling, bias-free Linear, ReLU) makes gradient x activation exact by
Euler's theorem: the contributions sum to the embedding and the bias is zero."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import torchvision
from torch import nn

import dmlviewer
from dmlviewer.core.models import EXACT, FIRST_ORDER, open_model
from dmlviewer.core.models.homogeneity import head_degree

SIZE = 64


class GeM(nn.Module):
    """cnnimageretrieval-pytorch's GeM: a learnable p held in a one-element parameter."""

    def __init__(self, p: float = 3.0, eps: float = 1e-6) -> None:
        super().__init__()
        self.p = nn.Parameter(torch.ones(1) * p)
        self.eps = eps

    def forward(self, x):
        return F.avg_pool2d(x.clamp(min=self.eps).pow(self.p), (x.size(-2), x.size(-1))).pow(1.0 / self.p)


class L2N(nn.Module):
    """cnnimageretrieval-pytorch's L2N."""

    def forward(self, x):
        return x / (torch.norm(x, p=2, dim=1, keepdim=True) + 1e-6).expand_as(x)


class RetrievalNet(nn.Module):
    """As cnnimageretrieval-pytorch's ImageRetrievalNet builds a ResNet: the children up to
    layer4 as ``features``, GeM, L2N, squeezed (here returned batch first); ``after`` is an
    optional module between the pooling and the normalization."""

    def __init__(self, after: nn.Module | None = None) -> None:
        super().__init__()
        net = torchvision.models.resnet18(weights=None)
        self.features = nn.Sequential(*list(net.children())[:-2])
        self.pool = GeM()
        self.after = after
        self.norm = L2N()

    def forward(self, x):
        o = self.pool(self.features(x))
        if self.after is not None:
            o = self.after(o)
        return self.norm(o).squeeze(-1).squeeze(-1)


class Tanh(nn.Module):
    def forward(self, x):
        return torch.tanh(x)


class Whiten(nn.Module):
    """A 1x1 bias-free projection, as a learned whitening without its mean."""

    def __init__(self, bias: bool) -> None:
        super().__init__()
        self.proj = nn.Conv2d(512, 64, 1, bias=bias)

    def forward(self, x):
        return F.relu(self.proj(x))


def _images():
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, (SIZE, SIZE, 3), dtype=np.uint8) for _ in range(2)]


def _explain(net: nn.Module):
    torch.manual_seed(0)
    q, r = _images()
    return dmlviewer.explain(net.eval(), q, r, "features", size=SIZE)


def test_gem_resnet_is_exact_by_euler():
    torch.manual_seed(0)
    e = _explain(RetrievalNet())
    assert e.rule == EXACT
    total = e.point_to_point.sum() + e.bias_query + e.bias_reference + e.bias_both
    assert abs(total - e.similarity) < 1e-5
    # Euler: the contributions alone sum to the embedding, nothing is left in the bias
    assert abs(e.point_to_point.sum() - e.similarity) < 1e-5
    assert abs(e.bias_query) < 1e-5 and abs(e.bias_reference) < 1e-5 and abs(e.bias_both) < 1e-5


def test_gem_then_a_bias_free_projection_is_exact_and_with_a_bias_first_order():
    torch.manual_seed(0)
    model, info = open_model(RetrievalNet(Whiten(bias=False)).eval(), feature_layer="features", size=SIZE)
    assert model.describe_rule().startswith("exact") and "Euler" in info["rule"]
    x = torch.randn(2, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = model(x)
    lin = model.linearize(out)
    assert lin.rule == EXACT
    scale = out.embedding_raw.norm(dim=1, keepdim=True)
    assert (lin.bias.abs() / scale).max() < 1e-5  # Euler: sum_ij C_ij = E
    assert torch.allclose(lin.contributions.sum(1) + lin.bias, out.embedding_raw, atol=1e-5)
    torch.manual_seed(0)
    biased, _ = open_model(RetrievalNet(Whiten(bias=True)).eval(), feature_layer="features", size=SIZE)
    with torch.no_grad():
        out = biased(x)
    lin = biased.linearize(out)
    assert lin.rule == FIRST_ORDER and (lin.bias.abs() / out.embedding_raw.norm(dim=1, keepdim=True)).max() > 1e-3


def test_a_tanh_head_stays_first_order():
    torch.manual_seed(0)
    e = _explain(RetrievalNet(Tanh()))
    assert e.rule == FIRST_ORDER
    total = e.point_to_point.sum() + e.bias_query + e.bias_reference + e.bias_both
    assert abs(total - e.similarity) < 1e-5  # completeness holds by construction, the remainder in the bias


@pytest.mark.parametrize("head, degree", [
    (lambda a: F.avg_pool2d(a.clamp(min=1e-6).pow(3.0), a.shape[-2:]).pow(1 / 3).flatten(1), 1.0),
    (lambda a: F.adaptive_max_pool2d(F.relu(a), 1).flatten(1), 1.0),
    (lambda a: a.pow(2).mean((2, 3)), 2.0),
    (lambda a: F.normalize(a.mean((2, 3)), dim=1), 0.0),
    (lambda a: a.flatten(1) @ torch.ones(a[0].numel(), 3), 1.0),
    (lambda a: a.sum((2, 3)) / a.norm(dim=(2, 3)), 0.0),
])
def test_degrees_of_homogeneous_heads(head, degree):
    a = torch.rand(1, 4, 3, 3) + 0.1
    assert head_degree(head, a) == pytest.approx(degree, abs=1e-6)
    t = 1.7  # the degree is what scaling the map does: f(t A) = t^k f(A)
    assert torch.allclose(head(t * a), t ** degree * head(a), rtol=1e-5)


@pytest.mark.parametrize("head", [
    lambda a: F.linear(a.mean((2, 3)), torch.ones(2, 4), torch.ones(2)),  # a bias
    lambda a: a.mean((2, 3)) + 1.0,
    lambda a: F.layer_norm(a.mean((2, 3)), (4,)) * 2,
    lambda a: torch.tanh(a).mean((2, 3)),
    lambda a: a.clamp(min=0.5).mean((2, 3)),  # a floor that is not negligible
    lambda a: a.detach().mean((2, 3)),  # no gradient flows: gradient x activation would miss it
])
def test_heads_that_are_not_homogeneous(head):
    assert head_degree(head, torch.rand(1, 4, 3, 3) + 0.1) is None
