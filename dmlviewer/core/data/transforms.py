"""Image arrays to normalized tensors: evaluation resize and training augmentation.

Evaluation (:func:`to_tensor`) resizes the whole image to ``size x size`` (no crop, so a box or a
point in the original image maps to the tensor by scaling each axis) and normalizes with the
ImageNet mean and standard deviation the pretrained backbones expect.

Training (:func:`train_transform`) takes a random crop covering 30-100 % of the image area with
aspect ratio 3/4-4/3 (the torchvision RandomResizedCrop sampling; the lower bound is higher
than torchvision's 8 % so that objects filling only part of the frame, such as the demo
data's, stay mostly in view), resizes it to ``size x size`` and flips it horizontally with
probability 1/2. Random numbers come from torch's global generator, so results repeat under
``torch.manual_seed`` (and DataLoader workers get distinct, reproducible streams).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import cv2
import numpy as np
import torch

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def resize(image: np.ndarray, size: int | tuple[int, int]) -> np.ndarray:
    """``image`` resized to ``size x size``, or to ``height x width`` for a ``(height, width)``
    pair (a two-branch model's panorama branch); area averaging when shrinking, bilinear when
    growing."""
    h, w = image.shape[:2]
    th, tw = (size, size) if isinstance(size, (int, np.integer)) else (int(size[0]), int(size[1]))
    if (h, w) == (th, tw):
        return image
    interpolation = cv2.INTER_AREA if th < h and tw < w else cv2.INTER_LINEAR
    return cv2.resize(image, (tw, th), interpolation=interpolation)


@lru_cache(maxsize=8)
def _table(mean: tuple[float, ...], std: tuple[float, ...]) -> np.ndarray:
    """``table[c, v]`` = ``(v / 255 - mean[c]) / std[c]`` for every uint8 value ``v``: the same
    float32 arithmetic as a direct computation, done once, so that normalizing is a table look-up."""
    m = np.array(mean, dtype=np.float32)
    inv = 1.0 / np.array(std, dtype=np.float32)
    table = (np.arange(256, dtype=np.float32)[None, :] * np.float32(1.0 / 255.0) - m[:, None]) * inv[:, None]
    table = table.astype(np.float32)
    table.flags.writeable = False
    return table


def normalize(image: np.ndarray, mean: tuple[float, ...] = IMAGENET_MEAN,
              std: tuple[float, ...] = IMAGENET_STD) -> torch.Tensor:
    """uint8 H x W x 3 RGB -> float32 3 x H x W tensor, ``(x / 255 - mean) / std``.

    Written channel by channel through a 256-entry table straight into the C x H x W layout
    (about 3x faster than the arithmetic on 224 x 224 images, with identical values)."""
    h, w = image.shape[:2]
    table = _table(tuple(float(v) for v in mean), tuple(float(v) for v in std))
    out = np.empty((3, h, w), dtype=np.float32)
    for c in range(3):
        np.take(table[c], image[:, :, c], out=out[c])
    return torch.from_numpy(out)


def to_tensor(image: np.ndarray, size: int | tuple[int, int] | None, mean: tuple[float, ...] = IMAGENET_MEAN,
              std: tuple[float, ...] = IMAGENET_STD) -> torch.Tensor:
    """The evaluation input: ``image`` (uint8 RGB) resized to ``size x size`` or to a
    ``(height, width)`` pair (``None``: kept) and normalized with ``mean``/``std`` (default :data:`IMAGENET_MEAN` / :data:`IMAGENET_STD`)."""
    return normalize(image if size is None else resize(image, size), mean, std)


@dataclass(frozen=True)
class Preprocess:
    """What a model expects of its input: the image stretched to ``size x size`` (no crop, so
    boxes and points map by scaling each axis), then ``(x / 255 - mean) / std`` per RGB channel.

    Part of every model (``model.preprocess``): the checkpoint's ``image_size``/``mean``/``std``,
    or what a user passes for a module of their own. ``size`` may be overridden per call (the
    pair view's input-resolution choice).

    ``shape``: a ``(height, width)`` input of another aspect ratio (a two-branch model's
    branch, e.g. a 1:4 street panorama); ``None`` is the square ``size x size``. A per-call
    ``size`` (an int, or a ``(height, width)`` pair) overrides either."""

    size: int
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD
    shape: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.size, int) or isinstance(self.size, bool) or not 8 <= self.size <= 4096:
            raise ValueError(f"input size must be an integer from 8 to 4096, got {self.size!r}")
        if self.shape is not None:
            object.__setattr__(self, "shape", input_shape(self.shape))
        for name in ("mean", "std"):
            value = getattr(self, name)
            if (not isinstance(value, (tuple, list)) or len(value) != 3
                    or not all(isinstance(v, (int, float)) and math.isfinite(v) for v in value)):
                raise ValueError(f"preprocessing {name} must be three finite numbers (R, G, B), got {value!r}")
            object.__setattr__(self, name, tuple(float(v) for v in value))
        if min(self.std) <= 0:
            raise ValueError(f"preprocessing std must be positive, got {self.std!r}")

    @property
    def input_shape(self) -> tuple[int, int]:
        """``(height, width)`` of the network input."""
        return self.shape if self.shape is not None else (self.size, self.size)

    def __call__(self, image: np.ndarray, size: int | tuple[int, int] | None = None) -> torch.Tensor:
        """uint8 H x W x 3 RGB -> float32 3 x s x s with ``s = size or self.size`` (3 x h x w for
        a ``(height, width)`` ``size`` or, without ``size``, for ``shape``)."""
        if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
            raise ValueError(f"expected a uint8 H x W x 3 RGB image, got {image.dtype} {tuple(image.shape)}")
        if isinstance(size, (tuple, list)):
            return to_tensor(image, input_shape(size), self.mean, self.std)
        if not size and self.shape is not None:
            return to_tensor(image, self.shape, self.mean, self.std)
        return to_tensor(image, int(size or self.size), self.mean, self.std)

    def with_size(self, size: int) -> "Preprocess":
        return Preprocess(int(size), self.mean, self.std)


def input_shape(value) -> tuple[int, int]:
    """``(height, width)`` from an int side or a pair, each from 8 to 4096 (``ValueError`` naming
    the value otherwise)."""
    pair = (value, value) if isinstance(value, (int, np.integer)) and not isinstance(value, bool) else value
    if (not isinstance(pair, (tuple, list)) or len(pair) != 2
            or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and 8 <= v <= 4096 for v in pair)):
        raise ValueError(f"input shape must be a side or a (height, width) pair of integers from 8 to 4096, "
                         f"got {value!r}"[:200])
    return int(pair[0]), int(pair[1])


def denormalize(tensor: torch.Tensor, mean: tuple[float, ...] = IMAGENET_MEAN,
                std: tuple[float, ...] = IMAGENET_STD) -> np.ndarray:
    """Inverse of :func:`normalize` for display: 3 x H x W tensor -> uint8 H x W x 3 RGB."""
    x = tensor.detach().cpu().numpy().transpose(1, 2, 0) * np.array(std, np.float32) + np.array(mean, np.float32)
    return (np.clip(x, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)


class RandomResizedCropFlip:
    """Training augmentation: random resized crop + horizontal flip (see module docstring)."""

    def __init__(
        self,
        size: int,
        scale: tuple[float, float] = (0.3, 1.0),
        ratio: tuple[float, float] = (3 / 4, 4 / 3),
        flip_p: float = 0.5,
        mean: tuple[float, ...] = IMAGENET_MEAN,
        std: tuple[float, ...] = IMAGENET_STD,
    ) -> None:
        self.size, self.scale, self.ratio, self.flip_p = size, scale, ratio, flip_p
        self.mean, self.std = tuple(mean), tuple(std)

    def crop_box(self, height: int, width: int) -> tuple[int, int, int, int]:
        """``(top, left, h, w)`` of a random crop (torchvision's sampling, 10 tries, then the
        largest centred crop with the aspect ratio clamped into range)."""
        area = height * width
        log_ratio = (math.log(self.ratio[0]), math.log(self.ratio[1]))
        for _ in range(10):
            target = area * torch.empty(1).uniform_(*self.scale).item()
            aspect = math.exp(torch.empty(1).uniform_(*log_ratio).item())
            w = int(round(math.sqrt(target * aspect)))
            h = int(round(math.sqrt(target / aspect)))
            if 0 < w <= width and 0 < h <= height:
                top = int(torch.randint(0, height - h + 1, (1,)).item())
                left = int(torch.randint(0, width - w + 1, (1,)).item())
                return top, left, h, w
        in_ratio = width / height
        if in_ratio < self.ratio[0]:
            w, h = width, int(round(width / self.ratio[0]))
        elif in_ratio > self.ratio[1]:
            h, w = height, int(round(height * self.ratio[1]))
        else:
            w, h = width, height
        return (height - h) // 2, (width - w) // 2, h, w

    def __call__(self, image: np.ndarray) -> torch.Tensor:
        top, left, h, w = self.crop_box(*image.shape[:2])
        crop = resize(image[top : top + h, left : left + w], self.size)
        if torch.rand(1).item() < self.flip_p:
            crop = crop[:, ::-1]
        return normalize(crop, self.mean, self.std)


def train_transform(size: int, mean: tuple[float, ...] = IMAGENET_MEAN,
                    std: tuple[float, ...] = IMAGENET_STD) -> RandomResizedCropFlip:
    """The training augmentation for ``size x size`` inputs (callable: uint8 RGB -> tensor)."""
    return RandomResizedCropFlip(size, mean=mean, std=std)
