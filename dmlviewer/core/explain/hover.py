"""The hover path: partial activation map at a point, upsampled and colour-mapped (seed 000 Sec. 3).

Everything the GUI needs per mouse event is precomputed once per pair (a float32 C-contiguous
``n_source x n_target`` matrix whose rows are the point-to-point tensor seen from the hovered
side) and every output buffer is preallocated, so one event is a handful of numpy/OpenCV calls
on small arrays: the 4-row bilinear blend (grid alignment of :mod:`.grid`), an affine scaling to
colour indices on the grid (exact, since bilinear weights sum to 1), ``cv2.resize``, one
saturating conversion to uint8 and a 256-entry RGBA lookup (two pixels per element, through
:func:`pair_table` and :func:`take_pairs`). No torch, no allocation per event. A hover
(:meth:`HoverRenderer.hover`) stops at the colour indices: the GUI looks them up once, in a
table of premultiplied BGRA with its opacity baked in (:func:`premultiplied_table`, issue 40),
so the overlay is resampled once, here, and coloured once, there.

One pass per point (issue 30): :meth:`HoverRenderer.hover` gives the overlay, the point's share
of the similarity and the value the top colour stands for from one bilinear blend;
:func:`hover_points` does it for every row of a pair view (one model per row), with one colour
scale for all rows when asked. A renderer keeps the blend of the last point it was asked for, so
a second use of the same point (a shared peak, a difference) blends nothing again.

Two models (issue 24): each model has its own renderer; :class:`DifferenceRenderer` draws model
A's partial map minus model B's at the same point from the two renderers' grid maps (on a
common grid when the models' grids differ), on one symmetric scale.

The returned arrays are views of internal buffers, overwritten by the next call: copy them if
they must outlive the event.
"""

from __future__ import annotations

from typing import Sequence

import cv2
import numpy as np

from dmlviewer.core.explain.grid import bilinear_weights

def colormap_lut(name: str = "jet", alpha: int = 255) -> np.ndarray:
    """A 256 x 4 uint8 RGBA look-up table of colour map ``name`` from the core's one table
    (:mod:`dmlviewer.core.scene.colormaps`), one ``alpha`` for every entry."""
    from dmlviewer.core.scene.colormaps import opaque_lut

    return opaque_lut(name, alpha)


#: Share of a pair's points whose strongest contribution may saturate the whole-pair scale.
PAIR_SCALE_SATURATE = 0.02


def pair_scale(tensor: np.ndarray, saturate: float = PAIR_SCALE_SATURATE) -> float:
    """One colour scale for every partial map of a pair (the pair view's "Whole pair"): the
    ``1 - saturate`` quantile of the points' strongest |contribution|, over the points of both
    images (rows and columns of the point-to-point tensor, Eq. 3). A max-pooled head puts most
    of the similarity into a handful of cell pairs; on the single largest entry every other
    point would stay dark, so the strongest ``saturate`` of the points saturate instead. Never
    0 (then the largest entry, or 1)."""
    a = np.abs(np.asarray(tensor, dtype=np.float32))
    a = a.reshape(a.shape[0], -1) if a.ndim == 2 else a.reshape(int(np.prod(a.shape[:2])), -1)
    peaks = np.concatenate([a.max(axis=1), a.max(axis=0)])
    scale = float(np.quantile(peaks, 1.0 - saturate))
    return scale if scale > 0 else (float(a.max()) or 1.0)


#: How far below an integer an upsampled colour level may lie and still take that integer's index
#: (:meth:`HoverRenderer.indices`): far above float32 rounding at 255, far below one level.
FLOOR_EPS = 2.0 ** -10

#: Longest side of a partial-map overlay (larger photographs get a stretched overlay).
MAX_OVERLAY_SIDE = 640
#: Longest side of an overlay a caller may ask a renderer for (``shape``): a screen's width and
#: more; a larger one is refused rather than allocated.
MAX_DRAWN_SIDE = 16384


def overlay_shape(shape: tuple[int, int], limit: int = MAX_OVERLAY_SIDE) -> tuple[int, int]:
    """``shape`` scaled down (aspect kept) so that its longer side is at most ``limit``."""
    h, w = int(shape[0]), int(shape[1])
    s = min(1.0, limit / max(h, w, 1))
    return max(1, round(h * s)), max(1, round(w * s))


class HoverPoint:
    """What a hovered point shows on the other image, from one blend: ``index`` (the overlay as
    colour indices, ``H x W`` uint8, the renderer's buffer) and ``lut`` (the renderer's 256 x 4
    RGBA table), ``rgba`` (the overlay as ``lut[index]``, made on first use only: a pane that
    draws through :func:`premultiplied_table` never needs it), ``share`` (the point's share of
    the similarity: its partial map's sum over the renderer's ``share_total``; None without one)
    and ``peak`` (the value the top colour stands for: the fixed scale, or the map's own maximum,
    or the rows' larger one with a shared scale; None when the map is empty and drawn on its own
    scale, since no value stands for its top colour then). ``empty``: the map has no value of the
    shown sign (a background point whose partial map is all zero, issue 42 item 9). Each
    renderer owns one and overwrites it at every point."""

    __slots__ = ("index", "lut", "share", "peak", "empty", "_rgba", "_fill")

    def __init__(self, rgba: np.ndarray | None = None, share: float | None = None,
                 peak: float | None = None) -> None:
        self.index: np.ndarray | None = None
        self.lut: np.ndarray | None = None
        self.share, self.peak = share, peak
        self.empty = False
        self._rgba = rgba
        self._fill = None  # the renderer's colouring of ``index`` into its RGBA buffer

    @property
    def rgba(self) -> np.ndarray | None:
        if self._rgba is None and self._fill is not None:
            self._rgba = self._fill()
        return self._rgba

    def _indexed(self, index: np.ndarray, lut: np.ndarray, fill) -> None:
        self.index, self.lut, self._fill, self._rgba = index, lut, fill, None


def premultiplied_table(lut: np.ndarray, opacity: float = 1.0) -> np.ndarray:
    """``lut`` (256 x 4 RGBA, straight alpha) as 256 uint32 premultiplied ``0xAARRGGBB`` values
    with ``opacity`` baked into the alpha: taken through an index image, the result's bytes
    are B, G, R, A on a little-endian machine, the layout of Qt's ``ARGB32_Premultiplied``
    (drawn without a per-pixel conversion). Alpha ``a = round(A * opacity)``, colours
    ``round(c * a / 255)``: the straight-alpha blend ``c * (A / 255) * opacity + dst * (1 - ...)``
    up to rounding."""
    lut = np.asarray(lut, dtype=np.float64)
    if lut.shape != (256, 4):
        raise ValueError(f"colour look-up table must be 256 x 4, got {lut.shape}")
    if not 0.0 <= opacity <= 1.0:
        raise ValueError(f"opacity must be in [0, 1], got {opacity}")
    a = np.round(lut[:, 3] * opacity)
    r, g, b = (np.round(lut[:, k] * a / 255.0) for k in range(3))
    return (a.astype(np.uint32) << 24 | r.astype(np.uint32) << 16 | g.astype(np.uint32) << 8
            | b.astype(np.uint32))


def pair_table(table: np.ndarray) -> np.ndarray:
    """The 65536 uint64 entries that :func:`take_pairs` looks two pixels up in at once, from a
    256-entry uint32 ``table`` (e.g. :func:`premultiplied_table`): entry ``256 * i + j`` is
    ``table[i] << 32 | table[j]``, which is, read as two uint32 in memory, ``table[a]`` then
    ``table[b]`` for the index bytes ``a, b`` of two neighbouring pixels read as one uint16 (on
    either byte order). 512 KiB, built in well under a millisecond: build it once per table."""
    table = np.asarray(table)
    if table.shape != (256,) or table.dtype != np.uint32:
        raise ValueError(f"table must be 256 uint32 entries, got {table.shape} {table.dtype}")
    wide = table.astype(np.uint64)
    return (wide[:, None] << np.uint64(32) | wide[None, :]).reshape(-1)


def take_pairs(pairs: np.ndarray, index: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``out[...] = table[index]`` for the ``pairs`` (:func:`pair_table`) of a 256-entry uint32
    ``table``: ``index`` (uint8) read as uint16 and ``out`` (uint32, C-contiguous, ``index``'s
    shape) as uint64, so one ``np.take`` moves two pixels per element, about twice as fast as
    ``np.take(table, index, out=out)`` on a photograph-sized overlay. Returns ``out``."""
    if out.dtype != np.uint32 or not out.flags.c_contiguous or out.shape != index.shape:
        raise ValueError("out must be a C-contiguous uint32 array of the index's shape")
    if index.dtype != np.uint8:
        raise ValueError(f"colour indices must be uint8, got {index.dtype}")
    flat_index, flat_out = np.ascontiguousarray(index).reshape(-1), out.reshape(-1)
    even = flat_index.size - flat_index.size % 2
    # Every uint16 is a valid entry, so the mode never acts; "wrap" is numpy's quickest.
    np.take(pairs, flat_index[:even].view(np.uint16), out=flat_out[:even].view(np.uint64), mode="wrap")
    if even < flat_index.size:  # an odd pixel count: the last one alone (the low word of an entry)
        flat_out[-1] = pairs[flat_index[-1]] & np.uint64(0xFFFFFFFF)
    return out


class HoverRenderer:
    """Partial maps of one hovered side, rendered into preallocated buffers.

    ``rows``: ``n_source x n_target`` (row ``k`` = the other image's grid map for hovered cell
    ``k``). ``source_shape``/``source_grid``: the hovered image's ``(H, W)`` and grid;
    ``target_shape``/``target_grid``: the output size and the other image's grid. A call may ask
    for another output size (``shape``): a pane draws the overlay at the size it has on screen,
    one buffer pixel per device pixel, without Qt scaling it (issue 40).
    ``signed``: colour the range ``[-s, s]`` (diverging) instead of ``[0, s]`` (negative values
    clip to the first colour). ``scale``: the fixed ``s``; ``None`` normalizes each map to its own
    maximum (absolute maximum when signed). ``share_total``: what a point's share is a fraction
    of (the similarity, negated when the rows are; None: no share).
    """

    def __init__(
        self,
        rows: np.ndarray,
        source_shape: tuple[int, int],
        source_grid: tuple[int, int],
        target_shape: tuple[int, int],
        target_grid: tuple[int, int],
        lut: np.ndarray | None = None,
        signed: bool = False,
        scale: float | None = None,
        share_total: float | None = None,
    ) -> None:
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        if rows.shape != (source_grid[0] * source_grid[1], target_grid[0] * target_grid[1]):
            raise ValueError(f"rows of shape {rows.shape} do not match grids {source_grid} -> {target_grid}")
        self.rows = rows
        self.source_shape = (int(source_shape[0]), int(source_shape[1]))
        self.source_grid = (int(source_grid[0]), int(source_grid[1]))
        self.target_shape = (int(target_shape[0]), int(target_shape[1]))
        self.target_grid = (int(target_grid[0]), int(target_grid[1]))
        self.signed = signed
        self.scale = scale
        self.share_total = share_total
        self.point = HoverPoint()
        self._at: tuple[float, float] | None = None  # the point whose blend is in the buffer
        #: The value the last rendered map's top colour stands for (``scale``, or that map's maximum).
        self.last_scale: float | None = None
        lut = colormap_lut() if lut is None else np.ascontiguousarray(lut, dtype=np.uint8)
        if lut.shape != (256, 4):
            raise ValueError(f"colour look-up table must be 256 x 4 uint8, got {lut.shape}")
        self.lut = lut
        self._pairs: np.ndarray | None = None  # the table's pair_table, built on first colouring
        h, w = self.target_grid
        self._grid = np.empty(h * w, dtype=np.float32)
        self._tmp = np.empty(h * w, dtype=np.float32)
        self._scaled = np.empty((h, w), dtype=np.float32)
        self._up = np.empty(0, dtype=np.float32)
        self._output(self.target_shape)

    def _output(self, shape: tuple[int, int] | None) -> tuple[int, int]:
        """The output buffers at ``shape`` (None: ``target_shape``), made anew only when the
        size changes (a resized or zoomed pane); returns the size."""
        shape = self.target_shape if shape is None else (int(shape[0]), int(shape[1]))
        if self._up.shape != shape:
            if not (1 <= min(shape) and max(shape) <= MAX_DRAWN_SIDE):
                raise ValueError(f"an overlay of {shape[0]} x {shape[1]} pixels cannot be drawn")
            self._up = np.empty(shape, dtype=np.float32)
            self._index = np.empty(shape, dtype=np.uint8)
            self._rgba = np.empty((*shape, 4), dtype=np.uint8)
            self._rgba32 = self._rgba.view(np.uint32).reshape(shape)
        return shape

    def grid_map(self, x: float, y: float) -> np.ndarray:
        """The other image's ``h x w`` grid map for hovered point ``(x, y)`` (bilinear blend of
        the 4 neighbouring rows; the buffer, blended once per point). Raises ``ValueError`` for a
        point outside the hovered image."""
        rows, out, tmp = self.rows, self._grid, self._tmp
        if self._at is not None and self._at[0] == x and self._at[1] == y:
            return out.reshape(self.target_grid)
        self._at = None
        idx, wts = bilinear_weights(x, y, self.source_shape, self.source_grid)
        np.multiply(rows[idx[0]], wts[0], out=out)
        for k in (1, 2, 3):
            if wts[k]:
                np.multiply(rows[idx[k]], wts[k], out=tmp)
                np.add(out, tmp, out=out)
        self._at = (x, y)
        return out.reshape(self.target_grid)

    def peak(self, x: float, y: float) -> float:
        """The value "each map" scales the map at ``(x, y)`` to: its maximum (absolute when signed)."""
        grid = self.grid_map(x, y)
        return float(np.abs(grid).max()) if self.signed else float(grid.max())

    def render(self, x: float, y: float, scale: float | None = None) -> np.ndarray:
        """``H x W x 4`` uint8 RGBA image of the partial map at ``(x, y)`` (internal buffer).
        ``scale`` overrides the renderer's own for this call (a scale shared with another
        model's renderer, see the pair view's "Shared scale")."""
        return self.colour(self.grid_map(x, y), self.scale if scale is None else scale)

    def hover(self, x: float, y: float, scale: float | None = None,
              shape: tuple[int, int] | None = None) -> HoverPoint:
        """The point's overlay, share and peak from one blend (:attr:`point`, overwritten by the
        next call); ``scale`` as in :meth:`render`; ``shape``: the overlay's size (None: the
        target's). Raises ``ValueError`` outside the image."""
        grid = self.grid_map(x, y)
        point = self.point
        scale = self.scale if scale is None else scale
        point._indexed(self.indices(grid, scale, shape), self.lut, self._take)
        point.empty = not (float(np.abs(grid).max()) if self.signed else float(grid.max())) > 0
        point.peak = None if point.empty and scale is None else self.last_scale
        total = self.share_total
        if total is None:
            point.share = None
        else:
            part = float(grid.sum(dtype=np.float64))
            point.share = part / total if total != 0 else float("nan")
        return point

    def colour(self, grid: np.ndarray, scale: float | None = None) -> np.ndarray:
        """Colour-map an ``h x w`` map on the target grid to the target size (internal buffer):
        ``[0, s]`` (or ``[-s, s]`` when signed) over the table, ``s = scale`` or the map's own
        maximum."""
        self.indices(grid, scale)
        return self._take()

    def indices(self, grid: np.ndarray, scale: float | None = None,
                shape: tuple[int, int] | None = None) -> np.ndarray:
        """The colour indices :meth:`colour` looks up (``H x W`` uint8, internal buffer): the map
        scaled to ``[0, 255]`` on the grid, upsampled once (bilinear) to ``shape`` (None: the
        target size; any size samples the same bilinear surface, at its own pixel centres) and
        converted with saturation: index ``floor(v)`` of the upsampled level ``v`` clipped to
        ``[0, 255]`` (what a plain clip and cast give), as one OpenCV conversion, the saturated
        ``round(|v - 0.5 + FLOOR_EPS|)``. Levels below 0 are zeroed first, and only when the grid
        has one (the upsampled map is a convex blend of the grid's values; a level a rounding error
        below 0 still gives 0). It differs from ``floor(v)`` only where ``v`` lies within
        ``FLOOR_EPS`` below an integer, by one level (there ``v`` is that integer up to float
        rounding anyway): 0.04 to 0.09 % of the pixels of random 7x7 to 37x37 maps. Quantizing on
        the grid and resizing uint8 would be faster but clips before interpolating (wrong wherever
        a map leaves ``[0, s]``) and moves a fifth of the pixels by one level even where not."""
        s = scale
        if s is None:
            s = float(np.abs(grid).max()) if self.signed else float(grid.max())
        if not s > 0:
            s = 1.0
        self.last_scale = s
        scaled = self._scaled
        if self.signed:
            np.multiply(grid, 127.5 / s, out=scaled)
            np.add(scaled, 127.5, out=scaled)
        else:
            np.multiply(grid, 255.0 / s, out=scaled)
        height, width = self._output(shape)
        cv2.resize(scaled, (width, height), dst=self._up, interpolation=cv2.INTER_LINEAR)
        if scaled.min() < 0:  # the upsampled map is a convex blend of the grid's values
            cv2.threshold(self._up, 0.0, 0.0, cv2.THRESH_TOZERO, dst=self._up)
        cv2.convertScaleAbs(self._up, dst=self._index, alpha=1.0, beta=FLOOR_EPS - 0.5)
        return self._index

    def _take(self) -> np.ndarray:
        """The RGBA buffer filled from the index buffer through the table."""
        if self._pairs is None:
            self._pairs = pair_table(self.lut.view(np.uint32).reshape(256))
        take_pairs(self._pairs, self._index, self._rgba32)
        return self._rgba


class DifferenceRenderer:
    """Partial maps of two models at the same hovered point, A minus B (issue 24): each model's
    :meth:`HoverRenderer.grid_map` (array slicing), both brought onto a common target grid (the
    larger size in each direction, bilinear, as :func:`.agreement.common_grid` does; a no-op
    when both models have the same grid), subtracted, and colour-mapped on a symmetric scale
    ``[-s, s]`` with a diverging table. ``scale``: the fixed ``s``; None: each map's largest
    ``|A - B|``. Both renderers must hover the same image and target the same image size.
    """

    def __init__(self, a: HoverRenderer, b: HoverRenderer, lut: np.ndarray | None = None,
                 scale: float | None = None) -> None:
        self.point = HoverPoint()
        if a.source_shape != b.source_shape or a.target_shape != b.target_shape:
            raise ValueError("the two renderers must hover the same image and draw the same image size")
        grid = (max(a.target_grid[0], b.target_grid[0]), max(a.target_grid[1], b.target_grid[1]))
        self.a, self.b, self.grid = a, b, grid
        # The colouring of a signed map on the common grid (its rows are never read).
        self._out = HoverRenderer(np.zeros((1, grid[0] * grid[1]), np.float32), a.source_shape, (1, 1),
                                  a.target_shape, grid, lut=lut, signed=True, scale=scale)
        self._ga = np.empty(grid, dtype=np.float32)
        self._gb = np.empty(grid, dtype=np.float32)
        self._diff = np.empty(grid, dtype=np.float32)

    @property
    def last_scale(self) -> float | None:
        return self._out.last_scale

    def _on_grid(self, grid_map: np.ndarray, out: np.ndarray) -> np.ndarray:
        if grid_map.shape == out.shape:
            return grid_map
        cv2.resize(grid_map, (out.shape[1], out.shape[0]), dst=out, interpolation=cv2.INTER_LINEAR)
        return out

    def grid_map(self, x: float, y: float) -> np.ndarray:
        """A's partial map minus B's at ``(x, y)`` on the common grid (internal buffer)."""
        a = self._on_grid(self.a.grid_map(x, y), self._ga)
        b = self._on_grid(self.b.grid_map(x, y), self._gb)
        return np.subtract(a, b, out=self._diff)

    def render(self, x: float, y: float, scale: float | None = None) -> np.ndarray:
        """``H x W x 4`` uint8 RGBA image of A minus B at ``(x, y)`` (internal buffer)."""
        return self._out.colour(self.grid_map(x, y), self._out.scale if scale is None else scale)

    def hover(self, x: float, y: float, scale: float | None = None,
              shape: tuple[int, int] | None = None) -> HoverPoint:
        """A minus B at the point (:attr:`point`: the overlay, at ``shape`` as in
        :meth:`HoverRenderer.hover`, and its largest ``|A - B|`` or fixed scale as ``peak``; no
        share)."""
        out = self._out
        self.point._indexed(out.indices(self.grid_map(x, y), out.scale if scale is None else scale, shape),
                            out.lut, out._take)
        self.point.peak = self.last_scale
        return self.point


def side_renderers(tensor: np.ndarray, shapes: tuple[tuple[int, int], tuple[int, int]],
                   grids: tuple[tuple[int, int], tuple[int, int]], lut: np.ndarray | None = None,
                   sign: str = "positive", scale: float | None = None,
                   similarity: float | None = None) -> tuple[HoverRenderer, HoverRenderer]:
    """The two renderers of a point-to-point tensor (``n_query x n_reference``, Eq. 3):
    hovering the query (its rows) and hovering the reference (its columns), each drawing on the
    other image at :func:`overlay_shape`. ``sign``: "positive", "negative" (the opposing part:
    the rows negated, coloured on ``[0, s]``) or "signed" (``[-s, s]``). ``similarity``: what
    the shares are fractions of (None: no share)."""
    flip = sign == "negative"
    rows = -np.asarray(tensor) if flip else tensor
    total = None if similarity is None else (-float(similarity) if flip else float(similarity))
    return tuple(
        HoverRenderer(rows if side == 0 else rows.T, shapes[side], grids[side], overlay_shape(shapes[1 - side]),
                      grids[1 - side], lut=lut, signed=sign == "signed", scale=scale, share_total=total)
        for side in (0, 1))


def hover_points(renderers: Sequence[HoverRenderer | DifferenceRenderer | None], x: float, y: float,
                 shared: bool = False,
                 shapes: Sequence[tuple[int, int] | None] | None = None) -> list[HoverPoint | None]:
    """Every row's :class:`HoverPoint` at ``(x, y)`` of the hovered image (None for a row with
    no renderer or a point outside its image). ``shared``: the rows' maps on one colour scale,
    the largest of their peaks at the point (the pair view's "Shared scale" on "Each map").
    ``shapes``: each row's overlay size (None: its renderer's target size)."""
    scale = None
    if shared:
        peaks = []
        for r in renderers:
            if isinstance(r, HoverRenderer):
                try:
                    peaks.append(r.peak(x, y))
                except ValueError:
                    pass
        scale = max(peaks) if len(peaks) > 1 else None
    points: list[HoverPoint | None] = []
    for r, shape in zip(renderers, shapes if shapes is not None else [None] * len(renderers)):
        try:
            points.append(None if r is None else r.hover(x, y, scale, shape))
        except ValueError:  # a point on the very border, outside the core's image extent
            points.append(None)
    return points
