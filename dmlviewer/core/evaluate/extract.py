"""Run a model over a dataset: embeddings in memory or in an HDF5 feature file.

A ``DataLoader`` with worker processes decodes and resizes images while the model runs
(pinned memory and non-blocking copies on CUDA), under ``torch.inference_mode``. Images that
cannot be read are left out (the loader logs each with its path and reason), so every stored
row belongs to the image named in ``paths``.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch

from dmlviewer.core.progress import CancelToken, EtaClock, Progress


def default_workers() -> int:
    """Loader worker processes: one core is left to the main process, at most 8."""
    return max(0, min(8, (os.cpu_count() or 1) - 1))


def make_loader(dataset, preprocess, batch_size: int, device: torch.device,
                num_workers: int | None = None) -> torch.utils.data.DataLoader:
    """An evaluation loader over ``dataset`` (a ``core.data.Dataset``) in listing order;
    ``preprocess``: the model's :class:`~dmlviewer.core.data.transforms.Preprocess` (or a size)."""
    from dmlviewer.core.data import ImageFolderDataset

    workers = default_workers() if num_workers is None else num_workers
    return torch.utils.data.DataLoader(
        ImageFolderDataset(dataset, preprocess, train=False),
        batch_size=batch_size, shuffle=False, num_workers=workers,
        pin_memory=device.type == "cuda",
        # an explicit generator: iterating must not draw from torch's global generator
        generator=torch.Generator().manual_seed(0),
        persistent_workers=False,
    )


def embed_batches(model: torch.nn.Module, dataset, batch_size: int = 64,
                  device: str | torch.device = "cpu", num_workers: int | None = None,
                  cancel: CancelToken | None = None) -> Iterator[tuple[np.ndarray, dict[str, np.ndarray]]]:
    """Yield ``(rows, arrays)`` per batch: the dataset positions embedded and their
    ``embeddings``, ``embeddings_raw`` and (for grouping heads) ``groups`` as float32 arrays.
    The model is put in eval mode; its training mode is restored afterwards."""
    from dmlviewer.core.models import resolve_device

    dev = resolve_device(device) if isinstance(device, str) else device
    loader = make_loader(dataset, model.preprocess, batch_size, dev, num_workers)
    channels_last = dev.type == "cuda"
    was_training = model.training
    model.eval()
    start = 0
    try:
        with torch.inference_mode():
            for images, _, index in loader:
                if cancel is not None:
                    cancel.raise_if_cancelled()
                expected = np.arange(start, start + len(index))
                start += len(index)
                images = images.to(dev, non_blocking=True)
                if channels_last:
                    images = images.contiguous(memory_format=torch.channels_last)
                out = model(images)
                arrays = {"embeddings": out.embedding, "embeddings_raw": out.embedding_raw}
                if out.groups is not None:
                    arrays["groups"] = out.groups
                arrays = {k: v.float().cpu().numpy() for k, v in arrays.items()}
                good = index.numpy() == expected  # a bad image was replaced by its successor
                if not good.all():
                    arrays = {k: v[good] for k, v in arrays.items()}
                yield expected[good], arrays
    finally:
        model.train(was_training)


def embed_dataset(model: torch.nn.Module, dataset, batch_size: int = 64,
                  device: str | torch.device = "cpu", num_workers: int | None = None,
                  cancel: CancelToken | None = None) -> Iterator[Progress]:
    """Generator: embed every image of ``dataset`` in memory. Result: ``{"rows",
    "embeddings", "embeddings_raw", ["groups"]}`` (numpy arrays, rows = dataset positions)."""
    total = len(dataset)
    clock = EtaClock(total)
    rows, parts = [], {}
    done = 0
    for batch_rows, arrays in embed_batches(model, dataset, batch_size, device, num_workers, cancel):
        rows.append(batch_rows)
        for k, v in arrays.items():
            parts.setdefault(k, []).append(v)
        done += len(batch_rows)
        yield Progress("step", done, total, "embedding images", eta_s=clock.eta(done))
    result: dict[str, Any] = {"rows": np.concatenate(rows) if rows else np.zeros(0, np.int64)}
    result.update({k: np.concatenate(v) for k, v in parts.items()})
    yield Progress("done", total, total, data={"result": result})


def feature_attrs(model: torch.nn.Module, dataset, checkpoint_sha256: str | None) -> dict[str, Any]:
    """The feature file's attributes (DESIGN.md) for ``model`` run over ``dataset``."""
    return {
        "checkpoint_sha256": checkpoint_sha256 or "",
        "model_config": json.dumps(model.config, sort_keys=True),
        "dataset_root": str(dataset.root),
        "dataset_format": str(dataset.format),
        "class_names": json.dumps([str(n) for n in dataset.class_names]),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def write_batches(writer, model: torch.nn.Module, dataset, batch_size: int = 64,
                  device: str | torch.device = "cpu", num_workers: int | None = None,
                  cancel: CancelToken | None = None, collect: bool = False) -> Iterator[Progress]:
    """Generator: embed ``dataset`` and append every batch to an open ``FeatureWriter``.
    Result: ``{"rows", "num_images", "skipped"}`` and, with ``collect``, the ``embeddings``."""
    total = len(dataset)
    clock = EtaClock(total)
    rows_done, kept = [], []
    written = 0
    for rows, arrays in embed_batches(model, dataset, batch_size, device, num_workers, cancel):
        writer.append(
            embeddings=arrays["embeddings"],
            embeddings_raw=arrays["embeddings_raw"],
            labels=dataset.labels[rows],
            paths=[dataset.paths[i] for i in rows],
            split=[str(s) for s in dataset.split[rows]],
            boxes=dataset.boxes[rows],
            **({"groups": arrays["groups"]} if "groups" in arrays else {}),
        )
        rows_done.append(rows)
        if collect:
            kept.append(arrays["embeddings"])
        written += len(rows)
        yield Progress("step", written, total, "extracting features", eta_s=clock.eta(written))
    result = {"rows": np.concatenate(rows_done) if rows_done else np.zeros(0, np.int64),
              "num_images": written, "skipped": total - written}
    if collect:
        result["embeddings"] = np.concatenate(kept) if kept else np.zeros((0, 0), np.float32)
    yield Progress("done", total, total, data={"result": result})


def extract_features(model: torch.nn.Module, dataset, out_path: str | os.PathLike,
                     batch_size: int = 64, device: str | torch.device = "cpu",
                     num_workers: int | None = None, cancel: CancelToken | None = None,
                     checkpoint_sha256: str | None = None) -> Iterator[Progress]:
    """Generator: embed ``dataset`` (a ``core.data.Dataset``) and write the HDF5 feature file
    ``out_path`` (DESIGN.md schema) batch by batch through the store's ``FeatureWriter``; the
    file appears only when complete. Result: ``{"path", "num_images", "skipped"}``."""
    from .store import FeatureWriter

    result: dict = {}
    with FeatureWriter(out_path, attrs=feature_attrs(model, dataset, checkpoint_sha256)) as writer:
        for event in write_batches(writer, model, dataset, batch_size, device, num_workers, cancel):
            if event.kind == "done":
                result = event.data["result"]
            else:
                yield event
    result = {"path": str(Path(out_path)), "num_images": result["num_images"], "skipped": result["skipped"]}
    yield Progress("done", len(dataset), len(dataset), data={"result": result})
