"""Cars196 (Stanford Cars) layout: ``cars_annos.mat`` beside ``car_ims/``.

The .mat file holds a struct array ``annotations`` with fields ``relative_im_path``, ``class``
(1-based index into ``class_names``), ``bbox_x1 bbox_y1 bbox_x2 bbox_y2`` and ``test`` (1 for
the official test images). The box corners are MATLAB pixel indices (1-based, inclusive); they
become ``x = x1 - 1, y = y1 - 1, w = x2 - x1 + 1, h = y2 - y1 + 1`` in our 0-based x, y, w, h.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dmlviewer.core.files import sniff

from .errors import DatasetError
from .tables import read_index_bytes
from .records import Dataset
from .splits import resolve_protocol, split_from_flags, zero_shot_split

MARKERS = ("cars_annos.mat",)
FIELDS = ("relative_im_path", "class", "bbox_x1", "bbox_y1", "bbox_x2", "bbox_y2", "test")


def _load_mat(path: Path) -> dict:
    import io

    import scipy.io

    data = read_index_bytes(path)
    try:
        return scipy.io.loadmat(io.BytesIO(data), squeeze_me=True)
    except Exception as exc:  # scipy raises ValueError, TypeError, OSError... for bad files
        reason = " ".join(str(exc).split())[:160] or type(exc).__name__
        raise DatasetError(f"{path}: not a readable MATLAB file ({reason}; it looks like {sniff(data)})",
                           path=path) from None


def read_cars196(root: Path, protocol: str = "default") -> Dataset:
    root = Path(root)
    concrete = resolve_protocol("cars196", protocol)
    path = root / "cars_annos.mat"
    mat = _load_mat(path)
    if "annotations" not in mat:
        raise DatasetError(f"{path}: no 'annotations' variable", path=path)
    ann = np.atleast_1d(mat["annotations"])
    missing = [f for f in FIELDS if ann.dtype.names is None or f not in ann.dtype.names]
    if missing:
        raise DatasetError(f"{path}: annotations lack the fields {', '.join(missing)}", path=path)

    def column(name: str, dtype) -> np.ndarray:
        try:
            return np.array(np.atleast_1d(ann[name]).tolist(), dtype=dtype).reshape(len(ann))
        except (TypeError, ValueError):
            raise DatasetError(f"{path}: field {name!r} does not hold one number per image", path=path) from None

    class_ids = column("class", np.int64)
    x1, y1, x2, y2 = (column(k, np.float32) for k in ("bbox_x1", "bbox_y1", "bbox_x2", "bbox_y2"))
    rel = [str(p).replace("\\", "/") for p in np.atleast_1d(ann["relative_im_path"]).tolist()]

    if "class_names" in mat:
        class_names = [str(n) for n in np.atleast_1d(mat["class_names"]).tolist()]
    else:
        class_names = [f"class {i}" for i in range(1, int(class_ids.max(initial=0)) + 1)]
    bad = (class_ids < 1) | (class_ids > len(class_names))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise DatasetError(
            f"{path}: annotation {i + 1} has class {class_ids[i]}, outside 1..{len(class_names)}", path=path
        )
    labels = class_ids - 1
    if concrete == "official":
        split = split_from_flags(column("test", np.int64) == 0)
    else:
        split = zero_shot_split(labels, len(class_names))
    boxes = np.stack([x1 - 1, y1 - 1, x2 - x1 + 1, y2 - y1 + 1], axis=1)
    return Dataset(
        root=root,
        format="cars196",
        paths=rel,
        labels=labels,
        class_names=class_names,
        split=split,
        boxes=boxes,
        protocol=concrete,
    )
