"""Plain folder layout: one sub-folder per class, image files found by extension anywhere
below it. Classes are the sub-folder names in sorted order; hidden files and folders (names
starting with a dot) are ignored; sub-folders without images are skipped with a warning.
There is no official split and no boxes.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np

from .errors import DatasetError
from .records import Dataset
from .splits import resolve_protocol, zero_shot_split

log = logging.getLogger(__name__)

IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff"})


def _is_image_name(name: str) -> bool:
    return not name.startswith(".") and os.path.splitext(name)[1].lower() in IMAGE_EXTENSIONS


def _class_dirs(root: Path) -> list[str]:
    try:
        entries = list(os.scandir(root))
    except OSError as exc:
        raise DatasetError(f"cannot list dataset folder {root}: {exc.strerror or exc}", path=root) from None
    return sorted(e.name for e in entries if e.is_dir() and not e.name.startswith("."))


def _images_below(folder: str) -> list[str]:
    """Image paths below ``folder``, relative to it, POSIX separators, sorted by that path."""
    found = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        rel = os.path.relpath(dirpath, folder)
        prefix = "" if rel == "." else rel.replace(os.sep, "/") + "/"
        found.extend(prefix + f for f in filenames if _is_image_name(f))
    return sorted(found)


def looks_like_folder_dataset(root: Path) -> bool:
    """True when some class sub-folder of ``root`` holds an image (stops at the first one)."""
    for name in _class_dirs(root):
        for _, dirnames, filenames in os.walk(os.path.join(root, name)):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            if any(_is_image_name(f) for f in filenames):
                return True
    return False


def read_folder(root: Path, protocol: str = "default") -> Dataset:
    root = Path(root)
    concrete = resolve_protocol("folder", protocol)
    if concrete == "official":
        raise DatasetError(f"{root}: a folder dataset has no official split; use protocol 'zero-shot'", path=root)
    class_names: list[str] = []
    paths: list[str] = []
    counts: list[int] = []
    for name in _class_dirs(root):
        images = _images_below(os.path.join(root, name))
        if not images:
            log.warning("%s: class folder %r holds no images, skipped", root, name)
            continue
        class_names.append(name)
        paths.extend(f"{name}/{p}" for p in images)
        counts.append(len(images))
    if not class_names:
        extensions = ", ".join(sorted(IMAGE_EXTENSIONS))
        raise DatasetError(f"{root}: no class sub-folders with images ({extensions})", path=root)
    labels = np.repeat(np.arange(len(class_names), dtype=np.int64), counts)
    return Dataset(
        root=root,
        format="folder",
        paths=paths,
        labels=labels,
        class_names=class_names,
        split=zero_shot_split(labels, len(class_names)),
        boxes=None,
        protocol=concrete,
    )
