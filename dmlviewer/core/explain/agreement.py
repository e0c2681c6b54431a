"""Agreement of two maps of the same image (issue 24: model diagnosis and the randomization
sanity check).

Each measure takes two signed maps (grid maps of two models, or of one model and a randomized
copy of it) laid over the *same* image, possibly on feature grids of different sizes, and says
how much they agree:

- :func:`spearman`: Spearman rank correlation after resizing both maps to a common grid
  (:func:`common_grid`: bilinear, cell-centre alignment as :func:`.grid.upsample`, to the larger
  size in each direction). 1: the same ranking of positions; -1: the reverse ranking; ``NaN``
  when either map is constant (a rank correlation is not defined there).
- :func:`iou`: intersection over union of the two maps' *hot regions* after resizing to the common
  grid. A map's hot region is where it reaches at least ``fraction`` of its own maximum (default
  0.5), the same normalization as the boxes of localization (:func:`.boxes.box_from_map`: a
  threshold as a fraction of each map's maximum). A map whose maximum is not positive has an
  empty hot region; both empty gives ``NaN``.
- :func:`peak_distance`: distance between the two maps' peaks (argmax, at cell centres on each
  map's own grid), in pixels of the image divided by the image diagonal: 0 for the same
  position, at most about 1 (opposite corners).

``NaN`` values are left out of means by the callers (``numpy.nanmean``) and written as JSON
``null``.
"""

from __future__ import annotations

import math

import numpy as np

from dmlviewer.core.explain.grid import upsample

#: the default hot-region threshold of :func:`iou`, as a fraction of each map's maximum
IOU_FRACTION = 0.5


def _as_map(m: np.ndarray) -> np.ndarray:
    a = np.asarray(m, dtype=np.float32)
    if a.ndim != 2 or a.size == 0:
        raise ValueError(f"expected a non-empty 2-D map, got shape {a.shape}")
    return a


def common_grid(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both maps on one grid: the larger size in each direction, bilinear (maps already of that
    size are returned as they are). Both maps must cover the same image."""
    a, b = _as_map(a), _as_map(b)
    shape = (max(a.shape[0], b.shape[0]), max(a.shape[1], b.shape[1]))
    resize = (lambda m: m if m.shape == shape else upsample(m, shape))  # noqa: E731
    return resize(a), resize(b)


def _ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..n of ``values``, ties given their mean rank (as Spearman's rho needs)."""
    from scipy.stats import rankdata

    return rankdata(values, method="average")


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman rank correlation of two maps of one image on the common grid (module docstring):
    Pearson's correlation of the positions' ranks. ``NaN`` when either map is constant."""
    a, b = common_grid(a, b)
    ra, rb = _ranks(a.ravel().astype(np.float64)), _ranks(b.ravel().astype(np.float64))
    ra -= ra.mean()
    rb -= rb.mean()
    denominator = math.sqrt(float(ra @ ra) * float(rb @ rb))
    if denominator == 0.0:
        return float("nan")
    return float(np.clip((ra @ rb) / denominator, -1.0, 1.0))


def hot_region(m: np.ndarray, fraction: float = IOU_FRACTION) -> np.ndarray:
    """Boolean mask of the positions where ``m`` is at least ``fraction`` of its maximum (empty
    when the maximum is not positive)."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be in [0, 1], got {fraction}")
    m = _as_map(m)
    peak = float(m.max())
    if not peak > 0.0:
        return np.zeros(m.shape, bool)
    return m >= fraction * peak


def iou(a: np.ndarray, b: np.ndarray, fraction: float = IOU_FRACTION) -> float:
    """IoU of the two maps' hot regions (:func:`hot_region`) on the common grid; ``NaN`` when
    both are empty."""
    a, b = common_grid(a, b)
    ha, hb = hot_region(a, fraction), hot_region(b, fraction)
    union = int(np.count_nonzero(ha | hb))
    if union == 0:
        return float("nan")
    return int(np.count_nonzero(ha & hb)) / union


def peak_position(m: np.ndarray, image_shape: tuple[int, int] = (1, 1)) -> tuple[float, float]:
    """``(x, y)`` of the centre of ``m``'s largest cell, in the coordinates of an image of
    ``image_shape`` (``H, W``; pixel edges at 0 and W): ``((j + 0.5) W / w, (i + 0.5) H / h)``."""
    m = _as_map(m)
    i, j = np.unravel_index(int(np.argmax(m)), m.shape)
    height, width = float(image_shape[0]), float(image_shape[1])
    return (j + 0.5) * width / m.shape[1], (i + 0.5) * height / m.shape[0]


def peak_distance(a: np.ndarray, b: np.ndarray, image_shape: tuple[int, int] = (1, 1)) -> float:
    """Distance between the peaks of two maps of one ``H x W`` image (each on its own grid)
    divided by the image diagonal. ``image_shape`` matters only for non-square images; the
    default treats the image as square."""
    xa, ya = peak_position(a, image_shape)
    xb, yb = peak_position(b, image_shape)
    return math.hypot(xa - xb, ya - yb) / math.hypot(float(image_shape[0]), float(image_shape[1]))


def nanmean(values) -> float:
    """The mean of the finite values (``NaN`` when there are none), without numpy's warning."""
    a = np.asarray(list(values), dtype=np.float64)
    a = a[np.isfinite(a)]
    return float(a.mean()) if len(a) else float("nan")
