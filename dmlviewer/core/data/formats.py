"""Detect a dataset folder's format and open it into one :class:`Dataset` record.

Detection looks for each format's index file, in this order: ``cub`` (``images.txt``),
``cars196`` (``cars_annos.mat``), ``sop`` (``Ebay_train.txt`` or ``Ebay_test.txt``),
``inshop`` (``list_eval_partition.txt`` at the root or in ``Eval/``), ``cvusa`` (``splits/train-19zl.csv`` or
``splits/val-19zl.csv``, :mod:`.cross_view`), then ``folder`` (a
sub-folder holding images). One marker is enough to decide, so a folder with ``images.txt``
but no ``image_class_labels.txt`` is reported as a CUB folder missing that file rather than
mistaken for another format. CUB is also recognised by its other index files
(``image_class_labels.txt``, ``train_test_split.txt``, ``bounding_boxes.txt``), so a CUB
folder that lost ``images.txt`` is reported as such and never read as a ``folder`` dataset; a
marker counts whatever it is (a marker that is a folder is reported by the reader). No image
is opened. Every listing is checked against the path policy of :mod:`.paths`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from .cars196 import read_cars196
from .cross_view import SPLIT_FILES, read_cvusa
from .cub import read_cub
from .errors import DatasetError
from .folder import looks_like_folder_dataset, read_folder
from .format_names import FORMATS
from .inshop import read_inshop
from .paths import check_listed_paths
from .records import Dataset
from .sop import read_sop

READERS: dict[str, Callable[[Path, str], Dataset]] = {
    "cub": read_cub,
    "cars196": read_cars196,
    "sop": read_sop,
    "inshop": read_inshop,
    "cvusa": read_cvusa,  # cross-view street/aerial pairs (issue 25)
    "folder": read_folder,
}
assert tuple(READERS) == FORMATS, "core.data.format_names lists every reader"
#: the file that lists each format's image paths (for messages)
INDEX_FILES = {"cub": "images.txt", "cars196": "cars_annos.mat", "sop": "Ebay_train.txt, Ebay_test.txt",
               "inshop": "list_eval_partition.txt", "cvusa": SPLIT_FILES["train"]}

_MARKERS = (
    ("cub", ("images.txt", "image_class_labels.txt", "train_test_split.txt", "bounding_boxes.txt")),
    ("cars196", ("cars_annos.mat",)),
    ("sop", ("Ebay_train.txt", "Ebay_test.txt")),
    ("inshop", ("list_eval_partition.txt", "Eval/list_eval_partition.txt")),
    ("cvusa", tuple(SPLIT_FILES.values())),
)


def _check_root(root: Path) -> None:
    if not root.exists():
        raise DatasetError(f"dataset folder not found: {root}", path=root)
    if not root.is_dir():
        raise DatasetError(f"not a folder: {root}", path=root)


def detect_format(root: str | Path) -> str:
    """One of ``cub cars196 sop inshop cvusa folder``; :class:`DatasetError` when none fits."""
    root = Path(root)
    _check_root(root)
    for name, markers in _MARKERS:
        if any(os.path.lexists(root / m) for m in markers):
            return name
    if looks_like_folder_dataset(root):
        return "folder"
    looked_for = ", ".join(m for _, markers in _MARKERS for m in markers)
    raise DatasetError(
        f"{root}: cannot tell the dataset format (none of {looked_for}, and no class sub-folders "
        "with images); pass the format explicitly",
        path=root,
    )


def open_dataset(root: str | Path, format: str | None = None, protocol: str = "default") -> Dataset:
    """Read the listing of the dataset at ``root`` (format detected unless given).

    ``protocol``: ``"default"``, ``"zero-shot"`` or ``"official"`` (see :mod:`.splits`).
    Raises :class:`DatasetError` naming the missing or malformed file (and line).
    """
    root = Path(root)
    _check_root(root)
    if format is None:
        format = detect_format(root)
    if format not in READERS:
        raise DatasetError(f"unknown dataset format {format!r}; choose one of {', '.join(FORMATS)}")
    dataset = READERS[format](root, protocol)
    check_listed_paths(dataset.paths, root / INDEX_FILES[format] if format in INDEX_FILES else root)
    return dataset
