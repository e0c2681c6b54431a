"""A pair's explanation measured for the report's figures: cell centres, the share of the
point-to-point similarity between two objects' boxes, and the query's strongest points.

The report draws its pairs as scenes (:mod:`dmlviewer.core.report.gallery`, drawn by
:mod:`dmlviewer.core.scene.draw`); these are the numbers it reads from a
:class:`~dmlviewer.core.explain.pair.PairExplanation` for them (seed 000 Sec. 3, Eq. 3).
"""

from __future__ import annotations

import numpy as np

from dmlviewer.core.explain.grid import grid_to_pixel


def cell_centres(grid: tuple[int, int], shape: tuple[int, int]) -> np.ndarray:
    """``(x, y)`` pixel centres of every cell of ``grid`` over an image of ``shape`` (row-major)."""
    (gh, gw), (h, w) = grid, shape
    ys = np.array([grid_to_pixel(i, h, gh) for i in range(gh)])
    xs = np.array([grid_to_pixel(j, w, gw) for j in range(gw)])
    return np.stack(np.meshgrid(xs, ys), axis=-1).reshape(-1, 2)


def _inside(centres: np.ndarray, box) -> np.ndarray:
    x, y, w, h = (float(v) for v in box)
    return (centres[:, 0] >= x) & (centres[:, 0] < x + w) & (centres[:, 1] >= y) & (centres[:, 1] < y + h)


def box_share(expl, box_query, box_reference) -> float | None:
    """The share of the pair's positive point-to-point contributions (Eq. 3) between cells inside
    both images' boxes (``x, y, w, h`` pixels of the original images; a cell counts by its
    centre). Positive only, so that the share lies in [0, 1] (the negative terms would let it pass
    100 %). ``None`` when a box is unknown (NaN) or nothing is positive; ``1 - share`` is what the
    background (a cell outside its object's box on either side) contributes."""
    boxes = (np.asarray(box_query, dtype=float), np.asarray(box_reference, dtype=float))
    if not all(np.all(np.isfinite(b)) for b in boxes):
        return None
    p = np.maximum(np.asarray(expl.point_to_point, dtype=np.float64), 0.0)
    total = p.sum()
    if total == 0:
        return None
    in_q = _inside(cell_centres(expl.grid_query, expl.image_shape_query), boxes[0])
    in_r = _inside(cell_centres(expl.grid_reference, expl.image_shape_reference), boxes[1])
    return float(p[np.ix_(in_q, in_r)].sum() / total)


def strongest_points(expl, count: int = 3) -> list[tuple[int, float, float, float]]:
    """The query's ``count`` cells with the largest share of the similarity (the row sums of the
    point-to-point tensor): ``(cell, x, y, share)`` with ``(x, y)`` the cell centre's pixel."""
    sums = np.asarray(expl.point_to_point, dtype=np.float64).sum(axis=1)
    centres = cell_centres(expl.grid_query, expl.image_shape_query)
    order = np.argsort(-sums, kind="stable")[:count]
    similarity = expl.similarity if expl.similarity != 0 else float("nan")
    return [(int(k), float(centres[k, 0]), float(centres[k, 1]), float(sums[k] / similarity)) for k in order]
