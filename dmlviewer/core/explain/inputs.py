"""Inputs of the explanation functions: images as uint8 RGB arrays, devices, eval mode.

Shared by :mod:`.pair`, :mod:`.grad_transfer`, :mod:`.region` and :mod:`.localization`, so that
none of them imports another for these helpers.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import torch

ImageLike = np.ndarray | str | Path


def as_rgb(image: ImageLike) -> np.ndarray:
    """uint8 H x W x 3 RGB from an image file (via :func:`dmlviewer.core.data.load_image`) or an
    in-memory array already in RGB order: grayscale (H x W, H x W x 1) is repeated, gray+alpha
    and RGBA are composited on white as the loader does."""
    from dmlviewer.core.data import load_image

    if isinstance(image, (str, Path)):
        return load_image(image)
    a = np.asarray(image)
    if a.dtype != np.uint8:
        raise ValueError(f"images must be uint8 arrays, got {a.dtype}")
    if a.ndim == 2:
        a = a[..., None]
    if a.ndim != 3 or a.shape[2] not in (1, 2, 3, 4) or min(a.shape[:2]) < 1:
        raise ValueError(f"not an image array: shape {a.shape}")
    if a.shape[2] in (2, 4):
        alpha = a[..., -1:].astype(np.uint16)
        colour = a[..., :-1].astype(np.uint16)
        a = ((colour * alpha + 255 * (255 - alpha) + 127) // 255).astype(np.uint8)
    if a.shape[2] == 1:
        a = np.repeat(a, 3, axis=2)
    return np.ascontiguousarray(a)


@contextlib.contextmanager
def eval_mode(model: torch.nn.Module):
    """Eval mode (frozen BatchNorm statistics, as the decomposition assumes) for the block."""
    if not model.training:  # the common case; toggling walks every module
        yield model
        return
    model.eval()
    try:
        yield model
    finally:
        model.train()


def as_device(device: str | torch.device) -> torch.device:
    """A ``torch.device`` from a spec (``auto cpu cuda cuda:N mps`` or a device)."""
    from dmlviewer.core.models import resolve_device

    return device if isinstance(device, torch.device) else resolve_device(str(device))
