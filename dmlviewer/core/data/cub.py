"""CUB-200-2011 layout: ``images.txt``, ``image_class_labels.txt``, ``classes.txt``,
``train_test_split.txt`` (1 = training image), ``bounding_boxes.txt`` (x y w h in pixels),
images under ``images/``.

``bounding_boxes.txt`` is optional (boxes are then NaN); ``train_test_split.txt`` is needed
only for the official protocol. The synthetic parts data (:mod:`.demo`) uses this layout plus
``parts/`` (see :mod:`.parts`).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from .errors import DatasetError
from .parts import find_parts
from .paths import check_listed_paths
from .records import Dataset
from .splits import resolve_protocol, split_from_flags, zero_shot_split
from .tables import align, check_unique_ids, read_table

log = logging.getLogger(__name__)

MARKERS = ("images.txt", "image_class_labels.txt")


def read_cub(root: Path, protocol: str = "default") -> Dataset:
    root = Path(root)
    concrete = resolve_protocol("cub", protocol)
    images = read_table(root / "images.txt", ("image_id", "path"), ints=("image_id",))
    ids = images["image_id"]
    check_unique_ids(ids, root / "images.txt", "image id")
    order = np.argsort(ids, kind="stable")
    ids = ids[order]
    rel = [images["path"][i] for i in order]
    check_listed_paths(rel, root / "images.txt")  # before "images/" is prefixed

    labels_file = root / "image_class_labels.txt"
    lab = read_table(labels_file, ("image_id", "class_id"), ints=("image_id", "class_id"))
    class_ids = lab["class_id"][align(lab["image_id"], ids, labels_file)]

    classes_file = root / "classes.txt"
    classes = read_table(classes_file, ("class_id", "name"), ints=("class_id",))
    check_unique_ids(classes["class_id"], classes_file, "class id")
    if not len(classes["class_id"]):
        raise DatasetError(f"{classes_file}: lists no classes", path=classes_file)
    cls_order = np.argsort(classes["class_id"], kind="stable")
    sorted_class_ids = classes["class_id"][cls_order]
    class_names = [classes["name"][i] for i in cls_order]
    labels = np.searchsorted(sorted_class_ids, class_ids)
    clipped = np.minimum(labels, len(sorted_class_ids) - 1)
    known = (labels < len(sorted_class_ids)) & (sorted_class_ids[clipped] == class_ids)
    if not known.all():
        raise DatasetError(
            f"{labels_file}: class ids {np.unique(class_ids[~known])[:5].tolist()} are not in {classes_file}",
            path=labels_file,
        )

    if concrete == "official":
        split_file = root / "train_test_split.txt"
        tt = read_table(split_file, ("image_id", "is_train"), ints=("image_id", "is_train"))
        split = split_from_flags(tt["is_train"][align(tt["image_id"], ids, split_file)] == 1)
    else:
        split = zero_shot_split(labels, len(class_names))

    boxes_file = root / "bounding_boxes.txt"
    if boxes_file.exists():
        bb = read_table(boxes_file, ("image_id", "x", "y", "w", "h"), ints=("image_id",), floats=("x", "y", "w", "h"))
        boxes = np.stack([bb[k] for k in "xywh"], axis=1)[align(bb["image_id"], ids, boxes_file)]
    else:
        log.info("%s: no bounding_boxes.txt, boxes unknown", root)
        boxes = None

    parts_root, part_names = find_parts(root)
    return Dataset(
        root=root,
        format="cub",
        paths=["images/" + p for p in rel],
        labels=labels,
        class_names=class_names,
        split=split,
        boxes=boxes,
        protocol=concrete,
        parts_root=parts_root,
        part_names=part_names,
    )
