"""Inputs of the explanation functions: images as uint8 RGB arrays, devices, eval mode.

Shared by :mod:`.pair`, :mod:`.grad_transfer`, :mod:`.region` and :mod:`.localization`, so that
none of them imports another for these helpers.
"""

from __future__ import annotations

import contextlib
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from dmlviewer.core.data.transforms import Preprocess

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


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _side_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="dmlviewer-inputs")
        return _pool


def pair_inputs(preprocess: "Preprocess", images: tuple[np.ndarray, np.ndarray], sizes: tuple,
                device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Both images of a pair as network inputs (``preprocess(image, size, device=device)``).

    When both are resized on the host, the reference is resized on a side thread while the
    query is resized here: OpenCV releases the GIL, so on a machine with a free core a pair's
    preprocessing costs one resize, not two (an area shrink of a 500 x 375 photograph takes
    about 0.8 ms at one thread). An accelerator resizes there (nothing to overlap), and an image
    already at its input shape only needs normalizing."""
    (image_q, image_r), (size_q, size_r) = images, sizes
    both_resized = device.type == "cpu" and all(
        image.shape[:2] != preprocess.shape_for(size) for image, size in zip(images, sizes))
    if not both_resized:
        return preprocess(image_q, size_q, device=device), preprocess(image_r, size_r, device=device)
    reference = _side_pool().submit(preprocess, image_r, size_r, device=device)
    query = preprocess(image_q, size_q, device=device)
    return query, reference.result()
