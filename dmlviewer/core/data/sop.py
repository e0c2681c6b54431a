"""Stanford Online Products layout: ``Ebay_train.txt`` and ``Ebay_test.txt``, each a header
line ``image_id class_id super_class_id path`` and one image per line, paths relative to the
root. Labels are ``class_id`` (one product), renumbered 0..C-1 in sorted id order; class
names are ``<super-class folder>/<product id>``. The official split (the two files) is
already class-disjoint: 11,318 training and 11,316 test products.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .records import Dataset
from .splits import resolve_protocol, zero_shot_split
from .tables import read_index_text, read_table

MARKERS = ("Ebay_train.txt", "Ebay_test.txt")
COLUMNS = ("image_id", "class_id", "super_class_id", "path")


def _read_listing(path: Path) -> dict:
    text = read_index_text(path)
    first = text.split(None, 1)[:1]
    header = 1 if first and not first[0].isdigit() else 0
    return read_table(path, COLUMNS, ints=("image_id", "class_id"), skip_lines=header, text=text)


def read_sop(root: Path, protocol: str = "default") -> Dataset:
    root = Path(root)
    concrete = resolve_protocol("sop", protocol)
    train = _read_listing(root / "Ebay_train.txt")
    test = _read_listing(root / "Ebay_test.txt")
    paths = train["path"] + test["path"]
    class_ids = np.concatenate([train["class_id"], test["class_id"]])
    uniq, first, labels = np.unique(class_ids, return_index=True, return_inverse=True)
    class_names = [paths[i].rsplit("_", 1)[0] for i in first]
    if concrete == "official":
        split = np.empty(len(paths), dtype=object)
        split[: len(train["path"])] = "train"
        split[len(train["path"]) :] = "test"
    else:
        split = zero_shot_split(labels, len(uniq))
    return Dataset(
        root=root,
        format="sop",
        paths=paths,
        labels=labels.reshape(-1),
        class_names=class_names,
        split=split,
        boxes=None,
        protocol=concrete,
    )
