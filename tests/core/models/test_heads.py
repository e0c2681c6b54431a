"""Heads: shapes, exact linearization (seed 000 Sec. 4), A-grouping invariance (seed 001 Thm. 1)."""

from __future__ import annotations

import itertools

import pytest
import torch

from dmlviewer.core.models import build_model, default_config
from dmlviewer.core.models.heads import Head
from dmlviewer.core.models.multilayer import cell_assignment
from dmlviewer.core.models.pooling import Pooling

POOLINGS = ("gap", "gmp", "gem", "flatten")
GROUPINGS = ("none", "m", "g", "c", "a")


@pytest.mark.parametrize("pooling,grouping", list(itertools.product(POOLINGS, GROUPINGS)))
def test_output_shapes_and_groups(make_model, images, pooling, grouping):
    model = make_model(pooling=pooling, grouping=grouping)
    with torch.no_grad():
        out = model(images)
    assert out.embedding.shape == out.embedding_raw.shape == (2, 32)
    assert torch.allclose(out.embedding.norm(dim=1), torch.ones(2), atol=1e-6)
    assert torch.allclose(out.embedding, out.embedding_raw / out.embedding_raw.norm(dim=1, keepdim=True))
    assert out.feature_map.shape == (2, 128, 4, 4)
    slices = model.group_slices
    if grouping == "none":
        assert out.groups is None and slices == [slice(0, 32)]
        return
    assert out.groups.shape == (2, 4, 8)
    assert [(s.start, s.stop) for s in slices] == [(0, 8), (8, 16), (16, 24), (24, 32)]
    for p, s in enumerate(slices):
        assert torch.equal(out.embedding_raw[:, s], out.groups[:, p])
    expected = {"none": set(), "m": set(), "g": {"g_grouping_gate", "g_grouping_gate_mean"},
                "c": {"c_grouping_channels", "c_grouping_map"}, "a": {"a_grouping"}}[grouping]
    assert set(out.attention) == expected
    for name, att in out.attention.items():
        assert att.shape == ((2, 4, 128) if name == "c_grouping_channels" else (2, 4, 4, 4))
    if grouping == "a":
        assert torch.allclose(out.attention["a_grouping"].sum((2, 3)), torch.ones(2, 4), atol=1e-6)
    if grouping == "g":  # the reported map is one of the group's actual gate channels
        gate = out.frozen["gate"]
        diff = (gate - out.attention["g_grouping_gate"][:, :, None]).abs().flatten(3).amax(-1)
        assert torch.all(diff.amin(-1) == 0)


@pytest.mark.parametrize("pooling,grouping,bn,hidden", [
    (p, g, bn, h) for p, g in itertools.product(POOLINGS, GROUPINGS) for bn, h in ((False, 0), (True, 16))
])
def test_linearization_is_complete(make_model, images, pooling, grouping, bn, hidden):
    """contributions.sum(1) + bias == embedding_raw, in float64 to 1e-9."""
    model = make_model(pooling=pooling, grouping=grouping, bn=bn, hidden=hidden).double()
    with torch.no_grad():
        out = model(images.double())
        lin = model.linearize(out)
    assert lin.contributions.shape == (2, 16, 32) and lin.bias.shape == (2, 32) and lin.grid == (4, 4)
    assert torch.allclose(lin.contributions.sum(1) + lin.bias, out.embedding_raw, atol=1e-9, rtol=0)
    # and the hidden ReLU is exercised: some units off, some on
    if hidden:
        masks = [v for k, v in out.frozen.items() if k.startswith("relu")]
        assert masks and all(0 < m.float().mean() < 1 for m in masks)


def test_linearization_float32_tolerance(make_model, images):
    model = make_model(pooling="gem", grouping="g", bn=True, hidden=16)
    with torch.no_grad():
        out = model(images)
        lin = model.linearize(out)
    scale = out.embedding_raw.abs().max()
    assert (lin.contributions.sum(1) + lin.bias - out.embedding_raw).abs().max() < 1e-5 * max(1.0, scale)


@pytest.mark.parametrize("pooling,bn,hidden", [(p, bn, h) for p in POOLINGS for bn, h in ((False, 0), (True, 16))])
def test_contributions_equal_gradient_times_activation(make_model, images, pooling, bn, hidden):
    """For a pooling head (piecewise linear, GeM's frozen weights are its exact derivative), each
    position's contribution projected on any vector v equals sum_k A_ijk d(v.E)/dA_ijk."""
    model = make_model(pooling=pooling, bn=bn, hidden=hidden).double()
    features = {k: v.detach().requires_grad_(True) for k, v in model.backbone(images.double()).items()}
    out = model.head(features)
    v = torch.randn(2, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    (grad,) = torch.autograd.grad((out.embedding_raw * v).sum(), features["last"])
    expected = (grad * features["last"]).sum(1).flatten(1)  # B x hw
    lin = model.linearize(out)
    got = torch.einsum("bnd,bd->bn", lin.contributions, v)
    # GeM clamps activations to >= eps = 1e-6: an all-zero channel has g = eps and each of its
    # positions owns eps / hw, where the gradient (zero below the clamp) gives nothing.
    assert torch.allclose(got, expected.detach(), atol=1e-6 if pooling == "gem" else 1e-10)


def test_gap_and_flatten_follow_the_paper_rules(make_model, images):
    """GAP: C_ij = W A_ij / (hw); flatten: C_ij = W_ij A_ij (seed 000 Sec. 4.1, App. A.3)."""
    gap = make_model(pooling="gap")
    with torch.no_grad():
        out = gap(images)
        lin = gap.linearize(out)
        w = gap.head.projection.out.weight
        a = out.feature_map.flatten(2)
        assert torch.allclose(lin.contributions, torch.einsum("oc,bcn->bno", w, a) / 16, atol=1e-6)
        assert torch.allclose(lin.bias, gap.head.projection.out.bias.expand(2, -1))
        flat = make_model(pooling="flatten")
        out = flat(images)
        lin = flat.linearize(out)
        w = flat.head.projection.out.weight.view(32, 128, 16)  # channel-major flattening
        a = out.feature_map.flatten(2)
        for n in (0, 5, 15):
            assert torch.allclose(lin.contributions[:, n], a[:, :, n] @ w[:, :, n].T, atol=1e-6)


def test_gmp_mask_has_one_argmax_per_channel_even_with_ties():
    pool = Pooling("gmp", 3)
    x = torch.ones(1, 3, 2, 2)  # every position ties
    x[0, 1, 1, 0] = 2.0
    z, frozen = pool(x)
    parts = pool.position_parts(x, frozen)  # B x C x n
    assert torch.equal((parts != 0).sum(-1), torch.ones(1, 3, dtype=torch.long))
    assert torch.equal(parts.sum(-1), z)
    assert parts[0, 1, 2] == 2.0


def test_gem_frozen_weights_formula():
    """C_ij,k = A_ijk^(p-1) / (hw g_k^(p-1)) * A_ijk, summing to g_k exactly."""
    pool = Pooling("gem", 4, gem_p=2.5, gem_learnable=False).double()
    x = torch.rand(2, 4, 3, 3, dtype=torch.float64) + 0.1
    g, frozen = pool(x)
    assert torch.allclose(g, x.pow(2.5).mean((2, 3)).pow(1 / 2.5))
    parts = pool.position_parts(x, frozen)
    flat = x.flatten(2)
    assert torch.allclose(parts, flat.pow(1.5) / (9 * g[..., None].pow(1.5)) * flat)
    assert torch.allclose(parts.sum(-1), g, atol=1e-12)
    assert "p" in dict(pool.named_buffers()) and not list(pool.parameters())
    assert isinstance(Pooling("gem", 4).p, torch.nn.Parameter)


def _frozen_head_contributions(head, a: torch.Tensor) -> torch.Tensor:
    """Definition of a contribution: the head with its gates/attention frozen, applied to the map
    with only position n kept, minus the head on the zero map (its bias)."""
    b, c, h, w = a.shape
    zero = head({"last": torch.zeros_like(a)}).embedding_raw
    parts = []
    for n in range(h * w):
        keep = torch.zeros(h * w, dtype=a.dtype)
        keep[n] = 1
        parts.append(head({"last": a * keep.view(1, 1, h, w)}).embedding_raw - zero)
    return torch.stack(parts, 1)


@pytest.mark.parametrize("grouping", ["g", "c", "a"])
def test_gated_and_attention_contributions_match_definition(make_model, images, grouping, monkeypatch):
    model = make_model(grouping=grouping, bn=True).double()
    with torch.no_grad():
        out = model(images.double())
        lin = model.linearize(out)
        head = model.head
        if grouping == "a":
            attn = out.attention["a_grouping"].flatten(2)
            monkeypatch.setattr(head, "attention", lambda a: attn)
        else:
            gate = out.frozen["gate"]
            monkeypatch.setattr(head.gate, "forward", lambda a: gate)
        expected = _frozen_head_contributions(head, out.feature_map)
    assert torch.allclose(lin.contributions, expected, atol=1e-10)


def test_a_grouping_is_permutation_invariant_and_flatten_is_not(make_model):
    """Theorem 1: permuting the positions of A (hence of K and V consistently) leaves
    softmax(q^T K) V^T unchanged; a position-dependent (flatten) head changes."""
    a = torch.rand(2, 128, 4, 4, generator=torch.Generator().manual_seed(5))
    perm = torch.randperm(16, generator=torch.Generator().manual_seed(6))
    permuted = a.flatten(2)[:, :, perm].view_as(a)
    assert not torch.equal(permuted, a)
    agroup = make_model(grouping="a").head
    flatten = make_model(pooling="flatten").head
    with torch.no_grad():
        before, after = agroup({"last": a}), agroup({"last": permuted})
        assert torch.allclose(before.groups, after.groups, atol=1e-6)
        assert torch.allclose(before.attention["a_grouping"].flatten(2)[:, :, perm],
                              after.attention["a_grouping"].flatten(2), atol=1e-7)
        change = (flatten({"last": a}).embedding_raw - flatten({"last": permuted}).embedding_raw).abs().max()
    assert change > 1e-2


@pytest.mark.parametrize("layers", [["stage2", "stage3"], ["stage3", "last"]])
def test_multilayer_head(make_model, images, layers):
    model = make_model(multilayer=layers, bn=True, hidden=16).double()
    with torch.no_grad():
        out = model(images.double())
        lin = model.linearize(out)
    assert set(out.intermediates) == set(layers)
    for name in layers:
        att = out.attention[f"multilayer/{name}"]
        assert att.shape == (2, 1, *out.intermediates[name].shape[-2:])
        assert torch.allclose(att.sum((2, 3)), torch.ones(2, 1, dtype=att.dtype))
    assert torch.allclose(lin.contributions.sum(1) + lin.bias, out.embedding_raw, atol=1e-9)


def test_multilayer_contributions_land_on_the_right_cell(make_model, images):
    """An intermediate position's contribution is added to the last-grid cell containing it."""
    model = make_model(multilayer=["stage3"]).double()  # stage3: 8x8 (stride 8) -> last 4x4
    with torch.no_grad():
        out = model(images.double())
        lin = model.linearize(out)
        head = model.head
        w = head.projection.out.weight
        u_block, m_block = w[:, :128], w[:, 128:]
        u_parts = torch.einsum("oc,bcn->bno", u_block, out.feature_map.flatten(2)) / 16
        m = out.intermediates["stage3"].flatten(2)
        att = out.attention["multilayer/stage3"].flatten(1)
        m_parts = torch.einsum("bn,bcn,oc->bno", att, m, m_block).view(2, 8, 8, -1)
        summed = m_parts.view(2, 4, 2, 4, 2, -1).sum((2, 4)).reshape(2, 16, -1)
    assert torch.allclose(lin.contributions, u_parts + summed, atol=1e-10)


def test_cell_assignment():
    divisible = cell_assignment((4, 4), (2, 2))
    assert divisible.sum(0).eq(1).all()  # every source cell goes to one target
    assert divisible[0].view(4, 4)[:2, :2].sum() == 4 and divisible[3].view(4, 4)[2:, 2:].sum() == 4
    uneven = cell_assignment((5, 3), (2, 2))  # centres: rows 0,1 -> 0; 2 (centre 2.5/5*2=1.0) -> 1
    rows = uneven.view(2, 2, 5, 3).sum((1, 3))  # target row x source row
    assert rows[:, 2].tolist() == [0, 3] and rows[:, 1].tolist() == [3, 0]


def test_linearize_needs_eval_mode_with_batchnorm(make_model, images):
    model = make_model(bn=True).train()
    out = model(images)
    with pytest.raises(RuntimeError, match="eval"):
        model.linearize(out)
    model = make_model(bn=False).train()  # no BatchNorm in the head: fine in training mode
    out = model(images)
    lin = model.linearize(out)
    assert torch.allclose(lin.contributions.sum(1) + lin.bias, out.embedding_raw, atol=1e-5)


def test_head_without_rule_raises_not_implemented():
    class Opaque(Head):
        dim = 4

    with pytest.raises(NotImplementedError, match="Opaque"):
        Opaque().linearize(None)


def test_config_errors():
    with pytest.raises(ValueError, match="not divisible"):
        build_model(default_config(backbone="small_cnn", grouping="a", dim=30, groups=4))
    with pytest.raises(ValueError, match="grouping none"):
        build_model(default_config(backbone="small_cnn", grouping="m", multilayer=["stage3"]))
    with pytest.raises(ValueError, match="no map"):
        build_model(default_config(backbone="small_cnn", multilayer=["layer3"]))
    with pytest.raises(ValueError, match="unknown model config"):
        default_config(pooling="gap", groupz=3)
    with pytest.raises(ValueError, match="unknown backbone"):
        build_model(default_config(backbone="vgg"))
    model = build_model(default_config(backbone="small_cnn", pooling="flatten", image_size=64, dim=8))
    with pytest.raises(ValueError, match="4x4 grid"):
        model(torch.zeros(1, 3, 96, 96))
