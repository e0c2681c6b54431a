"""Fixtures for the models tests: small inputs and models with non-trivial BatchNorm statistics."""

from __future__ import annotations

import pytest
import torch
from _random_norms import randomize_batchnorm
from torch import nn

from dmlviewer.core.models import build_model, default_config


def small_model(seed: int = 0, **overrides) -> nn.Module:
    """A small_cnn model at 64 px (4 x 4 grid), D = 32, in eval mode with random BN statistics."""
    torch.manual_seed(seed)
    config = default_config(backbone="small_cnn", image_size=64, dim=32, groups=4)
    config.update(overrides)
    return randomize_batchnorm(build_model(config), seed).eval()


@pytest.fixture
def images() -> torch.Tensor:
    return torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(1))


@pytest.fixture
def make_model():
    """Factory: ``make_model(seed=0, **config_overrides)`` -> small eval-mode model."""
    return small_model


@pytest.fixture
def randomize():
    """``randomize(module, seed=0)``: :func:`randomize_batchnorm` as a fixture."""
    return randomize_batchnorm
