"""A :class:`Dataset` listing as a ``torch.utils.data.Dataset`` of ``(tensor, label, index)``.

A bad image (missing, truncated, not an image) is reported, never silently dropped: with
``skip_bad`` it is logged with its path and reason, recorded in ``.problems`` and the next good
image in listing order is returned in its place (with that image's own label and index, so
label and pixels always agree); without ``skip_bad`` the :class:`ImageError` propagates. With
DataLoader worker processes each worker keeps its own ``.problems``; the log lines are the
record that reaches the main process, and :func:`~.images.check_images` beforehand gives the
full list.
"""

from __future__ import annotations

import logging

import numpy as np
import torch
from torch.utils.data import Dataset as TorchDataset

from .errors import ImageError, ImageProblem
from .images import load_image
from .records import Dataset
from .transforms import Preprocess, train_transform

log = logging.getLogger(__name__)


class ImageFolderDataset(TorchDataset):
    """Images of ``dataset`` as normalized tensors. ``preprocess`` is the model's
    :class:`~.transforms.Preprocess` (or an int: that size with ImageNet statistics); ``train``
    selects the augmentation of :func:`~.transforms.train_transform` at that size and
    normalization, otherwise the plain ``preprocess``."""

    def __init__(self, dataset: Dataset, preprocess: Preprocess | int, train: bool = False,
                 skip_bad: bool = True) -> None:
        self.dataset = dataset
        self.preprocess = preprocess if isinstance(preprocess, Preprocess) else Preprocess(int(preprocess))
        self.size = self.preprocess.size
        self.train = train
        self.skip_bad = skip_bad
        self.problems: list[ImageProblem] = []
        self._bad: set[int] = set()
        p = self.preprocess
        self._transform = train_transform(p.size, p.mean, p.std) if train else p

    def __len__(self) -> int:
        return len(self.dataset)

    def _tensor(self, image: np.ndarray) -> torch.Tensor:
        return self._transform(image)

    def _report(self, index: int, exc: ImageError) -> None:
        if index not in self._bad:
            self._bad.add(index)
            self.problems.append(ImageProblem(exc.path, exc.reason, index))
            log.warning("skipping bad image %s (index %d): %s", exc.path, index, exc.reason)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int, int]:
        n = len(self.dataset)
        for step in range(n):
            i = (int(index) + step) % n
            if i in self._bad:
                continue
            try:
                image = load_image(self.dataset.abspath(i))
            except ImageError as exc:
                if not self.skip_bad:
                    raise
                self._report(i, exc)
                continue
            return self._tensor(image), int(self.dataset.labels[i]), i
        raise ImageError(self.dataset.root, f"none of the {n} listed images can be read")
