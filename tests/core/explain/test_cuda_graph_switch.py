"""The pair graphs' switch and copies, on the host (core.explain.cuda_graph; replaying itself
is checked on a GPU in tests/gpu/test_cuda_graph.py): on by default, off by environment or for
a block, never used off CUDA; the outputs a replay hands out are copies of the graph's buffers;
and no model's pass reads a value back to the host (which recording cannot hold)."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from dmlviewer.core.explain import cuda_graph
from dmlviewer.core.explain.decomposition import forward_decomposed
from dmlviewer.core.models import build_model, default_config


def test_on_by_default_off_by_environment_or_for_a_block(monkeypatch):
    monkeypatch.delenv("DMLVIEWER_CUDA_GRAPHS", raising=False)
    assert cuda_graph.enabled()
    monkeypatch.setenv("DMLVIEWER_CUDA_GRAPHS", "1")
    assert cuda_graph.enabled()
    with cuda_graph.replaying(False):
        assert not cuda_graph.enabled()
        with cuda_graph.replaying(True):
            assert cuda_graph.enabled()
        assert not cuda_graph.enabled()
    monkeypatch.setenv("DMLVIEWER_CUDA_GRAPHS", "off")
    assert not cuda_graph.enabled()


def _grouping_model():
    torch.manual_seed(0)
    return build_model(default_config(backbone="small_cnn", pooling="gmp", grouping="a", groups=4, image_size=64,
                                      dim=32), "cpu").eval()


def test_off_cuda_the_eager_pass_runs_and_nothing_is_recorded():
    model, x = _grouping_model(), torch.randn(2, 3, 64, 64)
    with cuda_graph.replaying(True):
        out, lin = cuda_graph.forward_decomposed(model, x)
    ref_out, ref_lin = forward_decomposed(model, x)
    assert torch.equal(out.embedding_raw, ref_out.embedding_raw) and torch.equal(lin.contributions, ref_lin.contributions)
    assert cuda_graph.state(model) == {}


def test_a_replay_hands_out_copies_of_every_tensor():
    out, lin = forward_decomposed(_grouping_model(), torch.randn(2, 3, 64, 64))
    copy_out, copy_lin = cuda_graph._copy((out, lin))
    pairs = [(out.feature_map, copy_out.feature_map), (out.embedding, copy_out.embedding),
             (lin.contributions, copy_lin.contributions), (lin.bias, copy_lin.bias),
             *((out.attention[k], copy_out.attention[k]) for k in out.attention)]
    assert out.attention  # the grouping head's attention maps are walked too
    for original, copy in pairs:
        assert torch.equal(original, copy) and original.data_ptr() != copy.data_ptr()
    assert (copy_lin.grid, copy_lin.rule, copy_lin.frozen) == (lin.grid, lin.rule, lin.frozen)


class _HostRoundTrips(TorchDispatchMode):
    """Counts the operations a CUDA graph cannot record: a value read back to the host
    (``.item()``: ``_local_scalar_dense``) and a tensor made from host data on every pass (an
    index list, ``torch.tensor(...)``: ``lift_fresh``)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.__name__.split(".")[0] in ("_local_scalar_dense", "lift_fresh"):
            self.seen.append(str(func))
        return func(*args, **(kwargs or {}))


def _timm(name: str):
    timm = pytest.importorskip("timm")
    from dmlviewer.core.models import open_model

    torch.manual_seed(0)
    return open_model(timm.create_model(name, pretrained=False, num_classes=64, img_size=64).eval(), "cpu", size=64)[0]


@pytest.mark.parametrize("make", [
    _grouping_model,
    lambda: build_model(default_config(backbone="resnet18", image_size=64, dim=32), "cpu").eval(),
    lambda: _timm("vit_tiny_patch16_224"),
    lambda: _timm("deit_tiny_distilled_patch16_224"),
], ids=["grouping", "resnet18", "timm ViT token head", "timm DeiT distilled"])
def test_a_pass_after_the_first_has_no_host_round_trip(make):
    """What the graph records must stay on the device: the timm ViT's token head indexed its
    readout rows with a list and read ``act(0)`` back on every pass, so no ViT pair could be
    recorded on the H100 (2026-11-28); the recording needs three eager passes first (WARMUP)."""
    model, x = make(), torch.randn(2, 3, 64, 64)
    forward_decomposed(model, x)
    with _HostRoundTrips() as trips:
        forward_decomposed(model, x)
    assert trips.seen == []


def test_the_recorded_weights_see_replaced_and_moved_tensors_not_updates_in_place():
    """A replay reads the weights where they were recorded: updates in place keep the graph, a
    replaced layer or parameter and a tensor moved by ``.to`` make it be recorded again."""
    from torch import nn

    model = build_model(default_config(backbone="resnet18", image_size=64, dim=32), "cpu").eval()
    weights = cuda_graph._Weights(model)
    assert weights.unchanged()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(0.9)
    model.load_state_dict(model.state_dict())  # copied in place
    assert weights.unchanged()

    def changed(change) -> bool:
        fresh = cuda_graph._Weights(model)
        change()
        return not fresh.unchanged()

    conv = next(m for m in model.modules() if isinstance(m, nn.Conv2d))
    bn = next(m for m in model.modules() if isinstance(m, nn.BatchNorm2d))
    parent, name = next((m, n) for m in model.modules() for n, c in m.named_children() if c is bn)
    assert changed(lambda: setattr(conv, "weight", nn.Parameter(conv.weight.detach().clone())))
    assert changed(lambda: setattr(parent, name, nn.BatchNorm2d(bn.num_features)))
    assert changed(lambda: model.double())  # the same Parameter objects, new storage
    new_bn = getattr(parent, name)
    assert changed(lambda: new_bn.register_buffer("running_mean", new_bn.running_mean.clone()))
    assert not changed(lambda: new_bn.running_mean.add_(1.0))
