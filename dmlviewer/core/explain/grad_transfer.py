"""Grad-weight transfer (seed 002): Grad-CAM channel weights of labelled (training) images,
reused for new images without a backward pass.

Computing (offline, :func:`compute_grad_weights`): for image ``i`` with at least one other image
of its class, take its ``positives`` most similar same-class images (cosine of the embeddings),
compute the Grad-CAM channel weights ``alpha_k = mean_ij dT/dA_ijk`` of ``i``'s feature map
against each (the target ``T`` as in :mod:`.gradcam`: ``"dot"`` = ``Eq.Er / (|Eq||Er|)`` with
constant norms, the better of the two for localization in seed 000 Table 1, or ``"cosine"``),
and average them. Images without a positive get a NaN row.

Transfer (:class:`GradWeightBank`): a new image's weights are the mean of the weights of its
``k`` nearest labelled images by embedding cosine; its map is ``sum_k alpha_k A_ijk``.

Storage: the ``grad_weights`` dataset (N x C float32, NaN rows where unknown) of the HDF5 feature
file, beside ``embeddings`` (see :func:`add_grad_weights`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from dmlviewer.core.explain.decomposition import head_function
from dmlviewer.core.explain.gradcam import target_gradients
from dmlviewer.core.progress import CancelToken, EtaClock, Progress

log = logging.getLogger(__name__)

GRAD_WEIGHTS = "grad_weights"


@dataclass
class GradWeightBank:
    """Labelled images' embeddings (N x D, normalized here) and Grad-CAM weights (N x C); a new
    image takes the mean weights of its ``k`` nearest bank images. Rows with non-finite
    weights are dropped."""

    embeddings: np.ndarray
    weights: np.ndarray
    k: int = 5

    def __post_init__(self) -> None:
        keep = np.all(np.isfinite(self.weights), axis=1)
        if not keep.any():
            raise ValueError("the grad-weight bank holds no finite weights")
        emb = np.asarray(self.embeddings[keep], dtype=np.float32)
        self.embeddings = np.ascontiguousarray(emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12))
        self.weights = np.ascontiguousarray(self.weights[keep], dtype=np.float32)

    def weights_for(self, embedding: np.ndarray, k: int | None = None) -> np.ndarray:
        """Mean weights (C) of the ``k`` (default ``self.k``) bank images nearest to
        ``embedding`` (cosine)."""
        e = np.asarray(embedding, dtype=np.float32).reshape(-1)
        e = e / max(float(np.linalg.norm(e)), 1e-12)
        sims = self.embeddings @ e
        k = max(1, min(int(self.k if k is None else k), len(sims)))
        nearest = np.argpartition(-sims, k - 1)[:k]
        return self.weights[nearest].mean(0)


def _batches(model: torch.nn.Module, dataset, batch_size: int, device: torch.device):
    """``(dataset indices, ModelOutput)`` per batch, in listing order, without gradients.
    Unreadable images are skipped by the loader (logged there) and never yielded."""
    from dmlviewer.core.data import ImageFolderDataset

    images = ImageFolderDataset(dataset, model.preprocess)
    loader = torch.utils.data.DataLoader(images, batch_size=batch_size, shuffle=False, num_workers=0)
    for x, _, index in loader:
        with torch.no_grad():
            yield index.numpy(), model(x.to(device))


def compute_grad_weights(
    model: torch.nn.Module,
    dataset,
    positives: int = 3,
    target: str = "dot",
    batch_size: int = 32,
    device: str | torch.device = "cpu",
    cancel: CancelToken | None = None,
) -> Iterator[Progress]:
    """Grad-CAM weights of every image of ``dataset`` (a ``core.data.Dataset``); the ``done``
    event's result is ``{"weights": N x C, "embeddings": N x D}`` (NaN rows: no positive, or
    an unreadable image)."""
    from dmlviewer.core.explain.inputs import as_device, eval_mode

    if target not in ("dot", "cosine"):
        raise ValueError(f"unknown grad-weight target {target!r}: use 'dot' or 'cosine'")
    n = len(dataset)
    if n == 0:
        raise ValueError("no images to compute grad weights for")
    dev = as_device(device)
    labels = np.asarray(dataset.labels)
    clock = EtaClock(2 * n)
    with eval_mode(model):
        # pass 1: raw embeddings, to pick each image's most similar positives
        raw = None
        for index, out in _batches(model, dataset, batch_size, dev):
            if cancel is not None:
                cancel.raise_if_cancelled()
            if raw is None:
                raw = torch.full((n, out.embedding_raw.shape[1]), float("nan"))
            raw[index] = out.embedding_raw.float().cpu()
            yield Progress("step", int(index[-1]) + 1, 2 * n, "embedding", eta_s=clock.eta(int(index[-1]) + 1))
        emb = torch.nn.functional.normalize(raw, dim=1)
        sims = np.nan_to_num((emb @ emb.T).numpy(), nan=-np.inf)
        usable = np.isfinite(raw.numpy()).all(1)
        # pass 2: one backward through the head per (image, positive)
        weights = None
        for index, out in _batches(model, dataset, batch_size, dev):
            if weights is None:
                weights = np.full((n, out.feature_map.shape[1]), np.nan, dtype=np.float32)
            for b, i in enumerate(index):
                if cancel is not None:
                    cancel.raise_if_cancelled()
                same = np.flatnonzero((labels == labels[i]) & usable & (np.arange(n) != i))
                if not len(same):
                    continue
                chosen = same[np.argsort(-sims[i, same], kind="stable")[:positives]]
                head, fmap = head_function(model, out, b), out.feature_map[b : b + 1]
                total = sum(target_gradients(head, fmap, raw[j].to(dev))[target].mean(dim=(1, 2)) for j in chosen)
                weights[i] = (total / len(chosen)).float().cpu().numpy()
            done = n + int(index[-1]) + 1
            yield Progress("step", done, 2 * n, "grad weights", eta_s=clock.eta(done))
    missing = int(np.isnan(weights).any(1).sum())
    log.info("grad weights (%s target) of %d images; %d without a usable positive", target, n, missing)
    yield Progress("done", 2 * n, 2 * n, data={"result": {"weights": weights, "embeddings": emb.numpy()}})


def read_grad_weights(features_path: str | Path) -> np.ndarray | None:
    """The ``grad_weights`` (N x C) of a feature file, or ``None`` when it has none."""
    from dmlviewer.core.evaluate import read_features

    features = read_features(features_path, include_raw=False, include_groups=False)
    weights = features.extra.get(GRAD_WEIGHTS)
    return None if weights is None else np.asarray(weights, dtype=np.float32)


def add_grad_weights(features_path: str | Path, weights: np.ndarray) -> None:
    """Store ``weights`` (N x C, one row per stored image) as the extra per-row dataset
    ``grad_weights`` of a feature file: the file is rewritten with everything it held, through
    the store's atomic ``write_features``."""
    from dmlviewer.core.evaluate import read_features, write_features

    features = read_features(features_path)
    weights = np.asarray(weights, dtype=np.float32)
    if weights.ndim != 2 or len(weights) != len(features):
        raise ValueError(f"grad weights of shape {weights.shape} for {len(features)} stored images")
    write_features(features_path, {**features.arrays, GRAD_WEIGHTS: weights}, features.attrs)
