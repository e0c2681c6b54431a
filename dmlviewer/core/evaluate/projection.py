"""Principal components of stored embeddings without loading them: two passes over row chunks
(the mean and the D x D scatter matrix, each chunk's in float32, summed in float64), then the
projection chunk by chunk. Equal, up to the sign of each axis (fixed here: each axis's largest
coefficient is positive), to the SVD of the centred matrix (the eigenvectors of ``X_c^T X_c``
are its right singular vectors)."""

from __future__ import annotations

from typing import Callable, Iterator

import numpy as np
import torch

Chunks = Callable[[], Iterator[tuple[int, np.ndarray]]]


class Scatter:
    """Running mean and scatter matrix of rows added chunk by chunk (float64 sums)."""

    def __init__(self) -> None:
        self.n = 0
        self.total: np.ndarray | None = None
        self.scatter: np.ndarray | None = None

    def add(self, x: np.ndarray) -> None:
        # each chunk's products in float32 with torch's BLAS (on 2 cores 2-5x faster than
        # numpy's for X^T X; the rows are embeddings of norm about 1), summed in float64
        x = np.ascontiguousarray(x, dtype=np.float32)
        xt = torch.from_numpy(x)
        part_sum, part_scatter = x.sum(0, dtype=np.float64), (xt.T @ xt).numpy().astype(np.float64)
        self.total = part_sum if self.total is None else self.total + part_sum
        self.scatter = part_scatter if self.scatter is None else self.scatter + part_scatter
        self.n += len(x)

    def axes(self, components: int = 2) -> tuple[np.ndarray, np.ndarray]:
        """``(mean, axes)``: the mean row and the ``components`` directions of largest
        variance (``components x D``, largest first, each with its largest coefficient
        positive, as scikit-learn's svd_flip)."""
        if not self.n:
            raise ValueError("no rows to project")
        mean = self.total / self.n
        values, vectors = np.linalg.eigh(self.scatter - self.n * np.outer(mean, mean))
        axes = vectors[:, np.argsort(values)[::-1][:components]].T
        signs = np.sign(axes[np.arange(len(axes)), np.abs(axes).argmax(1)])
        return mean, axes * np.where(signs == 0, 1.0, signs)[:, None]

    @staticmethod
    def project(x: np.ndarray, mean: np.ndarray, axes: np.ndarray) -> np.ndarray:
        """Coordinates of rows ``x`` on ``axes`` (float32)."""
        return np.asarray(x, dtype=np.float32) @ axes.astype(np.float32).T - (mean @ axes.T).astype(np.float32)


def pca_project(chunks: Chunks, components: int = 2) -> np.ndarray:
    """N x ``components`` float32 coordinates of every row that ``chunks()`` yields on its
    principal axes (two passes)."""
    scatter = Scatter()
    for _, x in chunks():
        scatter.add(x)
    mean, axes = scatter.axes(components)
    return np.concatenate([Scatter.project(x, mean, axes) for _, x in chunks()])
