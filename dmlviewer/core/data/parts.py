"""Per-image part masks next to a CUB-layout dataset (written by :mod:`.demo`).

Layout, relative to the dataset root::

    parts/parts.txt                             "<part id> <part name>" per line (CUB style)
    parts/masks/<image path>/<part name>.png    one 8-bit mask per image and part

where ``<image path>`` is the image's path relative to ``images/`` without its extension,
e.g. ``parts/masks/001.h-circle_b-red_t-solid/h-circle_b-red_t-solid_0001/head.png``.
Mask pixels are 255 on the part and 0 elsewhere, same size as the image. The parts of one
image are disjoint: each pixel belongs to the part drawn on top there.

The real CUB-200-2011 also ships ``parts/parts.txt`` (keypoint names, no masks), so masks
count as present only where ``parts/masks/`` exists.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import cv2
import numpy as np

from .errors import DatasetError, ImageError
from .images import check_inside, read_image_bytes
from .records import Dataset
from .tables import read_table

PARTS_DIR = "parts"
PART_LIST = "parts.txt"
MASKS_DIR = "masks"


def find_parts(root: Path) -> tuple[Path | None, list[str]]:
    """``(parts_root, part_names)`` when ``root`` has part masks, else ``(None, [])``."""
    parts_root = Path(root) / PARTS_DIR
    if not (parts_root / MASKS_DIR).is_dir():
        return None, []
    table = read_table(parts_root / PART_LIST, ("part_id", "name"), ints=("part_id",))
    order = np.argsort(table["part_id"], kind="stable")
    names = [table["name"][i] for i in order]
    bad = [n for n in names if "/" in n or "\\" in n or n in (".", "..") or "\x00" in n]
    if bad:
        raise DatasetError(f"{parts_root / PART_LIST}: part names may not hold path separators: {bad[:3]}",
                           path=parts_root / PART_LIST)
    return parts_root, names


def mask_dir(parts_root: Path, image_path: str) -> Path:
    """Folder holding the masks of the image at ``image_path`` (relative to the dataset root)."""
    rel = PurePosixPath(image_path)
    if rel.parts and rel.parts[0] == "images":
        rel = rel.relative_to("images")
    return Path(parts_root) / MASKS_DIR / rel.with_suffix("")


def load_part_masks(dataset: Dataset, index: int) -> dict[str, np.ndarray]:
    """Boolean H x W mask per part name for image ``index`` of ``dataset``.

    Raises :class:`DatasetError` when the dataset has no part masks and :class:`ImageError`
    when one mask file is missing or unreadable.
    """
    if dataset.parts_root is None:
        raise DatasetError(f"{dataset.root}: the dataset has no part masks (no {PARTS_DIR}/{MASKS_DIR}/)")
    folder = mask_dir(dataset.parts_root, dataset.paths[index])
    masks = {}
    for name in dataset.part_names:
        path = folder / f"{name}.png"
        check_inside(dataset.root, path)
        try:
            data = np.frombuffer(read_image_bytes(path), dtype=np.uint8)
        except ImageError as exc:
            raise ImageError(path, "missing part mask" if exc.reason == "file not found" else exc.reason) from None
        mask = cv2.imdecode(data, cv2.IMREAD_GRAYSCALE) if data.size else None
        if mask is None:
            raise ImageError(path, "part mask is not a readable PNG")
        masks[name] = mask > 127
    return masks
