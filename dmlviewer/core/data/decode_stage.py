"""The decode stage of a feature extraction: loader batches in, network inputs on the device out,
on a thread of its own so that preparing batch ``k + 1`` overlaps the forward pass of batch ``k``.

The loader's workers read each file (checked: :func:`~.images.dataset_image_bytes`); a
*decoder* says what they hand over and how the stage finishes it:

- :data:`CPU_DECODER` (``decode="cpu"``, today's path exactly): OpenCV decodes and resizes in
  the workers (:class:`~.device_input.ImageLevels` on an accelerator, normalized tensors of
  :class:`~.torch_dataset.ImageFolderDataset` on the CPU); the stage copies a batch to the
  device and normalizes it there. The decoding stays in the worker processes because one stage
  thread would serialize what the workers do on all the cores (on the 16-core H100 machine 8
  workers decoded about 6,000 images/s, one core about 760).
- :data:`JPEG_DECODER` (``decode="device"``): the workers hand over JPEGs as bytes and decode
  only what nvJPEG does not take (PNG, CMYK, 12-bit, ...: the CPU decoder, per file); the stage
  decodes each batch's JPEGs in one batched ``torchvision.io.decode_jpeg`` call on the device,
  resizes them there, and a JPEG the device refuses falls back to the CPU decoder on the stage
  thread (:func:`~.device_input.device_levels`).

On CUDA the stage enqueues its copies, decoding, resizing and normalization on a stream of its
own and hands each batch over with an event; the consumer's stream waits for that event (not the
host), and the batch's memory is marked as used by the consumer's stream so that the stage's
allocations cannot reuse it while the forward pass still reads it. The stage runs at most
:data:`DEPTH` batches ahead (double buffering). An error in the stage (a worker's included) is
raised in the consumer; leaving the loop early (a cancel) stops the stage and joins its thread.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from typing import Any, Callable, Iterable, Iterator, NamedTuple

import torch

from .device_input import EncodedImages, ImageLevels, collate_encoded, device_levels
from .torch_dataset import ImageFolderDataset
from .transforms import normalize_on

log = logging.getLogger(__name__)

#: batches the stage may hold ready ahead of the consumer (two: one being used, one ready)
DEPTH = 2


class Decoder(NamedTuple):
    """Where a batch's images are decoded: ``images(dataset, preprocess, device)`` is the
    loader's dataset (what a worker hands over), ``collate`` its collate function (``None``:
    torch's default), ``levels(batch, index, images, device)`` the batch on ``device`` as uint8
    N x H x W x 3 levels (or, on the CPU path, normalized float tensors) and ``index`` with -1
    for images that no decoder could read."""

    name: str
    images: Callable[..., ImageFolderDataset]
    collate: Callable | None
    levels: Callable[..., tuple[torch.Tensor, torch.Tensor]]


def _host_images(dataset, preprocess, device: torch.device) -> ImageFolderDataset:
    kind = ImageFolderDataset if device.type == "cpu" else ImageLevels
    return kind(dataset, preprocess, train=False)


def _to_device(batch: torch.Tensor, index: torch.Tensor, images, device: torch.device):
    return batch.to(device, non_blocking=True), index


CPU_DECODER = Decoder("cpu", _host_images, None, _to_device)
JPEG_DECODER = Decoder("device", lambda dataset, preprocess, device: EncodedImages(dataset, preprocess, train=False),
                       collate_encoded, device_levels)


def decoder_of(images) -> Decoder:
    """The decoder whose workers hand over ``images`` (a loader's dataset)."""
    return JPEG_DECODER if isinstance(images, EncodedImages) else CPU_DECODER


class _Failure(NamedTuple):
    error: BaseException


_END = object()


def decoded_batches(batches: Iterable, images, device: torch.device,
                    depth: int = DEPTH) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """``(x, index)`` per loader batch of ``batches`` (an iterator over a loader of ``images``,
    :func:`decoder_of` says how it was decoded): ``x`` the normalized network input on ``device``
    (N x 3 x H x W float32, channels-last on CUDA), ``index`` the listing positions (-1 where no
    decoder could read the image). Prepared on a thread of its own, at most ``depth`` batches
    ahead (module docstring); with ``depth=0`` in the calling thread (for comparison)."""
    decoder = decoder_of(images)
    preprocess = images.preprocess
    stream = torch.cuda.Stream(device) if device.type == "cuda" else None

    def prepare(batch, index) -> tuple[torch.Tensor, torch.Tensor, Any]:
        levels, index = decoder.levels(batch, index, images, device)
        if levels.dtype == torch.uint8:  # N x H x W x 3 -> normalized N x 3 x H x W, channels-last as it comes
            x = normalize_on(levels, preprocess.mean, preprocess.std)
        else:
            x = levels.contiguous(memory_format=torch.channels_last) if stream is not None else levels
        event = None
        if stream is not None:
            event = torch.cuda.Event()
            event.record(stream)
        return x, index, event

    if depth == 0:
        for batch, _, index in batches:
            x, index, _ = prepare(batch, index)
            yield x, index
        return

    ready: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def run() -> None:
        try:
            # inference mode and the current stream are per thread
            with torch.inference_mode(), (torch.cuda.stream(stream) if stream is not None
                                          else contextlib.nullcontext()):
                for batch, _, index in batches:
                    if stop.is_set() or not put(prepare(batch, index)):
                        return
            put(_END)
        except BaseException as exc:  # handed to the consumer, raised there
            put(_Failure(exc))

    thread = threading.Thread(target=run, name="decode-stage", daemon=True)
    thread.start()
    try:
        while True:
            item = ready.get()
            if item is _END:
                return
            if isinstance(item, _Failure):
                raise item.error
            x, index, event = item
            if event is not None:
                consumer = torch.cuda.current_stream(device)
                consumer.wait_event(event)
                x.record_stream(consumer)
            yield x, index
    finally:
        stop.set()
        with contextlib.suppress(queue.Empty):
            while True:
                ready.get_nowait()
        thread.join()
