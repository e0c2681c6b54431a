"""The last import-model families of issue 22.2: torchvision ConvNeXt and Swin (renamed to timm's
layouts), timm ConvNeXt with its head LayerNorm (``--head head.fc`` includes ``head.norm``) and
torchvision MobileNetV3 (Hardswish between its Linears). The ConvNeXt and MobileNetV3 heads do
not fold into dmlviewer's exact head: they are kept layer by layer (``head_layers``,
projection.LayerStack); ConvNeXt's LayerNorm is decomposed exactly with its scale frozen at the
input, MobileNetV3's Hardswish by the first-order rule, as the report and the explanation say. Each source is built the other library's way with
random weights and non-trivial norm statistics; the written checkpoint's embeddings must equal
the source module's to 1e-5."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _random_norms import randomize_batchnorm
from torch import nn

from dmlviewer.core.explain import explain_pair
from dmlviewer.core.models import build_model, default_config
from dmlviewer.core.models.importing import analyze, write_checkpoint
from dmlviewer.core.models.model import check_config
from dmlviewer.core.models.opening import open_model
from dmlviewer.core.models.output import EXACT, FIRST_ORDER
from dmlviewer.core.progress import run_to_end

SIZE = 64


def _randomize_norms(net: nn.Module, seed: int = 0) -> nn.Module:
    """Non-trivial BatchNorm statistics and affine parameters, LayerNorm affine parameters and
    ConvNeXt layer scales, so that a renamed, dropped or misplaced one changes the embedding."""
    randomize_batchnorm(net, seed)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.copy_(torch.rand(m.weight.shape, generator=gen) + 0.5)
                m.bias.copy_(torch.randn(m.bias.shape, generator=gen) * 0.3)
            for name in ("layer_scale", "gamma"):
                scale = getattr(m, name, None)
                if isinstance(scale, nn.Parameter):
                    scale.copy_(torch.rand(scale.shape, generator=gen) * 0.5 + 0.5)
    return net.eval()


def _images(seed: int = 2) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return tuple(rng.integers(0, 256, (SIZE, SIZE, 3), dtype=np.uint8) for _ in range(2))


def _import(tmp_path, source: nn.Module, name: str, **options):
    torch.save(source.state_dict(), tmp_path / f"{name}.pth")
    plan = run_to_end(analyze([str(tmp_path / f"{name}.pth")], image_size=SIZE, **options))
    path, head_diff = write_checkpoint(plan, tmp_path / f"{name}-imported.pt")
    assert head_diff <= 1e-5
    model, info = open_model(str(path))
    kinds = {la.kind for la in plan.layers}
    assert info["rule"].startswith("first order" if "hardswish" in kinds else "exact")  # what the app shows
    assert ("hardswish" in info["rule"]) == ("hardswish" in kinds)
    assert ("LayerNorm scales frozen" in info["rule"]) == ("layernorm" in kinds)
    return plan, model


def _check_embeddings(model: nn.Module, source: nn.Module) -> None:
    x = torch.randn(2, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours, theirs = model(x).embedding_raw, source(x)
    assert float((ours - theirs).abs().max() / theirs.abs().max()) <= 1e-5


def _check_pair(model: nn.Module, rule: str, detail: str) -> float:
    """The pair's rule is ``rule`` and its detail names ``detail``; completeness (point-to-point
    sum plus the three bias terms equals the similarity) holds; returns the share of the bias
    terms in the similarity (where a first-order rule's Taylor remainder lands)."""
    pair = explain_pair(model, *_images())
    assert pair.rule == rule and detail in pair.rule_detail
    spatial = float(pair.point_to_point.sum(dtype=np.float64))
    total = spatial + pair.bias_query + pair.bias_reference + pair.bias_both
    assert abs(total - pair.similarity) < 1e-5
    return abs(pair.bias_query + pair.bias_reference + pair.bias_both) / max(abs(pair.similarity), 1e-12)


def test_torchvision_convnext_with_an_embedding_layer(tmp_path):
    torchvision = pytest.importorskip("torchvision")
    pytest.importorskip("timm")
    torch.manual_seed(0)
    source = torchvision.models.convnext_tiny(weights=None)
    source.classifier[2] = nn.Linear(768, 128)
    source = _randomize_norms(source)
    plan, model = _import(tmp_path, source, "convnext_tiny")
    assert plan.arch == "timm:convnext_tiny" and plan.head_spec == "head.norm,head.fc"
    assert plan.config["head_layers"] == ["layernorm:1e-06", "linear:128"] and plan.config["dim"] == 128
    assert "ImageNet's (torchvision's)" in plan.assumption_line()
    assert "decomposition rule: exact, the LayerNorm scale frozen at each input" in plan.report()
    _check_embeddings(model, source)
    # exact: the spatial terms carry the similarity (a plain first-order rule would leave all of it
    # to the bias: LayerNorm is scale invariant, so its Jacobian maps the pooled vector to 0)
    assert _check_pair(model, EXACT, "LayerNorm scales") < 0.5


def test_timm_convnext_head_fc_includes_its_layernorm(tmp_path):
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    source = _randomize_norms(timm.create_model("convnext_atto", pretrained=False, num_classes=128))
    plan, model = _import(tmp_path, source, "convnext_atto", head="head.fc")
    assert plan.arch == "timm:convnext_atto"
    assert [la.module for la in plan.layers] == ["head.norm", "head.fc"]
    assert any("head.norm (LayerNorm, eps 1e-06) included" in n for n in plan.notes)
    assert not any("LEFT OUT" in a for a in plan.assumptions)
    _check_embeddings(model, source)
    assert _check_pair(model, EXACT, "LayerNorm scales") < 0.5
    auto = run_to_end(analyze([str(tmp_path / "convnext_atto.pth")], image_size=SIZE))
    assert auto.head_spec == "head.norm,head.fc" and auto.config["head_layers"] == plan.config["head_layers"]


def test_torchvision_mobilenet_v3_hardswish_head(tmp_path):
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    source = torchvision.models.mobilenet_v3_large(weights=None)
    source.classifier[3] = nn.Linear(1280, 128)
    source = _randomize_norms(source)
    plan, model = _import(tmp_path, source, "mobilenet_v3_large")
    assert plan.arch == "mobilenet_v3_large"
    assert [la.kind for la in plan.layers] == ["linear", "hardswish", "linear"]
    assert plan.config["head_layers"] == ["linear:1280", "hardswish", "linear:128"]
    assert "decomposition rule: first order: hardswish" in plan.report()
    _check_embeddings(model, source)
    share = _check_pair(model, FIRST_ORDER, "hardswish")
    assert np.isfinite(share)
    # the Python door decomposes the same module by gradient x activation at the pooled vector:
    # the same first-order numbers as the imported checkpoint's head
    door = open_model(source, feature_layer="features", transform={"size": SIZE})[0]
    a, b = explain_pair(model, *_images()), explain_pair(door, *_images())
    np.testing.assert_allclose(a.point_to_point, b.point_to_point, atol=1e-5, rtol=1e-3)


@pytest.mark.slow  # Swin's windows are fixed at 224 px: about 30 s on two loaded cores
def test_torchvision_swin_with_an_embedding_layer(tmp_path):
    torchvision = pytest.importorskip("torchvision")
    pytest.importorskip("timm")
    torch.manual_seed(0)
    source = torchvision.models.swin_t(weights=None)
    source.head = nn.Linear(768, 128)
    source = _randomize_norms(source)
    with torch.no_grad():  # non-trivial relative position biases: a misplaced table changes the embedding
        for m in source.modules():
            if hasattr(m, "relative_position_bias_table"):
                m.relative_position_bias_table.normal_(0, 0.5, generator=torch.Generator().manual_seed(4))
    torch.save(source.state_dict(), tmp_path / "swin_t.pth")
    plan = run_to_end(analyze([str(tmp_path / "swin_t.pth")]))
    assert plan.arch == "timm:swin_tiny_patch4_window7_224" and plan.head_spec == "head.fc"
    assert plan.config["image_size"] == 224 and plan.config["dim"] == 128 and plan.config["head_layers"] == []
    assert sum("relative_position_index" in k for k in plan.unmatched) == 12
    path, _ = write_checkpoint(plan, tmp_path / "swin-imported.pt")
    model = open_model(str(path))[0]
    x = torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours, theirs = model(x).embedding_raw, source(x)
        fmap = model(x).feature_map
    assert float((ours - theirs).abs().max() / theirs.abs().max()) <= 1e-5
    assert tuple(fmap.shape[1:]) == (768, 7, 7)  # timm's NHWC map seen channels-first
    rng = np.random.default_rng(2)
    pair = explain_pair(model, *(rng.integers(0, 256, (224, 224, 3), dtype=np.uint8) for _ in range(2)))
    assert pair.rule == EXACT and pair.grid_query == (7, 7)
    total = pair.point_to_point.sum(dtype=np.float64) + pair.bias_query + pair.bias_reference + pair.bias_both
    assert abs(total - pair.similarity) < 1e-5


def test_layer_stack_head_is_gradient_x_activation():
    """A LayerStack head with a Hardswish: its contributions are ``J z_n`` with ``J`` the stack's
    Jacobian at this input's pooled vector (computed here independently by autograd), and they
    sum with the bias to the raw embedding."""
    torch.manual_seed(0)
    config = default_config(backbone="small_cnn", image_size=SIZE, pooling="gem", dim=16,
                            head_layers=["batchnorm:1e-05", "linear:24", "hardswish", "linear:16"])
    model = _randomize_norms(build_model(config))
    x = torch.randn(2, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        out = model(x)
    lin = model.linearize(out)
    assert lin.rule == FIRST_ORDER and "not piecewise linear: hardswish" in lin.description
    torch.testing.assert_close(lin.contributions.sum(1) + lin.bias, out.embedding_raw, atol=1e-5, rtol=1e-5)
    head = model.head
    for b in range(2):
        a = out.feature_map[b : b + 1]
        z, frozen = head.pooling(a)
        jac = torch.autograd.functional.jacobian(lambda v: head.projection(v)[0], z)[0, :, 0]  # D x C
        parts = head.pooling.position_parts(a, frozen)[0].T @ jac.T
        torch.testing.assert_close(lin.contributions[b], parts, atol=1e-5, rtol=1e-4)


def test_layernorm_stack_is_exact_with_its_scale_frozen():
    """LayerNorm then Linear on the pooled vector: with the LayerNorm's sigma frozen the head is
    affine, so the bias is the constant term ``W b_ln + b_fc`` for every input."""
    torch.manual_seed(0)
    config = default_config(backbone="small_cnn", image_size=SIZE, dim=8, head_layers=["layernorm:1e-06", "linear:8"])
    model = _randomize_norms(build_model(config))
    x = torch.randn(2, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        out = model(x)
    lin = model.linearize(out)
    assert lin.rule == EXACT and lin.frozen == ("LayerNorm scales",)
    norm, fc = model.head.projection.layers
    constant = (fc.weight @ norm.bias + fc.bias).detach()
    torch.testing.assert_close(lin.bias, constant.expand(2, -1), atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(lin.contributions.sum(1) + lin.bias, out.embedding_raw, atol=1e-5, rtol=1e-5)


def test_piecewise_linear_stack_is_exact_and_old_configs_build_as_before():
    config = default_config(backbone="small_cnn", image_size=SIZE, dim=8, head_layers=["linear:12", "relu", "linear:8"])
    model = build_model(config).eval()
    out = model(torch.randn(1, 3, SIZE, SIZE))
    lin = model.linearize(out)
    assert lin.rule == EXACT and lin.frozen == ("ReLU masks",)
    torch.testing.assert_close(lin.contributions.sum(1) + lin.bias, out.embedding_raw, atol=1e-5, rtol=1e-5)
    old = {k: v for k, v in default_config(backbone="small_cnn", dim=8).items() if k != "head_layers"}
    assert check_config(old)["head_layers"] == []
    assert type(build_model(old).head.projection).__name__ == "Projection"


@pytest.mark.parametrize("bad, message", [
    (dict(head_layers=["softmax"]), "head_layers item 'softmax'"),
    (dict(head_layers=["linear:8"], hidden=4), "needs a CNN backbone"),
    (dict(head_layers=["linear:8"], dim=4), "dim 4 must be the width"),
])
def test_bad_head_layers_are_one_line(bad, message):
    config = default_config(backbone="small_cnn", dim=8)
    config.update(bad)
    with pytest.raises(ValueError, match=message):
        check_config(config)
