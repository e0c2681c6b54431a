"""Metrics, feature extraction, evaluation, retrieval and the HDF5 feature store.

The metrics, extraction, evaluation and retrieval names need torch and are imported on first
use, so that reading a feature file does not pay for importing torch.
"""

from __future__ import annotations

import importlib
from typing import Any

# HDF5 feature store
from .store import (
    FORMAT_VERSION,
    FeatureFile,
    FeatureWriter,
    Features,
    StoreError,
    open_features,
    read_features,
    update_attrs,
    write_features,
)

# metrics, extraction, evaluation, retrieval (imported on first use)
_LAZY_NAMES = {
    "compute_metrics": "metrics",
    "nearest_neighbors": "metrics",
    "embed_dataset": "extract",
    "extract_features": "extract",
    "evaluate": "evaluation",
    "retrieve": "retrieval",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY_NAMES:
        return getattr(importlib.import_module(f".{_LAZY_NAMES[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
