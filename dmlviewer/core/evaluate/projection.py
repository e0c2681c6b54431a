"""Principal components of stored embeddings without loading them: two passes over row chunks
(the mean and the D x D scatter matrix, each chunk's in float32, summed in float64), then the
projection chunk by chunk. Equal, up to the sign of each axis, to the SVD of the centred matrix (the eigenvectors
of ``X_c^T X_c`` are its right singular vectors)."""

from __future__ import annotations

from typing import Callable, Iterator

import numpy as np
import torch

Chunks = Callable[[], Iterator[tuple[int, np.ndarray]]]


def pca_axes(chunks: Chunks, components: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """``(mean, axes)``: the mean row and the ``components`` directions of largest variance
    (``components x D``, largest first) of the rows ``chunks()`` yields."""
    total, n, scatter = None, 0, None
    for _, x in chunks():
        # each chunk's products in float32 with torch's BLAS (on 2 cores 2-5x faster than
        # numpy's for X^T X; the rows are embeddings of norm about 1), summed in float64
        x = np.ascontiguousarray(x, dtype=np.float32)
        xt = torch.from_numpy(x)
        part_sum, part_scatter = x.sum(0, dtype=np.float64), (xt.T @ xt).numpy().astype(np.float64)
        total = part_sum if total is None else total + part_sum
        scatter = part_scatter if scatter is None else scatter + part_scatter
        n += len(x)
    if not n:
        raise ValueError("no rows to project")
    mean = total / n
    cov = scatter - n * np.outer(mean, mean)
    values, vectors = np.linalg.eigh(cov)
    order = np.argsort(values)[::-1][:components]
    axes = vectors[:, order].T
    # a fixed sign per axis (its largest coefficient positive), as scikit-learn's svd_flip
    signs = np.sign(axes[np.arange(len(axes)), np.abs(axes).argmax(1)])
    return mean, axes * np.where(signs == 0, 1.0, signs)[:, None]


def pca_project(chunks: Chunks, components: int = 2) -> np.ndarray:
    """N x ``components`` float32 coordinates of every row on its principal axes."""
    mean, axes = pca_axes(chunks, components)
    axes32 = axes.astype(np.float32).T
    offset = (mean @ axes.T).astype(np.float32)
    parts = [np.asarray(x, dtype=np.float32) @ axes32 - offset for _, x in chunks()]
    return np.concatenate(parts)
