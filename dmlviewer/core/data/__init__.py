"""Dataset formats, split protocols, image loading and the synthetic parts data.

``to_tensor``, ``Preprocess``, ``train_transform``, ``IMAGENET_MEAN``, ``IMAGENET_STD`` and
``ImageFolderDataset`` need torch and are imported on first use, so that reading a listing
(or writing the demo data) does not pay for importing torch.
"""

from __future__ import annotations

import importlib
from typing import Any

from .cross_view import cross_view_pairs, make_cross_view_data
from .demo import make_demo_data
from .errors import DatasetError, ImageError, ImageProblem
from .formats import FORMATS, detect_format, open_dataset
from .images import check_images, load_dataset_image, load_image, probe_image
from .parts import load_part_masks
from .records import Dataset
from .splits import PROTOCOLS

_TORCH_NAMES = {
    "to_tensor": "transforms",
    "Preprocess": "transforms",
    "train_transform": "transforms",
    "IMAGENET_MEAN": "transforms",
    "IMAGENET_STD": "transforms",
    "ImageFolderDataset": "torch_dataset",
}

__all__ = [
    "Dataset", "DatasetError", "FORMATS", "ImageError", "ImageProblem", "PROTOCOLS",
    "check_images", "cross_view_pairs", "detect_format", "load_dataset_image", "load_image", "load_part_masks", "make_cross_view_data", "make_demo_data",
    "open_dataset", "probe_image", *_TORCH_NAMES,
]


def __getattr__(name: str) -> Any:
    if name in _TORCH_NAMES:
        return getattr(importlib.import_module(f".{_TORCH_NAMES[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
