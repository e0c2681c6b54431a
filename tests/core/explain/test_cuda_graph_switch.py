"""The pair graphs' switch and copies, on the host (core.explain.cuda_graph; replaying itself
is checked on a GPU in tests/gpu/test_cuda_graph.py): off by default until it has been
checked on a GPU, on by environment or for a block, never used off CUDA, and the outputs a
replay hands out are copies of the graph's buffers."""

from __future__ import annotations

import torch

from dmlviewer.core.explain import cuda_graph
from dmlviewer.core.explain.decomposition import forward_decomposed
from dmlviewer.core.models import build_model, default_config


def test_off_by_default_on_by_environment_or_for_a_block(monkeypatch):
    monkeypatch.delenv("DMLVIEWER_CUDA_GRAPHS", raising=False)
    assert not cuda_graph.enabled()
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
