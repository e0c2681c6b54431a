"""``bench index``: time to read a Stanford-Online-Products-sized listing (120,053 images).

Writes ``Ebay_train.txt`` / ``Ebay_test.txt`` with the real dataset's counts (59,551 training
images of 11,318 products, 60,502 test images of 11,316 products) into a temporary folder (the
image files need not exist: indexing opens none) and times :func:`open_dataset` on it, best of
a few runs. The target is one second; ``ratio`` is seconds / target (below 1 meets it).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from dmlviewer.bench.machine import describe
from dmlviewer.core.data import open_dataset

TARGET_S = 1.0
SUPER_CLASSES = ("bicycle", "cabinet", "chair", "coffee_maker", "fan", "kettle",
                 "lamp", "mug", "sofa", "stapler", "table", "toaster")
SPLITS = (("Ebay_train.txt", 59_551, 11_318), ("Ebay_test.txt", 60_502, 11_316))


def write_sop_listing(root: Path, seed: int = 0, images: int | None = None) -> int:
    """Write an SOP-style listing into ``root``; returns the number of images listed. With
    ``images``, the same layout scaled to that many images (classes scaled alike: about 5.3
    images per product, as in SOP)."""
    rng = np.random.default_rng(seed)
    total = sum(n for _, n, _ in SPLITS)
    splits = SPLITS if images is None else tuple(
        (name, round(n * images / total), max(1, round(c * images / total))) for name, n, c in SPLITS)
    image_id, class_id = 1, 1
    for name, count, classes in splits:
        counts = np.full(classes, count // classes)
        counts[rng.choice(classes, count - counts.sum(), replace=False)] += 1
        lines = ["image_id class_id super_class_id path"]
        for n in counts:
            sc = int(rng.integers(len(SUPER_CLASSES)))
            product = int(rng.integers(10**11, 10**12))
            for k in range(n):
                lines.append(f"{image_id} {class_id} {sc + 1} {SUPER_CLASSES[sc]}_final/{product}_{k}.JPG")
                image_id += 1
            class_id += 1
        (root / name).write_text("\n".join(lines) + "\n")
    return image_id - 1


def run(args: argparse.Namespace | None = None) -> dict:
    repeats = 2 if getattr(args, "quick", False) else 5
    with tempfile.TemporaryDirectory(prefix="dmlviewer-bench-index-") as tmp:
        root = Path(tmp)
        n = write_sop_listing(root)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            dataset = open_dataset(root)
            times.append(time.perf_counter() - start)
        if len(dataset) != n or dataset.format != "sop":
            raise RuntimeError(f"index benchmark read {len(dataset)} {dataset.format} images, expected {n} sop")
    best = min(times)
    return {
        "benchmark": "index",
        "images": n,
        "seconds": best,
        "median_seconds": float(np.median(times)),
        "target_s": TARGET_S,
        "ratio": best / TARGET_S,
        "machine": describe(),
    }
