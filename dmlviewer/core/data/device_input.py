"""What DataLoader workers hand to the device for evaluation, and how the device finishes it.

:class:`ImageLevels`: images decoded and resized in the workers (OpenCV), uint8 H x W x 3; the
device only normalizes them (:func:`~.transforms.normalize_on`).

:class:`EncodedImages` (decoding on the device): the workers only read and check each file
(:func:`~.images.dataset_image_bytes`: size, completeness, pixel limit, link policy) and hand
over a JPEG the device decoder takes (:func:`~.images.device_decodable_jpeg`) as its bytes;
anything else (PNG, CMYK JPEG, ...) is decoded and resized in the worker as for
:class:`ImageLevels`. A bad file is reported and replaced by its successor there, as for every
loader (:class:`~.torch_dataset.ImageFolderDataset`). :func:`collate_encoded` packs a batch's
bytes into one flat tensor (:class:`EncodedBatch`): one shared-memory transfer per batch, where
a list of tensors costs one per image (0.5 ms an image for 6 kB JPEGs, measured 2026-11-27 on
2 cores; the receiving process is the one that would pay it). :func:`device_levels` then decodes the
batch's JPEGs in one batched ``torchvision.io.decode_jpeg`` call on the device (one at a time
when the batched call fails; an image the device refuses is decoded by OpenCV, and one that
fails there too is logged and its row marked -1, left out like a bad image), resizes them there
with the host's arithmetic (:func:`~.transforms.levels_on`, one shape at a time) and stacks the
batch as N x H x W x 3 uint8.

On CUDA the decoder is nvJPEG, whose IDCT can differ from libjpeg's (OpenCV) by a grey level on
some pixels, so features can differ slightly (by how much is not yet measured: this path has
not run on a GPU yet, and extraction decodes with OpenCV by default). On the CPU ``decode_jpeg`` is
libjpeg-turbo, as OpenCV's (the same pixels on the demo data, 2026-11-27).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import warnings
from typing import Iterator, NamedTuple

import numpy as np
import torch

from .errors import ImageError
from .images import dataset_image_bytes, decode_image, device_decodable_jpeg
from .torch_dataset import ImageFolderDataset
from .transforms import levels_on

log = logging.getLogger(__name__)

#: the most pixels resized in one batch of equal shapes (float64 on the device: 24 bytes a pixel)
GROUP_PIXELS = 1 << 24


class ImageLevels(ImageFolderDataset):
    """Images of a dataset decoded and resized to the network input, as uint8 H x W x 3: the
    device normalizes them (:func:`~dmlviewer.core.data.transforms.normalize_on`, the same values
    as the host's). A quarter of the float32 input's bytes to pass between processes, pin and
    copy, and the normalization (a third of a worker's time per image) off the workers."""

    def _tensor(self, image: np.ndarray) -> torch.Tensor:
        return self.preprocess.levels(image)


class EncodedImages(ImageLevels):
    """Per image, its JPEG bytes (1-D uint8) when the device decoder takes them, otherwise its
    levels decoded and resized here (:class:`ImageLevels`); module docstring."""

    def _item(self, i: int) -> torch.Tensor:
        data = dataset_image_bytes(self.dataset, i)
        if device_decodable_jpeg(data):
            return torch.frombuffer(bytearray(data), dtype=torch.uint8)
        return self._tensor(decode_image(data, self.dataset.abspath(i)))


class EncodedBatch(NamedTuple):
    """A batch of :class:`EncodedImages` items: ``data`` the JPEGs' bytes end to end (1-D
    uint8), ``offsets`` where each starts (one more than there are JPEGs), ``encoded`` which
    images are JPEGs (bool, N), ``levels`` the others' levels in batch order (K x H x W x 3)."""

    data: torch.Tensor
    offsets: torch.Tensor
    encoded: torch.Tensor
    levels: torch.Tensor

    def jpegs(self) -> list[torch.Tensor]:
        """Each JPEG's bytes (views of ``data``), in batch order."""
        bounds = self.offsets.tolist()
        return [self.data[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def collate_encoded(batch: list[tuple[torch.Tensor, int, int]]) -> tuple[EncodedBatch, torch.Tensor, torch.Tensor]:
    """``(EncodedBatch, labels, indices)`` of a list of :class:`EncodedImages` items."""
    items = [item[0] for item in batch]
    encoded = [t.dim() == 1 for t in items]
    jpegs = [t for t, e in zip(items, encoded) if e]
    others = [t for t, e in zip(items, encoded) if not e]
    offsets = np.cumsum([0] + [len(t) for t in jpegs], dtype=np.int64)
    data = torch.cat(jpegs) if jpegs else torch.zeros(0, dtype=torch.uint8)
    levels = torch.stack(others) if others else torch.zeros((0, 0, 0, 3), dtype=torch.uint8)
    return (EncodedBatch(data, torch.from_numpy(offsets), torch.tensor(encoded), levels),
            torch.tensor([item[1] for item in batch], dtype=torch.int64),
            torch.tensor([item[2] for item in batch], dtype=torch.int64))


def device_decoding_available() -> bool:
    """Whether this torchvision's ``decode_jpeg`` takes a ``device`` (decodes on CUDA)."""
    try:
        from torchvision.io import decode_jpeg
    except ImportError:
        return False
    return "device" in inspect.signature(decode_jpeg).parameters


@contextlib.contextmanager
def _decoder_stream(device: torch.device) -> Iterator[list[torch.Tensor]]:
    """Around decoding on CUDA: the decoder runs with a side stream current, and the caller's
    stream waits for it afterwards; the tensors put in the yielded list are marked as used by
    the caller's stream. torchvision's CUDA decoder allocates its outputs on the current stream
    but writes them from a private stream that does not wait for it, so with the caller's
    stream current it can be handed memory that queued kernels are still reading (the previous
    batch's input; pytorch/vision#9606, seen on H100). A side stream's pool holds only the
    decoder's own outputs, each kept from reuse until the caller's stream is done with it."""
    if device.type != "cuda":
        yield []
        return
    main = torch.cuda.current_stream(device)
    side = _side_stream(device)
    outputs: list[torch.Tensor] = []
    with torch.cuda.stream(side):
        yield outputs
    main.wait_stream(side)
    for t in outputs:
        t.record_stream(main)


_SIDE_STREAMS: dict[torch.device, torch.cuda.Stream] = {}


def _side_stream(device: torch.device) -> torch.cuda.Stream:
    if device not in _SIDE_STREAMS:
        _SIDE_STREAMS[device] = torch.cuda.Stream(device)
    return _SIDE_STREAMS[device]


def decode_jpegs(jpegs: list[torch.Tensor], device: torch.device) -> list[torch.Tensor | str]:
    """Each JPEG decoded on ``device`` as uint8 3 x H x W RGB, or the decoder's reason for
    refusing it: one batched call, and one call per image when the batched call fails."""
    from torchvision.io import ImageReadMode, decode_jpeg

    def decode(x):
        with warnings.catch_warnings():  # deprecated in torchvision 0.29 (for TorchCodec), warned every call
            warnings.simplefilter("ignore", DeprecationWarning)
            return decode_jpeg(x, mode=ImageReadMode.RGB, device=device)

    if not jpegs:
        return []
    with _decoder_stream(device) as outputs:
        try:
            results: list[torch.Tensor | str] = list(decode(jpegs))
        except torch.cuda.OutOfMemoryError:  # not a refusal of the image
            raise
        except (RuntimeError, ValueError) as exc:
            log.debug("batched JPEG decoding on %s failed (%s); decoding one at a time", device, exc)
            results = []
            for x in jpegs:
                try:
                    results.append(decode(x))
                except torch.cuda.OutOfMemoryError:  # not a refusal of the image
                    raise
                except (RuntimeError, ValueError) as exc_one:
                    results.append((str(exc_one).strip() or type(exc_one).__name__).splitlines()[0][:200])
        outputs.extend(r for r in results if isinstance(r, torch.Tensor))
    return results


def device_levels(batch: EncodedBatch, index: torch.Tensor, images: EncodedImages,
                  device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch as N x H x W x 3 uint8 levels of the network input on ``device``, and
    ``index`` with -1 for the images no decoder could read (each logged with its path and
    reason; their levels are zeros)."""
    shape = images.preprocess.input_shape
    jpegs = batch.jpegs()
    decoded = decode_jpegs(jpegs, device)
    index = index.clone()
    rows: list[torch.Tensor | None] = [None] * len(index)
    positions = np.flatnonzero(batch.encoded.numpy())
    others = np.flatnonzero(~batch.encoded.numpy())
    if len(others):
        host = batch.levels.to(device, non_blocking=True)
        for j, k in enumerate(others):
            rows[k] = host[j]
    by_shape: dict[tuple[int, int], list[int]] = {}
    decoded_at: dict[int, torch.Tensor] = {}
    for k, jpeg, image in zip(positions.tolist(), jpegs, decoded):
        if isinstance(image, str):  # refused by the device: OpenCV's decoding, as in the workers
            levels = _host_levels(jpeg, int(index[k]), images, image)
            if levels is None:
                index[k] = -1
                levels = torch.zeros((*shape, 3), dtype=torch.uint8)
            rows[k] = levels.to(device)
            continue
        decoded_at[k] = image
        by_shape.setdefault(tuple(image.shape[-2:]), []).append(k)
    for (h, w), members in by_shape.items():
        step = max(1, GROUP_PIXELS // (h * w))
        for s in range(0, len(members), step):
            part = members[s:s + step]
            # 3 x H x W each -> N x H x W x 3, resized on the device with the host's arithmetic
            resized = levels_on(torch.stack([decoded_at[k] for k in part]).permute(0, 2, 3, 1), shape)
            for k, r in zip(part, resized):
                rows[k] = r
    return torch.stack(rows), index


def _host_levels(jpeg: torch.Tensor, i: int, images: EncodedImages, reason: str) -> torch.Tensor | None:
    """Image ``i``'s levels decoded and resized on the host when the device refused it
    (``reason``), or ``None`` when OpenCV cannot either (reported once per image, as the
    workers report theirs: a bad image's successor may stand in a batch twice)."""
    path = images.dataset.abspath(i)
    log.debug("%s: the device decoder refused it (%s); decoded on the CPU", path, reason)
    try:
        return images.preprocess.levels(decode_image(jpeg.numpy().tobytes(), path))
    except ImageError as exc:
        images._report(i, exc)
        return None
