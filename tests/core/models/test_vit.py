"""Vision transformers (issue 11): the patch-token grid as the feature map, the class-token
head linearized with frozen attention/LayerNorm/gates (Ali et al. 2022), the mean head as GAP.

Completeness is a real test here: the bias is pushed through the frozen block separately from
the token contributions, so ``sum(C) + B`` only equals the embedding the transformer computed if
the linearization is right.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

timm = pytest.importorskip("timm")
from timm.models.vision_transformer import VisionTransformer  # noqa: E402

from dmlviewer.core.data.transforms import Preprocess  # noqa: E402
from dmlviewer.core.explain import explain_pair  # noqa: E402
from dmlviewer.core.models import EXACT, build_model, default_config, load_checkpoint, open_model, save_checkpoint  # noqa: E402
from dmlviewer.core.models.opening import vit_from_module  # noqa: E402

SIZE = 64


def _vit(seed: int = 0, **kwargs) -> VisionTransformer:
    torch.manual_seed(seed)
    options = dict(img_size=SIZE, patch_size=8, embed_dim=48, depth=2, num_heads=3, num_classes=0,
                   dynamic_img_size=True)
    options.update(kwargs)
    vit = VisionTransformer(**options).eval()
    with torch.no_grad():  # move away from the initialization (zero biases, unit norms)
        for p in vit.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return vit


def _complete(model, x, atol=2e-5):
    with torch.no_grad():
        out = model(x)
        lin = model.linearize(out)
    total = lin.contributions.sum(1) + lin.bias
    torch.testing.assert_close(total, out.embedding_raw, atol=atol, rtol=1e-4)
    return out, lin


@pytest.mark.parametrize("kwargs", [
    dict(global_pool="token"),
    dict(global_pool="avg"),
    dict(global_pool="token", reg_tokens=4),
    dict(global_pool="token", init_values=0.1, qk_norm=True),
    dict(global_pool="token", num_classes=16),
    dict(global_pool="avg", class_token=False, reg_tokens=1, num_classes=12),
])
def test_vit_heads_are_exact_at_the_input(kwargs):
    vit = _vit(**kwargs)
    model = vit_from_module(vit, Preprocess(SIZE)).eval()
    x = torch.randn(2, 3, SIZE, SIZE)
    out, lin = _complete(model, x)
    with torch.no_grad():
        torch.testing.assert_close(out.embedding_raw, vit(x))  # the model's own output
    assert lin.rule == EXACT and lin.grid == (8, 8) and out.feature_map.shape == (2, 48, 8, 8)
    if model.head.pool == "gap":
        assert lin.frozen == ("LayerNorm scales",) and float(lin.nonspatial.abs().max()) == 0.0
    else:  # the prefix tokens' share is in the bias, not on the grid
        assert lin.frozen == ("attention weights", "LayerNorm scales", "activation gates")
        assert float(lin.nonspatial.abs().max()) > 0


def test_deit_distilled_reads_out_class_and_distillation_tokens():
    net = timm.create_model("deit_tiny_distilled_patch16_224", pretrained=False, num_classes=0).eval()
    model = vit_from_module(net, Preprocess(224)).eval()
    assert model.head.rows == [(0, 0.5), (1, 0.5)]
    x = torch.randn(1, 3, 224, 224)
    out, lin = _complete(model, x)
    with torch.no_grad():
        torch.testing.assert_close(out.embedding_raw, net(x))


def test_other_resolutions_give_finer_grids_and_stay_exact():
    model = vit_from_module(_vit(), Preprocess(SIZE)).eval()
    out, lin = _complete(model, torch.randn(1, 3, 2 * SIZE, 2 * SIZE))
    assert lin.grid == (16, 16)


def test_linearization_equals_the_frozen_functions_gradient():
    """Gradient x input of the block with softmax outputs, LayerNorm scales and GELU gates
    detached (the conservative rule written with autograd) gives the same contributions."""
    vit = _vit(seed=5, global_pool="token")
    model = vit_from_module(vit, Preprocess(SIZE)).eval()
    x = torch.randn(1, 3, SIZE, SIZE)
    out, lin = _complete(model, x)
    tokens = torch.cat([out.intermediates["prefix"], out.feature_map.flatten(2).transpose(1, 2)], 1)
    tokens = tokens.detach().requires_grad_(True)
    block = vit.blocks[-1]

    def ln(t, norm):  # LayerNorm with its scale detached
        mu = t.mean(-1, keepdim=True)
        s = torch.sqrt(t.var(-1, unbiased=False, keepdim=True) + norm.eps).detach()
        return (t - mu) / s * norm.weight + norm.bias

    h = ln(tokens, block.norm1)
    b, t, c = h.shape
    qkv = block.attn.qkv(h).reshape(b, t, 3, block.attn.num_heads, -1).permute(2, 0, 3, 1, 4)
    attn = ((qkv[0] * block.attn.scale) @ qkv[1].transpose(-2, -1)).softmax(-1).detach()
    o = (attn @ qkv[2]).transpose(1, 2).reshape(b, t, c)
    x1 = tokens + block.attn.proj(o)
    u = block.mlp.fc1(ln(x1, block.norm2))
    gate = (block.mlp.act(u) / u).detach()
    x2 = x1 + block.mlp.fc2(u * gate)
    emb = ln(x2, vit.norm)[:, 0]
    rows = [torch.autograd.grad(emb[0, d], tokens, retain_graph=True)[0][0] for d in range(emb.shape[1])]
    jac = torch.stack(rows)  # D x T x C
    contrib = (jac * tokens.detach()[0]).sum(-1).T  # T x D
    p = vit.num_prefix_tokens
    torch.testing.assert_close(lin.contributions[0], contrib[p:], atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(lin.nonspatial[0], contrib[:p].sum(0), atol=2e-5, rtol=1e-4)


def test_timm_vit_by_name_round_trips_through_a_checkpoint(tmp_path):
    config = default_config(backbone="timm:vit_tiny_patch16_224", pooling="token", dim=32, image_size=SIZE)
    model = build_model(config).eval()
    path = save_checkpoint(tmp_path / "vit.pt", model)
    again, info = load_checkpoint(path)
    x = torch.randn(1, 3, SIZE, SIZE)
    with torch.no_grad():
        torch.testing.assert_close(again(x).embedding, model(x).embedding)
    _complete(again, x)


def test_local_weights_file_loads_with_position_embedding_resampled(tmp_path):
    save_file = pytest.importorskip("safetensors.torch").save_file

    source = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=10, img_size=96)
    save_file(source.state_dict(), str(tmp_path / "w.safetensors"))
    config = default_config(backbone="timm:vit_tiny_patch16_224", pretrained=str(tmp_path / "w.safetensors"),
                            pooling="token", dim=0, image_size=96)
    model = build_model(config).eval()
    source.reset_classifier(0)
    x = torch.randn(1, 3, 96, 96)
    with torch.no_grad():  # built for the file's 6 x 6 grid of position embeddings
        torch.testing.assert_close(model(x).embedding_raw, source.eval()(x), atol=1e-5, rtol=1e-4)
    assert model.config["token_grid"] == 6
    again, _ = load_checkpoint(save_checkpoint(tmp_path / "vit.pt", model))
    with torch.no_grad():
        torch.testing.assert_close(again(x).embedding_raw, model(x).embedding_raw)


def test_tiny_vit_trained_on_the_demo_data_stays_exact(tiny_demo_root):
    """A few steps of metric learning (pytorch-metric-learning's multi-similarity loss) move the
    weights where the demo images put them; completeness still holds to 1e-5 on real images."""
    from pytorch_metric_learning.losses import MultiSimilarityLoss

    from dmlviewer.core.data import ImageFolderDataset, open_dataset

    dataset = open_dataset(tiny_demo_root).select_split("all")
    vit = _vit(seed=7, global_pool="token", num_classes=16)
    model = vit_from_module(vit, Preprocess(SIZE))
    images = ImageFolderDataset(dataset, SIZE, train=True)
    loader = torch.utils.data.DataLoader(images, batch_size=12, shuffle=True, generator=torch.Generator().manual_seed(0))
    optimizer = torch.optim.Adam(vit.parameters(), lr=1e-3)
    loss_fn = MultiSimilarityLoss()
    vit.train()
    losses = []
    for _ in range(3):
        for x, labels, _ in loader:
            loss = loss_fn(model(x).embedding, labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
    assert losses[-1] < losses[0]
    model.eval()
    pair = explain_pair(model, dataset.abspath(0), dataset.abspath(5))
    total = pair.point_to_point.sum(dtype=np.float64) + pair.bias_query + pair.bias_reference + pair.bias_both
    assert pair.rule == EXACT and abs(total - pair.similarity) < 1e-5
    assert pair.point_to_point.shape == (64, 64)


def test_live_vit_through_open_model():
    model, info = open_model(_vit(global_pool="token"), transform={"size": SIZE})
    assert info["rule"].startswith("exact (last block's attention weights")
    assert model.config["pooling"] == "token" and model.preprocess.size == SIZE
