"""The Python door (issue 11): any nn.Module as a dmlviewer model.

Exactness is checked against closed forms (GAP + Linear: ``C_ij = W A_ij / hw``, bias = the
layer's bias), not only by completeness (which the Jacobian rule satisfies by construction).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
import torchvision
from torch import nn

from dmlviewer.core.data.transforms import Preprocess
from dmlviewer.core.explain import explain_pair
from dmlviewer.core.models import EXACT, FIRST_ORDER, ModelError, ModuleModel, open_model

SIZE = 64


def _resnet(dim: int = 32) -> nn.Module:
    torch.manual_seed(0)
    net = torchvision.models.resnet18(num_classes=dim).eval()
    for m in net.modules():  # non-trivial BatchNorm statistics
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.2, 0.2)
            m.running_var.uniform_(0.5, 1.5)
    return net


class MLPEmbedder(nn.Module):
    """A PML-style trunk + embedder, L2-normalized output (F.normalize)."""

    def __init__(self) -> None:
        super().__init__()
        self.trunk = torchvision.models.resnet18()
        self.trunk.fc = nn.Identity()
        self.embedder = nn.Sequential(nn.Linear(512, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Dropout(0.2),
                                      nn.Linear(64, 16))

    def forward(self, x):
        return nn.functional.normalize(self.embedder(self.trunk(x)), dim=1)


class ExplicitNorm(nn.Module):
    """GMP + Linear, normalized by hand (``v / v.norm``), returning (embedding, logits)."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, stride=4, padding=1), nn.ReLU())
        self.fc = nn.Linear(8, 6)
        self.cls = nn.Linear(6, 3)

    def forward(self, x):
        v = self.fc(torch.amax(self.features(x), dim=(2, 3)))
        e = v / v.norm(dim=1, keepdim=True).clamp_min(1e-12)
        return {"logits": self.cls(e), "embedding": e}


class GeMHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, stride=4, padding=1), nn.ReLU())
        self.fc = nn.Linear(8, 6)

    def forward(self, x):
        a = self.features(x).clamp(min=1e-6)
        return self.fc(a.pow(3).mean((2, 3)).pow(1 / 3))


def _images(n: int = 2, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (SIZE + 7 * i, SIZE - 5 * i, 3), dtype=np.uint8) for i in range(n)]


def test_gap_linear_head_is_exact_and_matches_the_closed_form():
    net = _resnet()
    model = ModuleModel(net, "layer4", Preprocess(SIZE)).eval()
    x = torch.randn(3, 3, SIZE, SIZE)
    with torch.no_grad():
        out = model(x)
        reference = net(x)
    torch.testing.assert_close(out.embedding_raw, reference)
    lin = model.linearize(out)
    assert lin.rule == EXACT and lin.frozen == ()
    a = out.feature_map
    closed = torch.einsum("bchw,dc->bhwd", a, net.fc.weight).flatten(1, 2) / (a.shape[2] * a.shape[3])
    torch.testing.assert_close(lin.contributions, closed, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(lin.bias, net.fc.bias.expand(3, -1), atol=1e-6, rtol=1e-5)


def test_mlp_embedder_with_final_normalization_is_stripped_and_exact():
    torch.manual_seed(1)
    net = MLPEmbedder().eval()
    net.embedder[1].running_mean.uniform_(-0.3, 0.3)
    model, info = open_model(net, feature_layer=None, transform={"size": SIZE})
    assert model.feature_layer == "trunk.layer4"
    assert model.config["normalized_output"] is True
    assert info["rule"] == "exact (ReLU masks frozen at this input)"
    x = torch.randn(2, 3, SIZE, SIZE)
    with torch.no_grad():
        out = model(x)
        torch.testing.assert_close(out.embedding, net(x), atol=1e-6, rtol=1e-5)
    assert not torch.allclose(out.embedding_raw.norm(dim=1), torch.ones(2))  # the raw vector, before normalizing
    # the same head with the ReLU mask frozen, written out: affine in the GAP-pooled map
    lin = model.linearize(out)
    assert lin.rule == EXACT
    pooled = out.feature_map.mean((2, 3))
    hidden = net.embedder[1](net.embedder[0](pooled))
    mask = (hidden > 0).float()
    bn = net.embedder[1]
    scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
    w1 = net.embedder[0].weight * scale[:, None]
    b1 = (net.embedder[0].bias - bn.running_mean) * scale + bn.bias
    w2 = net.embedder[4].weight
    per_cell = out.feature_map.flatten(2).transpose(1, 2) / out.feature_map[0, 0].numel()  # B x n x C
    closed = ((per_cell @ w1.T) * mask[:, None]) @ w2.T
    torch.testing.assert_close(lin.contributions, closed, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(lin.bias, (b1 * mask) @ w2.T + net.embedder[4].bias, atol=1e-5, rtol=1e-4)


def test_explicit_normalization_dict_output_and_max_pooling():
    torch.manual_seed(2)
    net = ExplicitNorm().eval()
    model, info = open_model(net, feature_layer="features", transform={"size": SIZE})
    assert model.config["normalized_output"] is True and model.dim == 6
    assert info["rule"] == "exact (max positions frozen at this input)"  # the ReLU is inside the layer
    e = open_model(net, feature_layer="features", output="logits", transform={"size": SIZE})[0]
    assert e.dim == 3 and e.config["normalized_output"] is False
    assert e.describe_rule().startswith("first order")  # logits come after the normalization


def test_non_piecewise_linear_head_is_first_order_and_says_why():
    torch.manual_seed(3)
    model, info = open_model(GeMHead().eval(), feature_layer="features", transform={"size": SIZE})
    assert info["rule"] == "first order: pow is not piecewise linear"
    pair = explain_pair(model, *_images())
    assert pair.rule == FIRST_ORDER and "pow" in pair.rule_detail
    total = pair.point_to_point.sum(dtype=np.float64) + pair.bias_query + pair.bias_reference + pair.bias_both
    assert abs(total - pair.similarity) < 1e-5


def test_explain_pair_on_a_module_keeps_completeness_and_rgradcam_equality():
    """Seed 000 Sec. 4.3: for a GAP head RGrad-CAM equals Decomposition+Bias, through the
    module's own forward (head_function re-runs it with the map replaced)."""
    model = open_model(_resnet(), feature_layer="layer4", transform={"size": SIZE})[0]
    pair = explain_pair(model, *_images())
    assert pair.rule == EXACT
    total = pair.point_to_point.sum(dtype=np.float64) + pair.bias_query + pair.bias_reference + pair.bias_both
    assert abs(total - pair.similarity) < 1e-5
    for side in ("query", "reference"):
        np.testing.assert_allclose(pair.overall_grid("rgradcam", side), pair.overall_grid("decomposition_bias", side),
                                   atol=1e-6, rtol=1e-4)


def test_module_matches_the_native_model_with_the_same_weights():
    """The same resnet18 + GAP + Linear as a native dmlviewer model: identical point-to-point."""
    from dmlviewer.core.models import build_model, default_config

    net = _resnet(16)
    native = build_model(default_config(backbone="resnet18", dim=16, image_size=SIZE)).eval()
    state = {f"backbone.net.{k}": v for k, v in net.state_dict().items() if not k.startswith("fc.")}
    state["head.projection.out.weight"], state["head.projection.out.bias"] = net.fc.weight, net.fc.bias
    native.load_state_dict(state)
    wrapped = open_model(net, feature_layer="layer4", transform={"size": SIZE})[0]
    images = _images()
    a, b = explain_pair(native, *images), explain_pair(wrapped, *images)
    np.testing.assert_allclose(a.point_to_point, b.point_to_point, atol=1e-6)
    assert abs(a.similarity - b.similarity) < 1e-6 and abs(a.bias_both - b.bias_both) < 1e-6


@pytest.mark.parametrize("bad, message", [
    (dict(feature_layer="layer9"), "has no layer 'layer9'; layers with spatial maps: conv1, bn1, relu, maxpool, "
                                   "layer1, layer2, layer3, layer4"),
    (dict(feature_layer="fc"), "gives (2, 32), not a spatial map"),  # the probe is a batch of two
    (dict(feature_layer="layer4", output=3), "output=3"),
    (dict(feature_layer="layer4", output="emb"), "output='emb'"),
])
def test_bad_layer_or_output_is_one_clear_error(bad, message):
    with pytest.raises(ModelError, match=re.escape(message)):
        open_model(_resnet(), transform={"size": SIZE}, **bad)


def test_wrong_channel_model_and_bad_input_size_are_clear():
    gray = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2))
    with pytest.raises(ModelError, match="the model failed on a 2 x 3 x 64 x 64 input: .*channels"):
        open_model(gray, feature_layer="1", transform={"size": SIZE})
    flat = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 32 * 32, 5))
    with pytest.raises(ModelError, match="check size= or transform="):
        open_model(flat, feature_layer="1", transform={"size": SIZE})


def test_torchvision_transform_is_read_and_a_timm_cnn_opens():
    timm = pytest.importorskip("timm")
    from torchvision import transforms

    t = transforms.Compose([transforms.Resize(80), transforms.CenterCrop(SIZE), transforms.ToTensor(),
                            transforms.Normalize((0.5, 0.5, 0.5), (0.25, 0.25, 0.25))])
    torch.manual_seed(4)
    net = timm.create_model("resnet18", pretrained=False, num_classes=24).eval()
    model, info = open_model(net, transform=t)
    assert model.preprocess.size == SIZE and model.preprocess.mean == (0.5, 0.5, 0.5)
    assert model.feature_layer == "layer4" and info["rule"] == "exact"
    pair = explain_pair(model, *_images())
    total = pair.point_to_point.sum(dtype=np.float64) + pair.bias_query + pair.bias_reference + pair.bias_both
    assert pair.rule == EXACT and abs(total - pair.similarity) < 1e-5


def test_resolution_choices_follow_the_stride_and_the_head():
    from dmlviewer.core.models import build_model, default_config
    from dmlviewer.core.models.resolution import input_sizes

    net = open_model(_resnet(), feature_layer="layer4", transform={"size": 224})[0]
    assert input_sizes(net, (375, 500)) == [("model (224 px)", 224), ("1.5x (352 px)", 352), ("2x (448 px)", 448),
                                           ("image (512 px)", 512)]
    assert [s for _, s in input_sizes(net, (3000, 4000))] == [224, 352, 448, 1024]
    flat = build_model(default_config(backbone="small_cnn", pooling="flatten", dim=8, image_size=64))
    assert input_sizes(flat, (500, 500)) == [("model (64 px)", 64)]
    pair = explain_pair(net, *_images(), size=448)  # a finer grid at a larger size
    assert pair.grid_query == (14, 14)
