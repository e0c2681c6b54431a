"""Batch norms folded into their convolutions for the perturbation passes (core.models.folding):
the folded copy computes the model's embeddings, only the pairs whose convolution output feeds
nothing but a plain BatchNorm fold, the model itself is left as it was, and the copy is redone
when a weight changes."""

from __future__ import annotations

import torch
from torch import nn

from dmlviewer.core.models import build_model, default_config, open_model
from dmlviewer.core.models.folding import for_embeddings, foldable_pairs


def _random_statistics(model: nn.Module) -> None:
    """BatchNorms with statistics and affine parameters far from the identity."""
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                c = m.num_features
                m.running_mean.copy_(torch.randn(c, generator=gen) * 0.5)
                m.running_var.copy_(torch.rand(c, generator=gen) * 2 + 0.2)
                m.weight.copy_(torch.randn(c, generator=gen))
                m.bias.copy_(torch.randn(c, generator=gen) * 0.3)


def _embed(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return model(x).embedding.float()


def test_small_cnn_folds_every_pair_and_keeps_the_embeddings():
    torch.manual_seed(0)
    model = build_model(default_config(backbone="small_cnn", grouping="c", groups=2, dim=16, image_size=64)).eval()
    _random_statistics(model)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(4, 3, 64, 64)
    folded = for_embeddings(model, x)
    assert folded is not model
    assert len(foldable_pairs(model, x[:1])) == 4
    assert not any(isinstance(m, nn.BatchNorm2d) for m in folded.backbone.modules())
    want, got = _embed(model, x), _embed(folded, x)
    assert (want - got).abs().max() < 1e-5
    assert (want - _embed(model, torch.randn(4, 3, 64, 64))).abs().max() > 1e-2  # inputs matter
    # the model itself is untouched: same modules, same weights
    assert sum(isinstance(m, nn.BatchNorm2d) for m in model.modules()) == 4
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    assert for_embeddings(model, x) is folded  # cached
    with torch.no_grad():  # a weight changes: the copy is redone from the new weights
        model.backbone.net.stages[0][0].weight.mul_(1.5)
    again = for_embeddings(model, x)
    assert again is not folded
    assert (_embed(model, x) - _embed(again, x)).abs().max() < 1e-5
    assert (_embed(model, x) - want).abs().max() > 1e-4


class _Residual(nn.Module):
    """conv a -> BN read twice (BN and a residual add: must not fold); conv b -> a BatchNorm
    subclass with an activation (must not fold); conv c -> plain BN (folds unless it is the
    feature layer); conv d -> the features."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.bn_a = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.b, self.bn_b = nn.Conv2d(8, 8, 3, padding=1), _BatchNormAct(8)
        self.c, self.bn_c = nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.d = nn.Conv2d(8, 8, 1)
        self.fc = nn.Linear(8, 6)

    def forward(self, x):
        a = self.a(x)
        y = self.bn_a(a) + a
        y = self.d(torch.relu(self.bn_c(self.c(self.bn_b(self.b(y))))))
        return self.fc(y.mean((2, 3)))


class _BatchNormAct(nn.BatchNorm2d):
    def forward(self, x):
        return torch.tanh(super().forward(x))


def test_only_private_plain_pairs_fold_in_a_live_module():
    torch.manual_seed(0)
    net = _Residual().eval()
    _random_statistics(net)
    model, _ = open_model(net, feature_layer="d", size=32)
    x = torch.randn(3, 3, 32, 32)
    assert foldable_pairs(model, x[:1]) == [("net.c", "net.bn_c")]
    folded = for_embeddings(model, x)
    assert folded is not model and isinstance(folded.net.bn_c, nn.Identity)
    assert isinstance(folded.net.bn_a, nn.BatchNorm2d) and isinstance(folded.net.bn_b, _BatchNormAct)
    want = _embed(model, x)
    assert (want - _embed(folded, x)).abs().max() < 1e-5
    # the original still captures its own feature map after the copy (its hook is its own)
    with torch.inference_mode():
        out = model(x)
    assert out.feature_map.shape == (3, 8, 32, 32)
    assert torch.equal(out.embedding.float(), want)
    # a BatchNorm that is the feature layer keeps its capture hook: it does not fold
    at_bn, _ = open_model(_Residual().eval(), feature_layer="bn_c", size=32)
    assert foldable_pairs(at_bn, x[:1]) == [] and for_embeddings(at_bn, x) is at_bn


def test_training_mode_and_models_without_batch_norm_run_as_they_are():
    torch.manual_seed(0)
    model = build_model(default_config(backbone="small_cnn", dim=8, image_size=32))
    x = torch.randn(2, 3, 32, 32)
    assert for_embeddings(model.train(), x) is model
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 5)).eval()
    plain, _ = open_model(net, feature_layer="1", size=32)
    assert for_embeddings(plain, x) is plain
