"""The one record type every dataset format is read into."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


@dataclass
class Dataset:
    """A listing of images with labels, split and optional boxes; no image is opened.

    ``paths`` are relative to ``root`` (POSIX separators). ``labels`` are int64 class indices
    into ``class_names``. ``split`` holds ``"train"`` or ``"test"`` per image under the
    protocol the dataset was opened with. ``boxes`` is N x 4 float32 (x, y, w, h in pixels of
    the original image), NaN where unknown. ``parts_root`` is set when per-image part masks
    exist (the synthetic parts data). ``roles`` is set only where the test images are divided
    into queries and a gallery (In-Shop's official protocol): per image ``"train"``,
    ``"query"`` or ``"gallery"``; ``None`` means every test image is a query and in the gallery.
    ``branches`` is set only for cross-view data (CVUSA): per image the branch of a two-branch
    model that embeds it, ``"query"`` (street panoramas) or ``"reference"`` (aerial images);
    ``None`` means one branch embeds every image. It is the one place that says so: feature
    extraction and cross-view retrieval read it (:meth:`image_branch`).
    """

    root: Path
    format: str
    paths: list[str]
    labels: np.ndarray
    class_names: list[str]
    split: np.ndarray
    boxes: np.ndarray
    protocol: str = "default"
    parts_root: Path | None = None
    part_names: list[str] = field(default_factory=list)
    roles: np.ndarray | None = None
    branches: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        self.labels = np.asarray(self.labels, dtype=np.int64)
        self.split = np.asarray(self.split, dtype=object)
        n = len(self.paths)
        if self.boxes is None or len(self.boxes) == 0 and n:
            self.boxes = np.full((n, 4), np.nan, dtype=np.float32)
        self.boxes = np.asarray(self.boxes, dtype=np.float32)
        if self.roles is not None:
            self.roles = np.asarray(self.roles, dtype=object)
        if self.branches is not None:
            self.branches = np.asarray(self.branches, dtype=object)
            bad = set(self.branches.tolist()) - {"query", "reference"}
            if bad:
                raise ValueError(f"image branches must be 'query' or 'reference', got {sorted(map(str, bad))[:3]}")
        if not (len(self.labels) == len(self.split) == len(self.boxes) == n) or (
            self.roles is not None and len(self.roles) != n
        ) or (self.branches is not None and len(self.branches) != n):
            raise ValueError(
                f"inconsistent dataset listing: {n} paths, {len(self.labels)} labels, "
                f"{len(self.split)} split entries, {len(self.boxes)} boxes"
                + ("" if self.roles is None else f", {len(self.roles)} roles")
                + ("" if self.branches is None else f", {len(self.branches)} branches")
            )

    def __len__(self) -> int:
        return len(self.paths)

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    def abspath(self, index: int) -> Path:
        return self.root / self.paths[index]

    def indices(self, split: str | None = None) -> np.ndarray:
        """Indices of the images in ``split`` (``None`` or ``"all"``: every image)."""
        if split in (None, "all"):
            return np.arange(len(self), dtype=np.int64)
        return np.flatnonzero(self.split == split)

    def subset(self, indices: np.ndarray | list[int]) -> "Dataset":
        """A dataset holding only ``indices`` (labels and class names kept as they are)."""
        idx = np.asarray(indices, dtype=np.int64)
        return Dataset(
            root=self.root,
            format=self.format,
            paths=[self.paths[i] for i in idx],
            labels=self.labels[idx],
            class_names=self.class_names,
            split=self.split[idx],
            boxes=self.boxes[idx],
            protocol=self.protocol,
            parts_root=self.parts_root,
            part_names=list(self.part_names),
            roles=None if self.roles is None else self.roles[idx],
            branches=None if self.branches is None else self.branches[idx],
        )

    def image_branch(self, index: int) -> str | None:
        """The branch of a two-branch model that embeds image ``index`` (``None``: the dataset
        does not divide its images between branches)."""
        return None if self.branches is None else str(self.branches[int(index)])

    def select_split(self, split: str | None) -> "Dataset":
        return self if split in (None, "all") else self.subset(self.indices(split))
