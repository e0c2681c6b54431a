"""Loader worker processes started by ``torch_dataset.start_workers``: each worker's OpenCV runs
on one thread (the workers are the parallelism), the parent's own setting is kept, and a parent
whose OpenCV pool already ran does not hang its forked workers."""

from __future__ import annotations

import cv2
import numpy as np
import torch

from dmlviewer.core.data.torch_dataset import start_workers


class _OpenCVThreads(torch.utils.data.Dataset):
    """Each item: the OpenCV thread count seen where it is made, after a resize there."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> int:
        cv2.resize(np.zeros((400, 400, 3), np.uint8), (200, 200))
        return cv2.getNumThreads()


def test_workers_run_opencv_on_one_thread_and_the_parent_keeps_its_setting():
    before = cv2.getNumThreads()
    cv2.setNumThreads(2)
    try:
        cv2.resize(np.zeros((2000, 2000, 3), np.uint8), (1000, 1000))  # the parent's pool exists
        loader = torch.utils.data.DataLoader(_OpenCVThreads(), batch_size=1, num_workers=2)
        seen = [int(b) for b in start_workers(loader)]
        assert seen == [1, 1, 1, 1]
        assert cv2.getNumThreads() == 2
        in_process = torch.utils.data.DataLoader(_OpenCVThreads(), batch_size=1, num_workers=0)
        assert [int(b) for b in start_workers(in_process)] == [2, 2, 2, 2]  # no workers: untouched
    finally:
        cv2.setNumThreads(before)
