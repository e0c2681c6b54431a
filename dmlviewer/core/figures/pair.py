"""A pair's explanation drawn as figure panels, from the data at the export resolution.

Used by the report (:mod:`dmlviewer.core.report`) and the group tab's Export View (the pair view exports
its headless scene, :mod:`dmlviewer.core.scene`). Everything is drawn from a
:class:`~dmlviewer.core.explain.pair.PairExplanation`: the overall maps are upsampled from the
feature grid straight to the panel size (not from a screen grab), the top matches are the
tensor's strongest cell pairs (:meth:`~PairExplanation.correspondences`), and the partial maps
of the query's strongest points are rows of the point-to-point tensor (seed 000 Sec. 3, Eq. 3).
"""

from __future__ import annotations

from typing import Sequence

import cv2
import numpy as np

from dmlviewer.core.explain.grid import grid_to_pixel, upsample
from dmlviewer.core.explain.matches import match_shares_text
from dmlviewer.core.explain.methods import label as method_label
from dmlviewer.core.scene.colormaps import DIVERGING
from dmlviewer.core.scene.levels import levels, sign_part

from .figure import COLORMAP, ColorBar, Panel, fit, overlay

#: a panel's longer side at scale 1, in pixels
PANEL_SIDE = 128
#: line colours of the drawn matches (RGB)
MATCH_COLOURS = ((255, 255, 255), (255, 220, 0), (0, 255, 120), (255, 80, 200), (0, 200, 255),
                 (255, 140, 0), (170, 120, 255), (120, 255, 255))


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


def _side_px(scale: float) -> int:
    return max(8, round(PANEL_SIDE * scale))


def map_panel(image: np.ndarray, grid_map: np.ndarray, caption: str, scale: float = 1.0,
              colormap: str = COLORMAP, high: float | None = None, sign: str = "positive") -> Panel:
    """``image`` with ``grid_map`` (a feature-grid map) upsampled to the panel's size and
    coloured: its positive part (``sign="positive"``), its negative part (``"negative"``), each on
    a colour bar from 0 to its maximum (or ``high``), or both (``"signed"``) on a diverging bar
    symmetric about 0."""
    shown = fit(image, _side_px(scale))
    part = sign_part(grid_map, sign)
    heat = upsample(part, shown.shape[:2])
    # the bar's ends are the grid's cell values (core.scene.levels), not a statistic of the resized map
    top = float(high) if high is not None else levels(part, sign)[1]
    if sign == "signed":
        return Panel(overlay(shown, heat, top, DIVERGING, low=-top), caption, ColorBar(-top, top, DIVERGING))
    return Panel(overlay(shown, heat, top, colormap), caption, ColorBar(0.0, top, colormap))


def _mark(image: np.ndarray, xy, number: int, scale: float, colour=(255, 255, 255)) -> None:
    x, y = int(round(xy[0])), int(round(xy[1]))
    radius = max(3, round(5 * scale))
    cv2.circle(image, (x, y), radius, (0, 0, 0), max(1, round(3 * scale)), cv2.LINE_AA)
    cv2.circle(image, (x, y), radius, colour, max(1, round(1.5 * scale)), cv2.LINE_AA)
    cv2.putText(image, str(number), (x + radius + 1, y - radius), cv2.FONT_HERSHEY_SIMPLEX, 0.4 * scale,
                (0, 0, 0), max(1, round(2.5 * scale)), cv2.LINE_AA)
    cv2.putText(image, str(number), (x + radius + 1, y - radius), cv2.FONT_HERSHEY_SIMPLEX, 0.4 * scale,
                colour, max(1, round(1 * scale)), cv2.LINE_AA)


def matches_panel(expl, image_q: np.ndarray, image_r: np.ndarray, count: int = 5, scale: float = 1.0) -> Panel:
    """Query and reference side by side with the ``count`` strongest matched cell pairs drawn as
    numbered lines (strongest first); the caption gives their shares of the similarity."""
    side = _side_px(scale)
    q, r = fit(image_q, side), fit(image_r, side)
    gap = max(2, round(6 * scale))
    height = max(q.shape[0], r.shape[0])
    canvas = np.full((height, q.shape[1] + gap + r.shape[1], 3), 255, np.uint8)
    canvas[: q.shape[0], : q.shape[1]] = q
    canvas[: r.shape[0], q.shape[1] + gap:] = r
    fq = (q.shape[1] / expl.image_shape_query[1], q.shape[0] / expl.image_shape_query[0])
    fr = (r.shape[1] / expl.image_shape_reference[1], r.shape[0] / expl.image_shape_reference[0])
    found = expl.correspondences(count)
    for k, m in enumerate(found):
        colour = MATCH_COLOURS[k % len(MATCH_COLOURS)]
        a = (m["query_xy"][0] * fq[0], m["query_xy"][1] * fq[1])
        b = (q.shape[1] + gap + m["reference_xy"][0] * fr[0], m["reference_xy"][1] * fr[1])
        cv2.line(canvas, tuple(int(round(v)) for v in a), tuple(int(round(v)) for v in b), colour,
                 max(1, round(1.5 * scale)), cv2.LINE_AA)
        _mark(canvas, a, k + 1, scale, colour)
        _mark(canvas, b, k + 1, scale, colour)
    return Panel(canvas, match_shares_text(found, expl.point_to_point, float(expl.similarity)))


def strongest_points(expl, count: int = 3) -> list[tuple[int, float, float, float]]:
    """The query's ``count`` cells with the largest share of the similarity (the row sums of the
    point-to-point tensor): ``(cell, x, y, share)`` with ``(x, y)`` the cell centre's pixel."""
    sums = np.asarray(expl.point_to_point, dtype=np.float64).sum(axis=1)
    centres = cell_centres(expl.grid_query, expl.image_shape_query)
    order = np.argsort(-sums, kind="stable")[:count]
    similarity = expl.similarity if expl.similarity != 0 else float("nan")
    return [(int(k), float(centres[k, 0]), float(centres[k, 1]), float(sums[k] / similarity)) for k in order]


def partial_panels(expl, image_q: np.ndarray, image_r: np.ndarray, count: int = 3, scale: float = 1.0,
                   colormap: str = COLORMAP) -> list[Panel]:
    """The query with its ``count`` strongest points marked, then for each point its partial map
    on the reference (its row of the point-to-point tensor, Eq. 3), on a shared colour scale."""
    points = strongest_points(expl, count)
    side = _side_px(scale)
    q = fit(image_q, side).copy()
    fx, fy = q.shape[1] / expl.image_shape_query[1], q.shape[0] / expl.image_shape_query[0]
    for n, (_, x, y, _) in enumerate(points):
        _mark(q, (x * fx, y * fy), n + 1, scale, MATCH_COLOURS[n % len(MATCH_COLOURS)])
    panels = [Panel(q, "Query's strongest points")]
    r = fit(image_r, side)
    grids = [np.maximum(expl.partial_map("query", x, y), 0.0) for _, x, y, _ in points]
    top = max((float(g.max()) for g in grids), default=0.0)
    for n, ((_, _, _, share), grid) in enumerate(zip(points, grids)):
        heat = upsample(grid.astype(np.float32), r.shape[:2])
        panels.append(Panel(overlay(r, heat, top, colormap), f"Point {n + 1}: {share:.1%} of the similarity",
                            ColorBar(0.0, top, colormap)))
    return panels


def pair_panels(expl, image_q: np.ndarray, image_r: np.ndarray, captions: Sequence[str] = ("Query", "Reference"),
                method: str = "decomposition", scale: float = 1.0, matches: int = 5, points: int = 3,
                colormap: str = COLORMAP, sign: str = "positive", high: float | None = None) -> list[Panel]:
    """One row of a pair figure: both overall maps of ``method`` (the ``sign`` part, each on its
    own colour bar unless ``high`` gives one), the top ``matches`` drawn, and the partial maps of
    the query's ``points`` strongest points (none when 0)."""
    name = method_label(method)
    row = [map_panel(image, expl.overall_grid(method, side), f"{caption} · {name}", scale, colormap, high, sign)
           for image, side, caption in ((image_q, "query", captions[0]), (image_r, "reference", captions[1]))]
    if matches:
        row.append(matches_panel(expl, image_q, image_r, matches, scale))
    if points:
        row.extend(partial_panels(expl, image_q, image_r, points, scale, colormap))
    return row
