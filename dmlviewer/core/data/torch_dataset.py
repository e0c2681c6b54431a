"""A :class:`Dataset` listing as a ``torch.utils.data.Dataset`` of ``(tensor, label, index)``.

A bad image (missing, truncated, not an image) is reported, never silently dropped: with
``skip_bad`` it is logged with its path and reason, recorded in ``.problems`` and the next good
image in listing order is returned in its place (with that image's own label and index, so
label and pixels always agree); without ``skip_bad`` the :class:`ImageError` propagates. With
DataLoader worker processes each worker keeps its own ``.problems``; the log lines are the
record that reaches the main process, and :func:`~.images.check_images` beforehand gives the
full list. An error raised in a worker reaches the main process wrapped in a ``RuntimeError``
("Caught ImageError in DataLoader worker process 0" and the worker's traceback);
:func:`worker_errors` turns it back into the original error and message, so the user gets the
same one line with or without workers.
"""

from __future__ import annotations

import contextlib
import logging
import re
from typing import Iterator

import numpy as np
import torch
from torch.utils.data import Dataset as TorchDataset

from .errors import DatasetError, ImageError, ImageProblem
from .images import load_dataset_image, report_skipped
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

    def _item(self, i: int) -> torch.Tensor:
        """What image ``i`` is handed over as; :class:`ImageError` for a bad image."""
        return self._tensor(load_dataset_image(self.dataset, i))

    def _report(self, index: int, exc: ImageError) -> None:
        if index not in self._bad:
            self._bad.add(index)
            self.problems.append(ImageProblem(exc.path, exc.reason, index))
            report_skipped(self.problems[-1])

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int, int]:
        n = len(self.dataset)
        for step in range(n):
            i = (int(index) + step) % n
            if i in self._bad:
                continue
            try:
                item = self._item(i)
            except ImageError as exc:
                if not self.skip_bad:
                    raise
                self._report(i, exc)
                continue
            return item, int(self.dataset.labels[i]), i
        raise ImageError(self.dataset.root, f"none of the {n} listed images can be read")


def start_workers(loader: torch.utils.data.DataLoader) -> Iterator:
    """``iter(loader)``, its worker processes forked while this process's OpenCV is set to one
    thread, so that each worker's resizing runs on its own core instead of starting a pool as
    large as the machine (eight workers on 16 cores would run 128 OpenCV threads). The workers
    cannot set it themselves: ``cv2.setNumThreads`` in a child forked while the parent's pool
    exists hangs (``tests/core/evaluate/test_eval_extract.py``). This process's own setting is
    restored as soon as the workers have started."""
    if not loader.num_workers:
        return iter(loader)
    import cv2

    threads = cv2.getNumThreads()
    cv2.setNumThreads(1)
    try:
        return iter(loader)
    finally:
        cv2.setNumThreads(threads)


#: errors of a DataLoader worker that are re-raised as themselves (bad input, system errors)
_UNWRAPPED = {"ImageError": lambda m: ImageError("", m), "DatasetError": DatasetError, "MemoryError": MemoryError,
              "FileNotFoundError": FileNotFoundError, "PermissionError": PermissionError, "OSError": OSError}


@contextlib.contextmanager
def worker_errors() -> Iterator[None]:
    """Around iterating a DataLoader: re-raise a worker's :class:`ImageError`, ``DatasetError``,
    ``MemoryError`` or ``OSError`` as that error with its own message (torch wraps them in a
    ``RuntimeError`` holding the worker's traceback as text)."""
    try:
        yield
    except RuntimeError as exc:
        text = str(exc)
        found = re.match(r"Caught (\w+) in DataLoader worker process \d+", text)
        if not found or found.group(1) not in _UNWRAPPED:
            raise
        name = found.group(1)
        lines = [line for line in text.splitlines() if line.strip()]
        last = lines[-1] if lines else name
        prefix, _, message = last.partition(": ")
        message = message if prefix.split(".")[-1] == name and message else last
        raise _UNWRAPPED[name](message) from None
