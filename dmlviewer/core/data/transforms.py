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


def _target(image: np.ndarray, size: int | tuple[int, int]) -> tuple[int, int]:
    return (size, size) if isinstance(size, (int, np.integer)) else (int(size[0]), int(size[1]))


def _shrinks(shape: tuple[int, ...], th: int, tw: int) -> bool:
    """Whether both axes of an image of ``shape`` (height, width, ...) shrink (area averaging);
    otherwise bilinear."""
    return th < shape[0] and tw < shape[1]


def _integer_factors(image: np.ndarray, th: int, tw: int) -> bool:
    """Whether both axes shrink by whole factors (OpenCV's fast uint8 area path, which rounds
    halves up: kept as it is)."""
    return image.shape[0] % th == 0 and image.shape[1] % tw == 0


def resize(image: np.ndarray, size: int | tuple[int, int]) -> np.ndarray:
    """``image`` resized to ``size x size``, or to ``height x width`` for a ``(height, width)``
    pair (a two-branch model's panorama branch); area averaging when shrinking, bilinear when
    growing."""
    th, tw = _target(image, size)
    if image.shape[:2] == (th, tw):
        return image
    if _shrinks(image.shape, th, tw) and not _integer_factors(image, th, tw):
        return _area_levels(image, th, tw)
    interpolation = cv2.INTER_AREA if _shrinks(image.shape, th, tw) else cv2.INTER_LINEAR
    return cv2.resize(image, (tw, th), interpolation=interpolation)


def _area_levels(image: np.ndarray, th: int, tw: int) -> np.ndarray:
    """OpenCV's area shrink of a uint8 image by a non-integer factor, as uint8: the float32
    resize rounded half to even (as OpenCV rounds its uint8 result) gives OpenCV's uint8 values
    exactly, in a third to a half of the time at photo sizes (OpenCV's uint8 area path for
    non-integer factors is its slow one; measured 2026-11-27, one thread, 500x375 -> 224). The
    rounding is OpenCV's float-to-uint8 conversion (``|1 * x + 0|``, rounded half to even and
    saturated; the area mean of levels is already in 0..255), one pass instead of ``np.rint``
    and a cast."""
    out = cv2.resize(image.astype(np.float32), (tw, th), interpolation=cv2.INTER_AREA)
    return cv2.convertScaleAbs(out)


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
    (about 3x faster than the arithmetic on 224 x 224 images, with identical values); a uint8
    image's planes go through OpenCV's look-up (``cv2.split`` + ``cv2.LUT``, 2.5x faster than
    ``np.take`` on the strided channels at one thread)."""
    h, w = image.shape[:2]
    table = _table(tuple(float(v) for v in mean), tuple(float(v) for v in std))
    out = np.empty((3, h, w), dtype=np.float32)
    if image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3 and h and w:
        for c, plane in enumerate(cv2.split(np.ascontiguousarray(image))):
            cv2.LUT(plane, table[c], dst=out[c])
        return torch.from_numpy(out)
    for c in range(3):
        np.take(table[c], image[:, :, c], out=out[c])
    return torch.from_numpy(out)


def to_tensor(image: np.ndarray, size: int | tuple[int, int] | None, mean: tuple[float, ...] = IMAGENET_MEAN,
              std: tuple[float, ...] = IMAGENET_STD, device: torch.device | str | None = None) -> torch.Tensor:
    """The evaluation input: ``image`` (uint8 RGB) resized to ``size x size`` or to a
    ``(height, width)`` pair (``None``: kept) and normalized with ``mean``/``std`` (default :data:`IMAGENET_MEAN` / :data:`IMAGENET_STD`).

    ``device``: where the result goes. On an accelerator the uint8 image is copied there as it
    is and resized and normalized there (:func:`to_tensor_on`), so that the host does no
    per-pixel work."""
    if device is not None and torch.device(device).type != "cpu":
        return to_tensor_on(image, size, torch.device(device), mean, std)
    if size is not None:
        th, tw = _target(image, size)
        if _shrinks(image.shape, th, tw) and not _integer_factors(image, th, tw):
            return normalize(_area_levels(image, th, tw), mean, std)
        image = resize(image, (th, tw))
    return normalize(image, mean, std)


@lru_cache(maxsize=32)
def _area_matrix(n_in: int, n_out: int, device: torch.device) -> torch.Tensor:
    """``n_out x n_in`` float64 weights of area averaging along one axis: output cell ``o``
    covers input ``[o s, (o + 1) s]`` (``s = n_in / n_out``) and weighs each input pixel by the
    covered fraction of it, over ``s`` (OpenCV's ``INTER_AREA`` when shrinking)."""
    scale = n_in / n_out
    lo = torch.arange(n_out, dtype=torch.float64)[:, None] * scale
    px = torch.arange(n_in, dtype=torch.float64)[None, :]
    covered = (torch.minimum(lo + scale, px + 1) - torch.maximum(lo, px)).clamp_min(0.0)
    return (covered / scale).to(device)


def levels_on(image: np.ndarray | torch.Tensor, size: int | tuple[int, int] | None,
              device: torch.device | str | None = None) -> torch.Tensor:
    """``image`` (uint8 (N x) H x W x 3: a host array, or a tensor on any device) resized to
    ``size x size`` or a ``(height, width)`` pair (``None``: kept) as uint8 levels on ``device``
    (default: where a tensor is; a host array goes there as it is, the only transfer). Area
    shrinking is two float64 matrix products with :func:`_area_matrix` (no TF32 rounding), then
    rounded to whole grey levels as the host's uint8 resize is; growing is bilinear
    (``align_corners=False``, OpenCV's alignment, within one grey level of OpenCV's fixed-point
    result). One function for a host image (:func:`to_tensor_on`) and for images decoded on the
    device (a batch of one shape at a time)."""
    x = image if isinstance(image, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(image))
    if device is not None:
        x = x.to(device, non_blocking=True)
    lead, (h, w) = x.shape[:-3], x.shape[-3:-1]
    th, tw = (h, w) if size is None else _target(image, size)
    if (th, tw) == (h, w):
        return x
    if _shrinks((h, w), th, tw):
        x = x.to(torch.float64, memory_format=torch.contiguous_format)
        rows = _area_matrix(h, th, x.device) @ x.reshape(*lead, h, w * 3)  # (N x) th x (w*3)
        # (N x) th x 3 x w times w x tw: one matrix product for the whole batch (not N * th small ones)
        x = (rows.reshape(*lead, th, w, 3).transpose(-1, -2) @ _area_matrix(w, tw, x.device).T).transpose(-1, -2)
    else:
        x = torch.nn.functional.interpolate(x.reshape(-1, h, w, 3).permute(0, 3, 1, 2).double(), size=(th, tw),
                                            mode="bilinear", align_corners=False)
        x = x.permute(0, 2, 3, 1).reshape(*lead, th, tw, 3)
    return x.round_().to(torch.uint8)  # area and bilinear weights are convex: already within 0..255


def to_tensor_on(image: np.ndarray, size: int | tuple[int, int] | None, device: torch.device,
                 mean: tuple[float, ...] = IMAGENET_MEAN, std: tuple[float, ...] = IMAGENET_STD) -> torch.Tensor:
    """:func:`to_tensor` computed on ``device``: the uint8 image is the only transfer, resized
    there (:func:`levels_on`) and normalized with the host's float32 arithmetic."""
    return normalize_on(levels_on(image, size, device), mean, std).contiguous()


@lru_cache(maxsize=16)
def _constants(mean: tuple[float, ...], std: tuple[float, ...], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``mean`` and ``1 / std`` as float32 ``3 x 1 x 1`` tensors on ``device``, made once (a copy
    from pageable host memory per batch would wait for the device's queue)."""
    m = torch.tensor(mean, dtype=torch.float32)[:, None, None]
    inv = (1.0 / torch.tensor(std, dtype=torch.float32))[:, None, None]
    return m.to(device), inv.to(device)


def normalize_on(levels: torch.Tensor, mean: tuple[float, ...] = IMAGENET_MEAN,
                 std: tuple[float, ...] = IMAGENET_STD) -> torch.Tensor:
    """(N x) H x W x 3 grey levels (uint8, or whole numbers in a float tensor) on any device ->
    (N x) 3 x H x W float32 ``(x / 255 - mean) / std``, with :func:`normalize`'s float32
    arithmetic (the same values). A batch comes out channels-last in memory (the layout the
    GPU's convolutions prefer) without a copy."""
    m, inv = _constants(tuple(float(v) for v in mean), tuple(float(v) for v in std), levels.device)
    x = levels.float().movedim(-1, -3)
    return (x * np.float32(1.0 / 255.0) - m) * inv


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

    def __call__(self, image: np.ndarray, size: int | tuple[int, int] | None = None,
                 device: torch.device | str | None = None) -> torch.Tensor:
        """uint8 H x W x 3 RGB -> float32 3 x s x s with ``s = size or self.size`` (3 x h x w for
        a ``(height, width)`` ``size`` or, without ``size``, for ``shape``), on ``device``
        (default the host; an accelerator resizes there, :func:`to_tensor_on`)."""
        if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
            raise ValueError(f"expected a uint8 H x W x 3 RGB image, got {image.dtype} {tuple(image.shape)}")
        return to_tensor(image, self.shape_for(size), self.mean, self.std, device)

    def shape_for(self, size: int | tuple[int, int] | None = None) -> tuple[int, int]:
        """``(height, width)`` of the input made for a per-call ``size`` (see :meth:`__call__`)."""
        if isinstance(size, (tuple, list)):
            return input_shape(size)
        if not size and self.shape is not None:
            return self.shape
        side = int(size or self.size)
        return side, side

    def levels(self, image: np.ndarray) -> torch.Tensor:
        """The network input before normalization: ``image`` resized to :attr:`input_shape` as
        uint8 H x W x 3 (:func:`normalize_on` finishes it on a device; 4x fewer bytes to hand
        over than the float32 input)."""
        return torch.from_numpy(np.ascontiguousarray(resize(image, self.input_shape)))

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
