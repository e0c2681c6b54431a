"""Mapping between image pixels and a feature grid, and upsampling of grid maps.

Alignment convention (one for the whole package, the one OpenCV's ``INTER_LINEAR`` and
``F.interpolate(align_corners=False)`` use): pixel ``k`` of an image has its centre at
coordinate ``k`` and covers ``[k - 0.5, k + 0.5]``; grid cell ``j`` of a ``w``-wide grid laid
over a ``W``-wide image has its centre at pixel coordinate ``(j + 0.5) * W / w - 0.5``. So the
grid coordinate of pixel ``x`` is ``gx = (x + 0.5) * w / W - 0.5``, clamped to ``[0, w - 1]``
(border pixels repeat the border cells, as ``cv2.resize`` does). A grid map upsampled with
:func:`upsample` and the bilinear weights of :func:`bilinear_weights` agree exactly: the
value of the upsampled map at a pixel is the weighted sum of the 4 cells around it.

Points are accepted anywhere on the image extent ``[-0.5, W - 0.5] x [-0.5, H - 0.5]``; a point
outside raises ``ValueError`` (never an ``IndexError``).
"""

from __future__ import annotations

import math

import cv2
import numpy as np


def check_point(x: float, y: float, image_shape: tuple[int, int]) -> None:
    """Raise ``ValueError`` unless ``(x, y)`` lies on an ``H x W`` image (see module docstring)."""
    height, width = int(image_shape[0]), int(image_shape[1])
    if not (math.isfinite(x) and math.isfinite(y)):
        raise ValueError(f"point ({x}, {y}) is not a finite coordinate")
    if not (-0.5 <= x <= width - 0.5 and -0.5 <= y <= height - 0.5):
        raise ValueError(
            f"point (x={x:g}, y={y:g}) lies outside the {width}x{height} image "
            f"(x must be in [-0.5, {width - 0.5:g}], y in [-0.5, {height - 0.5:g}])"
        )


def pixel_to_grid(coord: float, pixels: int, cells: int) -> float:
    """Grid coordinate of pixel coordinate ``coord`` along one axis (cell-centre alignment, clamped)."""
    g = (coord + 0.5) * cells / pixels - 0.5
    return min(max(g, 0.0), cells - 1.0)


def grid_to_pixel(cell: float, pixels: int, cells: int) -> float:
    """Pixel coordinate of the centre of grid cell ``cell`` along one axis."""
    return (cell + 0.5) * pixels / cells - 0.5


def bilinear_weights(
    x: float, y: float, image_shape: tuple[int, int], grid: tuple[int, int]
) -> tuple[tuple[int, int, int, int], tuple[float, float, float, float]]:
    """Flat indices (row-major) and weights of the 4 grid cells around image point ``(x, y)``.

    The weights are non-negative and sum to 1; indices may repeat on the grid border.
    """
    check_point(x, y, image_shape)
    h, w = grid
    gx = pixel_to_grid(x, image_shape[1], w)
    gy = pixel_to_grid(y, image_shape[0], h)
    j0 = min(int(gx), w - 1)
    i0 = min(int(gy), h - 1)
    j1 = min(j0 + 1, w - 1)
    i1 = min(i0 + 1, h - 1)
    fx = gx - j0
    fy = gy - i0
    idx = (i0 * w + j0, i0 * w + j1, i1 * w + j0, i1 * w + j1)
    wts = ((1 - fy) * (1 - fx), (1 - fy) * fx, fy * (1 - fx), fy * fx)
    return idx, wts


def upsample(grid_map: np.ndarray, shape: tuple[int, int], out: np.ndarray | None = None) -> np.ndarray:
    """Bilinear upsampling of an ``h x w`` (or ``h x w x c``, c <= 4) map to ``H x W`` float32.

    Same alignment as :func:`bilinear_weights` (``cv2.INTER_LINEAR``). ``out`` may be a
    preallocated C-contiguous float32 buffer of the output shape.
    """
    src = np.ascontiguousarray(grid_map, dtype=np.float32)
    size = (int(shape[1]), int(shape[0]))
    if out is None:
        return cv2.resize(src, size, interpolation=cv2.INTER_LINEAR)
    return cv2.resize(src, size, dst=out, interpolation=cv2.INTER_LINEAR)


def upsample_stack(maps: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """Upsample a ``P x h x w`` stack of grid maps to ``P x H x W`` float32."""
    maps = np.asarray(maps, dtype=np.float32)
    out = np.empty((maps.shape[0], int(shape[0]), int(shape[1])), dtype=np.float32)
    for p in range(maps.shape[0]):
        upsample(maps[p], shape, out=out[p])
    return out


def region_cell_weights(
    region: tuple[float, float, float, float], image_shape: tuple[int, int], grid: tuple[int, int]
) -> np.ndarray:
    """Fraction of each grid cell's area covered by a pixel region, ``h x w`` float32.

    ``region = (y0, x0, y1, x1)`` in pixel-edge coordinates of the original image (the region
    covers ``[x0, x1] x [y0, y1]``; ``(0, 0, H, W)`` is the whole image). Cell ``(i, j)`` covers
    ``[j W/w, (j+1) W/w] x [i H/h, (i+1) H/h]``; its weight is the covered fraction of that area
    (fractional cell weights, seed 000 Sec. 5.4 partial features). The region is clipped to the
    image; an empty region (after clipping) raises ``ValueError``.
    """
    y0, x0, y1, x1 = (float(v) for v in region)
    height, width = int(image_shape[0]), int(image_shape[1])
    if not all(math.isfinite(v) for v in (y0, x0, y1, x1)):
        raise ValueError(f"region {region} has a non-finite coordinate")
    cx0, cx1 = max(min(x0, x1), 0.0), min(max(x0, x1), float(width))
    cy0, cy1 = max(min(y0, y1), 0.0), min(max(y0, y1), float(height))
    if cx1 <= cx0 or cy1 <= cy0:
        raise ValueError(
            f"region y0,x0,y1,x1={y0:g},{x0:g},{y1:g},{x1:g} does not overlap the "
            f"{width}x{height} image"
        )
    h, w = grid
    wy = _overlap_1d(cy0, cy1, height, h)
    wx = _overlap_1d(cx0, cx1, width, w)
    return np.outer(wy, wx).astype(np.float32)


def _overlap_1d(lo: float, hi: float, pixels: int, cells: int) -> np.ndarray:
    edges = np.arange(cells + 1, dtype=np.float64) * pixels / cells
    covered = np.clip(np.minimum(edges[1:], hi) - np.maximum(edges[:-1], lo), 0.0, None)
    return covered / (pixels / cells)
