"""Channels-last feature maps and column outputs through the Python door (issue 26 items 1, 4).

timm's Swin keeps B x h x w x C maps (``output_fmt`` NHWC, default feature layer ``norm``) and
torchvision's Swin returns them from ``features``; both must give the h x w grid, with the
contributions equal to the closed form of their head where it is linear (GAP + Linear:
``C_ij = W A_ij / hw``). cnnimageretrieval's networks return descriptors as columns (D x B).
The models are built the other library's way (same classes, random weights, small widths so
the tests stay fast at 224 px, the 7 x 7 grid of the issue).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import torchvision
from torch import nn

from dmlviewer.core.explain import explain_pair
from dmlviewer.core.models import EXACT, FIRST_ORDER, ModelError, open_model
from dmlviewer.core.models.module_model import NCHW, NHWC, map_layout

SIZE = 224


def _images(n: int = 2, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (SIZE + 9 * i, SIZE - 7 * i, 3), dtype=np.uint8) for i in range(n)]


def _completeness(pair) -> float:
    total = pair.point_to_point.sum(dtype=np.float64) + pair.bias_query + pair.bias_reference + pair.bias_both
    return abs(total - pair.similarity)


def test_timm_swin_default_layer_is_read_channels_last_and_exact():
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    net = timm.create_model("swin_tiny_patch4_window7_224", pretrained=False, num_classes=24, embed_dim=32,
                            depths=(1, 1, 1, 1), num_heads=(1, 2, 2, 2)).eval()
    assert net.output_fmt == "NHWC"
    model, info = open_model(net)  # default: the last map, timm's final norm (B x 7 x 7 x 256)
    assert model.feature_layer == "norm" and model.layout == NHWC and info["rule"] == "exact"
    x = torch.randn(2, 3, SIZE, SIZE)
    with torch.no_grad():
        out = model(x)
        torch.testing.assert_close(out.embedding_raw, net(x))
        torch.testing.assert_close(out.feature_map, net.forward_features(x).permute(0, 3, 1, 2))
    assert out.feature_map.shape == (2, 256, 7, 7)
    lin = model.linearize(out)
    a = out.feature_map
    closed = torch.einsum("bchw,dc->bhwd", a, net.head.fc.weight).flatten(1, 2) / 49
    assert lin.rule == EXACT and lin.grid == (7, 7)
    torch.testing.assert_close(lin.contributions, closed, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(lin.bias, net.head.fc.bias.expand(2, -1), atol=1e-5, rtol=1e-4)
    pair = explain_pair(model, *_images())
    assert pair.grid_query == (7, 7) and pair.point_to_point_4d().shape == (7, 7, 7, 7)
    assert pair.rule == EXACT and _completeness(pair) < 1e-5
    for side in ("query", "reference"):  # seed 000 Sec. 4.3 through the re-run with a replaced (NHWC) map
        np.testing.assert_allclose(pair.overall_grid("rgradcam", side), pair.overall_grid("decomposition_bias", side),
                                   atol=1e-6, rtol=1e-4)


def test_torchvision_swin_features_are_channels_last_and_first_order():
    from torchvision.models.swin_transformer import SwinTransformer

    torch.manual_seed(1)
    # swin_t's class and layout (patch 4, window 7, four stages), small widths
    net = SwinTransformer(patch_size=[4, 4], embed_dim=32, depths=[1, 1, 1, 1], num_heads=[1, 2, 2, 2],
                          window_size=[7, 7], num_classes=16).eval()
    model, info = open_model(net, feature_layer="features")
    assert model.layout == NHWC
    assert info["rule"] == "first order: layer_norm is not piecewise linear"  # the LayerNorm after the layer
    x = torch.randn(2, 3, SIZE, SIZE)
    with torch.no_grad():
        out = model(x)
        torch.testing.assert_close(out.embedding_raw, net(x))
        torch.testing.assert_close(out.feature_map, net.features(x).permute(0, 3, 1, 2))
    pair = explain_pair(model, *_images())
    assert pair.grid_query == (7, 7) and pair.point_to_point_4d().shape == (7, 7, 7, 7)
    assert pair.rule == FIRST_ORDER and _completeness(pair) < 1e-5
    default = open_model(net)[0]  # left out: the last map, after swin_t's own permute to channels first
    assert default.feature_layer == "permute" and default.layout == NCHW


@pytest.mark.slow
def test_the_real_swin_t_gives_a_7_by_7_grid():
    torch.manual_seed(2)
    net = torchvision.models.swin_t(weights=None, num_classes=32).eval()
    pair = explain_pair(open_model(net, feature_layer="features")[0], *_images())
    assert pair.grid_query == (7, 7) and _completeness(pair) < 1e-5


class _Opaque(nn.Module):
    """A layer whose type says nothing about its output's layout."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, channels, 32, stride=32)

    def forward(self, x):
        return self.conv(x)


class _SquareMap(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.body = _Opaque(channels)
        self.fc = nn.Linear(channels, 5)

    def forward(self, x):
        return self.fc(self.body(x).mean((2, 3)))


def test_a_map_whose_layout_cannot_be_told_is_refused_naming_its_shape():
    net = _SquareMap(7).eval()  # 7 channels on a 7 x 7 grid: either axis could be the channels
    with pytest.raises(ModelError, match=re.escape("feature layer 'body' gives (2, 7, 7, 7): cannot tell whether "
                                                   "its channels come first")):
        open_model(net, feature_layer="body")
    model = open_model(net, feature_layer="body.conv")[0]  # a convolution's output: channels first
    assert model.layout == NCHW and model.dim == 5
    assert open_model(_SquareMap(8).eval(), feature_layer="body")[0].layout == NCHW  # 8 x 7 x 7: by the shape


@pytest.mark.parametrize("layer, shape, layout", [
    (nn.Conv2d(3, 16, 1), (1, 16, 7, 7), NCHW),
    (nn.LayerNorm(16), (1, 7, 7, 16), NHWC),
    (nn.Sequential(nn.Linear(8, 16), nn.GELU()), (1, 7, 7, 16), NHWC),
    (nn.Identity(), (1, 7, 7, 16), NHWC),
    (nn.Identity(), (1, 16, 7, 7), NCHW),
    (nn.Identity(), (1, 7, 7, 7), None),
    (nn.Identity(), (1, 16, 7, 9), None),
    (nn.Conv2d(3, 7, 1), (1, 7, 7, 7), NCHW),
    (nn.LayerNorm(7), (1, 7, 7, 7), NHWC),
    (nn.Linear(4, 7), (1, 16, 7, 7), None),  # the type (channels last) and the shape disagree: not guessed
])
def test_map_layout_from_the_shape_and_the_layer(layer, shape, layout):
    assert map_layout(layer, shape) == layout


class ImageRetrievalNet(nn.Module):
    """cnnimageretrieval-pytorch's network (cirtorch/networks/imageretrievalnet.py): ResNet
    features, GeM, L2N, descriptors returned as columns (``o.permute(1, 0)``: D x B)."""

    def __init__(self) -> None:
        super().__init__()
        resnet = torchvision.models.resnet18(weights=None)
        self.features = nn.Sequential(*list(resnet.children())[:-2])
        self.p = nn.Parameter(torch.ones(1) * 3)

    def pool(self, x):  # cirtorch.layers.functional.gem
        return F.avg_pool2d(x.clamp(min=1e-6).pow(self.p), (x.size(-2), x.size(-1))).pow(1.0 / self.p)

    @staticmethod
    def norm(x, eps=1e-6):  # cirtorch.layers.functional.l2n
        return x / (torch.norm(x, p=2, dim=1, keepdim=True) + eps).expand_as(x)

    def forward(self, x):
        o = self.norm(self.pool(self.features(x))).squeeze(-1).squeeze(-1)
        return o.permute(1, 0)


def test_descriptors_as_columns_are_refused_with_the_output_that_fixes_them():
    torch.manual_seed(3)
    net = ImageRetrievalNet().eval()
    with pytest.raises(ModelError, match=re.escape("the model's output is 512 x 2 for a batch of 2 images: "
                                                   "descriptors as columns") + ".*pass output=lambda o: o.T"):
        open_model(net, transform={"size": 64})
    model = open_model(net, output=lambda o: o.T, transform={"size": 64})[0]
    assert model.dim == 512
    x = torch.randn(3, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(model(x).embedding, net(x).T)
    pair = explain_pair(model, *_images())
    assert _completeness(pair) < 1e-5 and pair.grid_query == (2, 2)


def test_an_output_whose_rows_are_not_the_batch_is_refused():
    class Summed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 8, stride=8)

        def forward(self, x):
            return self.conv(x).mean((2, 3)).sum(0, keepdim=True)  # one row whatever the batch

    with pytest.raises(ModelError, match=re.escape("the model's output is 1 x 8 for a batch of 2 images: its first "
                                                   "axis is not the batch")):
        open_model(Summed().eval(), feature_layer="conv", transform={"size": 64})
