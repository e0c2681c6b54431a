"""Shared fixtures: small synthetic data and models built on the fly (nothing downloaded)."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


# --- data: the synthetic parts dataset, small (owner: core/data) ---
import pytest  # noqa: E402


@pytest.fixture(scope="session")
def tiny_demo_root(tmp_path_factory):
    """A small synthetic parts dataset (6 classes x 4 images of 64 px, seed 0): CUB layout
    plus part masks, written once per test session. Open it with ``open_dataset``."""
    from dmlviewer.core.data import make_demo_data

    return make_demo_data(tmp_path_factory.mktemp("demo") / "data", classes=6, per_class=4, size=64, seed=0)
