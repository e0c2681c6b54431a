"""Non-trivial normalization statistics for the model tests (a test module of its own name, so
that test files and the conftest import it alike)."""

from __future__ import annotations

import torch
from torch import nn


def randomize_batchnorm(model: nn.Module, seed: int = 0) -> nn.Module:
    """Give every BatchNorm non-trivial running statistics and affine parameters, so folding
    them into the linear maps is actually exercised."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                n = m.num_features
                m.running_mean.copy_(torch.randn(n, generator=gen) * 0.3)
                m.running_var.copy_(torch.rand(n, generator=gen) + 0.5)
                m.weight.copy_(torch.randn(n, generator=gen) * 0.5 + 1.0)
                m.bias.copy_(torch.randn(n, generator=gen) * 0.2)
    return model
