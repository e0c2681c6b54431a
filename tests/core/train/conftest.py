"""Tiny synthetic data for training tests (64 px, a few images per class)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory):
    """6 classes x 8 images at 64 px: 3 training and 3 test classes (zero-shot halves)."""
    from dmlviewer.core.data import make_demo_data

    return make_demo_data(tmp_path_factory.mktemp("tiny") / "data", classes=6, per_class=8, size=64, seed=0)


@pytest.fixture(scope="session")
def tiny_config(tiny_data):
    """``tiny_config(out, **overrides)``: a CPU run of 3 epochs x 2 steps on ``tiny_data`` (no
    validation split unless asked for)."""
    from dmlviewer.core.train import TrainConfig

    def make(out, **overrides):
        options = dict(dataset=str(tiny_data), out=str(out), image_size=64, dim=32, classes_per_batch=3,
                       images_per_class=4, epochs=3, num_workers=0, device="cpu", deterministic=True,
                       log_every=1, lr=1e-3, seed=3, val_fraction=0.0)
        options.update(overrides)
        return TrainConfig(**options)

    return make
