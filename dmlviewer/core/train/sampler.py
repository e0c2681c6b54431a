"""Deterministic, resumable m-per-class batches, split across distributed ranks.

The batches of an epoch are drawn by pytorch-metric-learning's ``MPerClassSampler`` (C classes
x M images per batch) from a random generator seeded by ``(seed, epoch)`` alone, so the list of
batches of any epoch can be rebuilt exactly after a restart: the sampler's whole state is the
epoch and the number of batches already consumed. Under ``torch.distributed`` every rank builds
the same list and takes every ``world_size``-th batch (like ``DistributedSampler``), so the
ranks see disjoint batches of the same size.

Classes with fewer than two images cannot form a positive pair: they are left out of sampling
(``thin_classes`` lists them so the caller can warn with their names).
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import numpy as np


@contextlib.contextmanager
def _pml_random(seed: int):
    """Run pytorch-metric-learning's sampling with its own seeded generator (it draws from the
    module-level ``c_f.NUMPY_RANDOM``), leaving numpy's global generator untouched."""
    from pytorch_metric_learning.utils import common_functions as c_f

    saved = c_f.NUMPY_RANDOM
    c_f.NUMPY_RANDOM = np.random.RandomState(seed)
    try:
        yield
    finally:
        c_f.NUMPY_RANDOM = saved


def thin_classes(labels: np.ndarray, minimum: int = 2) -> list[int]:
    """Labels with fewer than ``minimum`` images."""
    values, counts = np.unique(labels, return_counts=True)
    return [int(v) for v in values[counts < minimum]]


class MPerClassBatches:
    """Batches of ``classes_per_batch`` x ``images_per_class`` dataset positions per step.

    ``labels`` are the labels of the positions 0..N-1 that a loader will index. One epoch has
    ``len(self)`` batches per rank: ``batches_per_epoch`` when given, otherwise about one pass
    over the usable images."""

    def __init__(self, labels: np.ndarray, classes_per_batch: int, images_per_class: int,
                 seed: int = 0, rank: int = 0, world_size: int = 1,
                 batches_per_epoch: int | None = None) -> None:
        labels = np.asarray(labels, dtype=np.int64)
        thin = set(thin_classes(labels))
        self.positions = np.flatnonzero(~np.isin(labels, list(thin))) if thin else np.arange(len(labels))
        self.labels = labels[self.positions]
        self.num_classes = len(np.unique(self.labels))
        if classes_per_batch > self.num_classes:
            raise ValueError(
                f"{classes_per_batch} classes per batch but only {self.num_classes} classes "
                "with at least two images"
            )
        self.classes_per_batch, self.images_per_class = classes_per_batch, images_per_class
        self.batch_size = classes_per_batch * images_per_class
        self.seed, self.rank, self.world_size = seed, rank, world_size
        total = max(1, len(self.positions) // self.batch_size)
        self.batches_per_rank = batches_per_epoch or max(1, total // world_size)
        self.epoch = 0
        self.start = 0  # batches of this epoch already consumed (on this rank)

    def __len__(self) -> int:
        return self.batches_per_rank

    def epoch_batches(self, epoch: int) -> list[np.ndarray]:
        """All batches of ``epoch`` for this rank, rebuilt from ``(seed, epoch)``."""
        from pytorch_metric_learning.samplers import MPerClassSampler

        total = self.batches_per_rank * self.world_size
        with _pml_random(self.seed * 1_000_003 + epoch):
            sampler = MPerClassSampler(
                self.labels, self.images_per_class, batch_size=self.batch_size,
                length_before_new_iter=total * self.batch_size,
            )
            order = np.fromiter(iter(sampler), dtype=np.int64)
        batches = self.positions[order].reshape(total, self.batch_size)
        return list(batches[self.rank::self.world_size])

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        self.epoch, self.start = epoch, start

    def __iter__(self) -> Iterator[list[int]]:
        for batch in self.epoch_batches(self.epoch)[self.start:]:
            yield batch.tolist()

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "start": self.start, "seed": self.seed}

    def load_state_dict(self, state: dict) -> None:
        self.seed = int(state["seed"])
        self.set_epoch(int(state["epoch"]), int(state["start"]))
