"""The one levels function (issue 39): which data values a colour map's two ends stand for.

Levels are computed from the data at grid resolution (the feature grid's cells, the values the
explanation holds), never from an upsampled or resized image, so the screen, Export View at any
scale, the report and ``explain --figure`` print the same colour-bar numbers, and the top of a
bar is a cell's value. No Qt here.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from dmlviewer.core.display import SCALES, SIGNS


def sign_part(grid: np.ndarray, sign: str) -> np.ndarray:
    """The part of a signed map that ``sign`` shows: its positive part, its negative part as
    positive values (the opposing contributions), or the map itself ("signed")."""
    grid = np.asarray(grid, dtype=np.float32)
    if sign == "positive":
        return np.maximum(grid, 0.0)
    if sign == "negative":
        return np.maximum(-grid, 0.0)
    if sign == "signed":
        return grid
    raise ValueError(f"sign: {sign!r} is not one of {', '.join(SIGNS)}")


def levels(grids: np.ndarray | Iterable[np.ndarray], sign: str, scale: str = "map",
           pair_value: float | None = None) -> tuple[float, float]:
    """``(low, high)`` of a colour map over ``grids`` (one grid map, or several on one shared
    scale: both rows' maps with *Shared scale*), already split by ``sign`` (:func:`sign_part`).

    ``scale="map"``: the largest value of the grids (the largest ``|value|`` when signed, then
    ``(-m, m)``); ``scale="pair"`` with ``pair_value``: that fixed value (the whole pair's scale
    of partial maps, ``core.explain.hover.pair_scale``). A range of width 0 (an empty or
    all-zero map) becomes ``(0, 1)`` (``(-1, 1)`` signed), so nothing divides by zero."""
    if scale not in SCALES:
        raise ValueError(f"scale: {scale!r} is not one of {', '.join(SCALES)}")
    if sign not in SIGNS:
        raise ValueError(f"sign: {sign!r} is not one of {', '.join(SIGNS)}")
    if scale == "pair" and pair_value is not None:
        top = float(pair_value)
    else:
        arrays = [grids] if isinstance(grids, np.ndarray) else list(grids)
        finite = [np.abs(a[np.isfinite(a)]) if sign == "signed" else a[np.isfinite(a)]
                  for a in (np.asarray(g, dtype=np.float64) for g in arrays)]
        top = max((float(a.max()) for a in finite if a.size), default=0.0)
    top = top if top > 0 else 1.0
    return (-top, top) if sign == "signed" else (0.0, top)
