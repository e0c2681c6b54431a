"""Perturbing an input on its feature grid: cells, baselines and batched embeddings of the
perturbed copies (shared by :mod:`.occlusion` and :mod:`.faithfulness`).

Cells: the network input (``H x W`` after ``model.preprocess``) is partitioned into the ``h x w``
cells of the last feature map's grid with the alignment of :mod:`.grid`: pixel ``(y, x)`` belongs
to cell ``(floor((y + 0.5) h / H), floor((x + 0.5) w / W))``, i.e. cell ``(i, j)`` covers
``[j W/w, (j+1) W/w] x [i H/h, (i+1) H/h]``. Cells are flattened row-major (``i * w + j``).

Baselines (what a removed cell shows instead of the image), built from the image itself in the
normalized input space:

- ``blur``: the image under a Gaussian blur with a standard deviation of one cell (the cell's
  content is gone, its mean colour and the large-scale shading stay);
- ``mean``: the image's mean colour (per channel) everywhere;
- ``noise``: seeded Gaussian noise with the image's per-channel mean and standard deviation.

A perturbed copy is described by a boolean ``keep`` vector over the cells: kept cells show the
image, the others the baseline.
"""

from __future__ import annotations

from typing import Iterator

import cv2
import numpy as np
import torch

from dmlviewer.core.explain.perturb_options import BASELINES, CPU_BATCH, GPU_BATCH
from dmlviewer.core.models.folding import for_embeddings
from dmlviewer.core.progress import CancelToken, EtaClock, Progress


def cell_labels(input_shape: tuple[int, int], grid: tuple[int, int]) -> np.ndarray:
    """``H x W`` int64: the flat index of the grid cell each input pixel belongs to."""
    height, width = int(input_shape[0]), int(input_shape[1])
    h, w = int(grid[0]), int(grid[1])
    rows = np.minimum(((np.arange(height) + 0.5) * h / height).astype(np.int64), h - 1)
    cols = np.minimum(((np.arange(width) + 0.5) * w / width).astype(np.int64), w - 1)
    return rows[:, None] * w + cols[None, :]


def baseline_input(x: torch.Tensor, kind: str, grid: tuple[int, int], seed: int = 0) -> torch.Tensor:
    """The baseline of a normalized input ``x`` (``3 x H x W``), same shape and dtype (see the
    module docstring). ``noise`` is reproducible for a given ``seed``."""
    if kind not in BASELINES:
        raise ValueError(f"unknown baseline {kind!r}; choose from {', '.join(BASELINES)}")
    x = x.detach().float()
    if kind == "mean":
        return x.mean(dim=(1, 2), keepdim=True).expand_as(x).clone()
    if kind == "noise":
        gen = torch.Generator().manual_seed(int(seed))
        noise = torch.randn(x.shape, generator=gen, dtype=torch.float32).to(x.device)
        mean = x.mean(dim=(1, 2), keepdim=True)
        std = x.std(dim=(1, 2), keepdim=True)
        return mean + std * noise
    sigma = 0.5 * (x.shape[1] / grid[0] + x.shape[2] / grid[1])
    hwc = np.ascontiguousarray(x.cpu().numpy().transpose(1, 2, 0))
    blurred = cv2.GaussianBlur(hwc, (0, 0), sigmaX=sigma, sigmaY=sigma, borderType=cv2.BORDER_REFLECT)
    return torch.from_numpy(np.ascontiguousarray(blurred.transpose(2, 0, 1))).to(x.device)


def compose(x: torch.Tensor, baseline: torch.Tensor, labels: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Perturbed copies ``B x 3 x H x W`` in the channels-last memory layout: pixel of cell ``c``
    from ``x`` where ``keep[b, c]``, else from ``baseline`` (``x``, ``baseline``: ``3 x H x W``;
    ``labels``: :func:`cell_labels` as a tensor on ``x``'s device). :class:`Composer` builds the
    same copies faster for many batches."""
    return Composer(x, baseline, labels)(keep)


class Composer:
    """:func:`compose` prepared for one image, its baseline and its cells.

    Each copy is ``x m + baseline (1 - m)`` with ``m`` in {0, 1}: exactly the chosen pixel's
    value (finite inputs). When every cell has the same size in pixels (the input is a multiple
    of the grid, as at the model's own size), the images are held as ``h x ch x w x cw x 3``
    blocks and the mask multiplies whole blocks, building the channels-last batch directly: on
    this project's CPU about 0.03 ms an image at 256 px, against 0.2 ms through the per-pixel
    mask and a layout copy, and 0.5 ms with ``torch.where`` (the perturbation methods build
    thousands). Other grids take the per-pixel mask."""

    def __init__(self, x: torch.Tensor, baseline: torch.Tensor, labels: torch.Tensor) -> None:
        height, width = labels.shape
        w = int(labels[0].max()) + 1
        h = int(labels[:, 0].max()) // w + 1
        blocked = height % h == 0 and width % w == 0 and torch.equal(
            labels, torch.from_numpy(cell_labels((height, width), (h, w))).to(labels.device))
        self.shape = (height, width)
        if blocked:
            self.blocks = (h, height // h, w, width // w)
            self.x, self.baseline = (t.permute(1, 2, 0).contiguous().view(1, *self.blocks, 3) for t in (x, baseline))
        else:
            self.blocks = None
            self.x, self.baseline, self.labels = x[None], baseline[None], labels

    def __call__(self, keep: torch.Tensor) -> torch.Tensor:
        b = len(keep)
        if self.blocks is not None:
            h, _, w, _ = self.blocks
            m = keep.to(self.x.dtype).view(b, h, 1, w, 1, 1)
            out = self.x * m
            out.addcmul_(self.baseline, 1 - m)
            return out.view(b, *self.shape, 3).permute(0, 3, 1, 2)
        m = keep.to(self.x.dtype)[:, self.labels][:, None]  # B x 1 x H x W
        out = self.x * m
        return fast_layout(out.addcmul_(self.baseline, 1 - m))


def fast_layout(batch: torch.Tensor) -> torch.Tensor:
    """``batch`` in the channels-last memory layout (N x C x H x W images): the same values, and
    convolutions about 1.5x faster on the CPU (small_cnn at 256 px: 110 ms against 165 ms for 32
    images; embeddings equal to 2.5e-7). Perturbation methods run thousands of forward passes."""
    return batch.contiguous(memory_format=torch.channels_last) if batch.dim() == 4 else batch


def batch_size_for(device: torch.device, batch_size: int | None = None) -> int:
    """Perturbed copies per forward pass: ``batch_size`` when given, else :data:`CPU_BATCH` on
    the CPU and :data:`GPU_BATCH` elsewhere."""
    if batch_size is not None:
        if batch_size < 1:
            raise ValueError(f"batch size must be positive, got {batch_size}")
        return int(batch_size)
    return CPU_BATCH if torch.device(device).type == "cpu" else GPU_BATCH


def embed_kept(
    model: torch.nn.Module,
    x: torch.Tensor,
    baseline: torch.Tensor,
    labels: torch.Tensor,
    keep: np.ndarray,
    batch_size: int | None = None,
    cancel: CancelToken | None = None,
    message: str = "perturbed inputs",
) -> Iterator[Progress]:
    """L2-normalized embeddings (``len(keep) x D`` float32 tensor, on the model's device) of the
    perturbed copies described by the rows of ``keep`` (``m x n`` bool), in batches of
    ``batch_size`` (:func:`batch_size_for`) without gradients, by the model with its batch norms
    folded (:func:`~dmlviewer.core.models.folding.for_embeddings`: the same embeddings to float
    rounding); yields a ``step`` event per batch and *returns* the embeddings (use ``emb = yield
    from embed_kept(...)``). The model must be in eval mode."""
    batch_size = batch_size_for(x.device, batch_size)
    keep_t = torch.as_tensor(np.asarray(keep, dtype=bool), device=x.device)
    rows = []
    total = len(keep_t)
    runner = None
    composer = Composer(x, baseline, labels)
    with torch.inference_mode():
        for start in range(0, total, batch_size):
            if cancel is not None:
                cancel.raise_if_cancelled()
            batch = composer(keep_t[start : start + batch_size])
            if runner is None:
                runner = for_embeddings(model, batch)
            rows.append(runner(batch).embedding.float())
            yield Progress("step", min(start + batch_size, total), total, message)
    if not rows:
        return torch.zeros((0, 0))
    return torch.cat(rows)


def relay(job: Iterator[Progress], offset: int, total: int, clock: EtaClock | None = None) -> Iterator[Progress]:
    """Re-yield a sub-job's ``step`` events as steps ``offset + current`` of ``total`` (with an
    ETA from ``clock``) and return its result: the ``done`` event's ``data["result"]`` or, for a
    generator that returns a value, that value (``value = yield from relay(...)``)."""
    result = None
    while True:
        try:
            event = next(job)
        except StopIteration as stop:
            return stop.value if stop.value is not None else result
        if event.kind == "done":
            result = event.data.get("result")
            continue
        if event.kind != "step":
            yield event
            continue
        current = offset + event.current
        yield Progress("step", current, total, event.message, eta_s=clock.eta(current) if clock else None)
