"""In-Shop Clothes Retrieval (DeepFashion) layout: ``list_eval_partition.txt`` (at the root or
in ``Eval/``): a count line, a header ``image_name item_id evaluation_status``, then one image
per line with status ``train``, ``query`` or ``gallery``; image paths relative to the root
(``img/...``). Optional ``list_bbox_inshop.txt`` (root or ``Anno/``): count line, header
``image_name clothes_type pose_type x_1 y_1 x_2 y_2``, boxes as corner pixels.

Labels are item ids (one garment) in sorted order. Under the official protocol the query and
gallery images form the ``"test"`` split and ``Dataset.roles`` keeps which is which
(``"train"``/``"query"``/``"gallery"``), so retrieval can rank queries against the gallery
only, as the benchmark prescribes; under zero-shot ``roles`` is ``None``.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from .errors import DatasetError
from .records import Dataset
from .splits import resolve_protocol, zero_shot_split
from .tables import line_of_row, read_index_text, read_table

log = logging.getLogger(__name__)

MARKERS = ("list_eval_partition.txt", "Eval/list_eval_partition.txt")
STATUSES = ("train", "query", "gallery")


def _locate(root: Path, name: str, subfolder: str) -> Path:
    for candidate in (root / name, root / subfolder / name):
        if candidate.exists():
            return candidate
    return root / name


def _header_lines(text: str, path: Path, first_column: str) -> int:
    """DeepFashion lists start with a count line and a header; tolerate either missing."""
    lines = text.split("\n", 2)
    skip = 0
    if lines and lines[0].strip().isdigit():
        skip = 1
    if len(lines) > skip and lines[skip].split(None, 1)[:1] == [first_column]:
        skip += 1
    return skip


def read_inshop(root: Path, protocol: str = "default") -> Dataset:
    root = Path(root)
    concrete = resolve_protocol("inshop", protocol)
    path = _locate(root, "list_eval_partition.txt", "Eval")
    text = read_index_text(path)
    skip = _header_lines(text, path, "image_name")
    table = read_table(path, ("image_name", "item_id", "evaluation_status"), skip_lines=skip, text=text)
    paths = [p.replace("\\", "/") for p in table["image_name"]]
    status = np.array(table["evaluation_status"], dtype=object)
    bad = ~np.isin(status, STATUSES)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        line = line_of_row(text, row, skip)
        raise DatasetError(
            f"{path}, line {line}: evaluation_status {status[row]!r} is not one of {', '.join(STATUSES)}",
            path=path,
            line=line,
        )
    class_names, labels = np.unique(np.array(table["item_id"]), return_inverse=True)
    if concrete == "official":
        split = np.where(status == "train", "train", "test").astype(object)
        roles = status
    else:
        split = zero_shot_split(labels, len(class_names))
        roles = None
    return Dataset(
        root=root,
        format="inshop",
        paths=paths,
        labels=labels.reshape(-1),
        class_names=class_names.tolist(),
        split=split,
        boxes=_read_boxes(root, paths),
        protocol=concrete,
        roles=roles,
    )


def _read_boxes(root: Path, paths: list[str]) -> np.ndarray | None:
    path = _locate(root, "list_bbox_inshop.txt", "Anno")
    if not path.exists():
        log.info("%s: no list_bbox_inshop.txt, boxes unknown", root)
        return None
    text = read_index_text(path)
    columns = ("image_name", "clothes_type", "pose_type", "x_1", "y_1", "x_2", "y_2")
    table = read_table(
        path, columns, ints=("clothes_type", "pose_type"), floats=columns[3:],
        skip_lines=_header_lines(text, path, "image_name"), text=text,
    )
    names = np.array([p.replace("\\", "/") for p in table["image_name"]])
    if not len(names):
        return None
    order = np.argsort(names, kind="stable")
    wanted = np.array(paths)
    pos = np.minimum(np.searchsorted(names[order], wanted), len(names) - 1)
    found = names[order][pos] == wanted
    x1, y1, x2, y2 = (table[k][order][pos] for k in columns[3:])
    boxes = np.stack([x1, y1, x2 - x1, y2 - y1], axis=1)
    boxes[~found] = np.nan
    if not found.all():
        log.warning("%s: no box for %d of %d images", path, int((~found).sum()), len(found))
    return boxes
