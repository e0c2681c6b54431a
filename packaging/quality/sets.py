"""Real-image datasets for the training-quality measurements, built only from images shipped
inside installed packages (nothing is downloaded).

- ``digits``: scikit-learn's bundled handwritten digits (``sklearn.datasets.load_digits``,
  8 x 8 grey levels 0-16, 1,797 images, 10 classes), upscaled to ``size`` px, written as a
  folder dataset with one sub-folder per digit. Zero-shot split of the folder format: digits
  0-4 train, 5-9 test. This is the "10-class folder dataset" on which the old defaults refused
  to train (8 classes per batch, 5 training classes).
- ``photos``: crops of scikit-learn's two bundled sample photographs (``china.jpg``,
  ``flower.jpg``, 427 x 640). Each photo is cut into a grid of cells (5 x 6; cells of almost uniform colour such as sky are left out); a
  class is one cell, its
  images are random crops around the cell's centre (scale 0.8-1.25 of the cell, shift up to
  15 % of the cell, random horizontal flip, brightness/contrast jitter, JPEG re-encoding). Class
  folders are named so that the zero-shot split (first half of the sorted names trains) takes
  half of the cells of each photo for training and the other, unseen half for testing.

``python packaging/quality/sets.py OUT`` writes ``OUT/digits`` and ``OUT/photos`` (and the
synthetic demo data, ``OUT/demo``, with :func:`dmlviewer.core.data.make_demo_data`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import cv2
import numpy as np


def make_digits(out: Path, per_class: int = 60, size: int = 48, seed: int = 0) -> Path:
    """``per_class`` images of each digit (the first ones in sklearn's order), ``size`` px RGB."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    rng = np.random.default_rng(seed)
    for label in range(10):
        folder = out / f"{label}"
        folder.mkdir(parents=True, exist_ok=True)
        rows = np.flatnonzero(digits.target == label)[:per_class]
        for i, row in enumerate(rows):
            grey = (digits.images[row] * (255.0 / 16.0)).astype(np.uint8)
            big = cv2.resize(grey, (size, size), interpolation=cv2.INTER_CUBIC)
            # a little ink colour variation so that colour statistics do not give the class away
            tint = rng.uniform(0.7, 1.0, size=3)
            rgb = (255 - big[..., None] * tint[None, None, :]).clip(0, 255).astype(np.uint8)
            cv2.imwrite(str(folder / f"{i:03d}.png"), cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
    return out


def make_photos(out: Path, grid: tuple[int, int] = (5, 6), per_class: int = 20, size: int = 64,
                seed: int = 0, min_std: float = 20.0) -> Path:
    """Classes are the cells of a ``grid`` (rows x cols) on each sample photograph; cells of
    almost uniform colour (grey-level standard deviation below ``min_std``: sky, blurred
    background) are left out, since no method can tell them apart."""
    from sklearn.datasets import load_sample_images

    photos = load_sample_images().images  # china, flower: 427 x 640 x 3 uint8 RGB
    rng = np.random.default_rng(seed)
    rows, cols = grid

    def textured(p: int, r: int, c: int) -> bool:
        grey = photos[p].mean(axis=2)
        h, w = grey.shape
        cell = grey[int(r * h / rows):int((r + 1) * h / rows), int(c * w / cols):int((c + 1) * w / cols)]
        return float(cell.std()) >= min_std

    cells = [(p, r, c) for p in range(len(photos)) for r in range(rows) for c in range(cols) if textured(p, r, c)]
    # half of each photo's cells train, the other half test: the sorted names put 'a*' first
    order = rng.permutation(len(cells))
    train = set()
    for p in range(len(photos)):
        mine = [i for i in order if cells[i][0] == p]
        train.update(mine[: len(mine) // 2])
    for i, (p, r, c) in enumerate(cells):
        image = photos[p]
        h, w = image.shape[:2]
        ch, cw = h / rows, w / cols
        cy, cx = (r + 0.5) * ch, (c + 0.5) * cw
        folder = out / f"{'a' if i in train else 'b'}_{p}_{r}{c}"
        folder.mkdir(parents=True, exist_ok=True)
        for k in range(per_class):
            scale = rng.uniform(0.8, 1.25)
            side = min(ch, cw) * scale
            y = cy + rng.uniform(-0.15, 0.15) * ch
            x = cx + rng.uniform(-0.15, 0.15) * cw
            y0, x0 = int(np.clip(y - side / 2, 0, h - side)), int(np.clip(x - side / 2, 0, w - side))
            crop = image[y0:y0 + int(side), x0:x0 + int(side)]
            crop = cv2.resize(crop, (size, size), interpolation=cv2.INTER_AREA).astype(np.float32)
            crop = crop * rng.uniform(0.8, 1.2) + rng.uniform(-20, 20)
            if rng.random() < 0.5:
                crop = crop[:, ::-1]
            bgr = cv2.cvtColor(np.clip(crop, 0, 255).astype(np.uint8), cv2.COLOR_RGB2BGR)
            cv2.imwrite(str(folder / f"{k:03d}.jpg"), bgr, [cv2.IMWRITE_JPEG_QUALITY, 90])
    return out


def make_all(out: Path) -> dict[str, Path]:
    from dmlviewer.core.data import make_demo_data

    out = Path(out)
    sets = {"demo": out / "demo", "photos": out / "photos", "digits": out / "digits"}
    if not sets["demo"].exists():
        make_demo_data(sets["demo"], classes=20, per_class=30, size=64, seed=0)
    if not sets["photos"].exists():
        make_photos(sets["photos"])
    if not sets["digits"].exists():
        make_digits(sets["digits"])
    return sets


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    args = parser.parse_args(argv)
    for name, path in make_all(Path(args.out)).items():
        print(name, path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
