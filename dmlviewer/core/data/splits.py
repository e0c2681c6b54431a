"""Split protocols: which images are for training and which for testing.

``"zero-shot"``: the classes sorted by their id (index files) or name (folders) are cut in
half; the first half trains, the rest tests, so no test class is seen in training (the usual
deep metric learning protocol, seed 001 Sec. 4.1: CUB 100/100 classes, Cars196 98/98, SOP
11,318/11,316). With an odd number of classes the training half gets the extra class.
``"official"``: the split that ships with the dataset (CUB ``train_test_split.txt``, the
Cars196 ``test`` flag, SOP ``Ebay_train``/``Ebay_test``, In-Shop ``list_eval_partition``).
``"default"``: zero-shot for cub, cars196 and folder; official for sop and inshop (their
official splits are already class-disjoint).
"""

from __future__ import annotations

import numpy as np

from .errors import DatasetError

PROTOCOLS = ("default", "zero-shot", "official")
_DEFAULT = {"cub": "zero-shot", "cars196": "zero-shot", "folder": "zero-shot", "sop": "official", "inshop": "official"}


def resolve_protocol(format: str, protocol: str) -> str:
    """The concrete protocol (``"zero-shot"`` or ``"official"``) that ``protocol`` means for ``format``."""
    if protocol not in PROTOCOLS:
        raise DatasetError(f"unknown split protocol {protocol!r}; choose one of {', '.join(PROTOCOLS)}")
    return _DEFAULT[format] if protocol == "default" else protocol


def zero_shot_split(labels: np.ndarray, num_classes: int) -> np.ndarray:
    """``"train"`` for labels in the first half of ``range(num_classes)``, else ``"test"``.

    ``labels`` must index classes in sorted order (every reader assigns them so).
    """
    n_train = (num_classes + 1) // 2
    return np.where(np.asarray(labels) < n_train, "train", "test").astype(object)


def split_from_flags(is_train: np.ndarray) -> np.ndarray:
    return np.where(np.asarray(is_train, dtype=bool), "train", "test").astype(object)
