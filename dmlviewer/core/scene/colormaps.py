"""The one colour-map table of the app (issue 39): every map the pair view, the hover renderer,
the group tabs and the figures colour with, as 256 x 3 uint8 RGB, plus the overlay's alpha ramp.

The colours are data (``colormaps.npz`` beside this module), so that neither pyqtgraph nor
matplotlib is imported to read them: ``jet`` is OpenCV's ``COLORMAP_JET`` (the app's default
since the first release); ``inferno``, ``viridis``, ``turbo`` and ``plasma`` are matplotlib's
(pyqtgraph ships the same 256 entries); ``diverging`` (signed maps and differences, negative
blue, positive red) is colorcet's CET-D1; ``viridis (light)`` is viridis from 0.3 to 1, without
its dark low end (the group tabs' static overlay: over a photograph a weak value is tinted
instead of darkened). They were written with ``pyqtgraph.colormap.get(name).getLookupTable(start,
1, 256)`` and ``cv2.applyColorMap``; ``tests/core/test_scene.py`` checks them against matplotlib.

No Qt, no matplotlib, no OpenCV here.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

#: Sequential maps offered for one-signed display (the display option ``colormap``).
SEQUENTIAL = ("jet", "inferno", "viridis", "turbo", "plasma")
#: The diverging map of signed display and of differences.
DIVERGING = "diverging"
#: The group tabs' overlay (module docstring).
STATIC_OVERLAY = "viridis (light)"
#: Every name of the table.
NAMES = SEQUENTIAL + (DIVERGING, STATIC_OVERLAY)
#: Alpha ramp of overlays: opaque from 1/RAMP of the (one-sided) range up.
RAMP = 2.0

_FILE = Path(__file__).with_name("colormaps.npz")


@functools.lru_cache(maxsize=1)
def _table() -> dict[str, np.ndarray]:
    with np.load(_FILE) as data:
        table = {name: np.ascontiguousarray(data[name], dtype=np.uint8) for name in data.files}
    for rgb in table.values():
        rgb.setflags(write=False)
    return table


def rgb(name: str) -> np.ndarray:
    """256 x 3 uint8 colours of map ``name`` (read-only); ``ValueError`` naming the choices."""
    table = _table()
    if name not in table:
        raise ValueError(f"colormap: {name!r} is not one of {', '.join(NAMES)}")
    return table[name]


def shown_map(name: str, signed: bool = False) -> str:
    """The map a display of ``name`` colours with: the diverging map when ``signed``."""
    return DIVERGING if signed else name


def alpha_ramp(signed: bool = False, ramp: float = RAMP, gamma: float = 1.0) -> np.ndarray:
    """256 alpha values (uint8): rising with the value (one sign, from 0 at the bottom) or with
    its distance from the middle (signed), as ``strength ** gamma`` (below 1: weak values fade in
    sooner, as the group tabs' sparse maps need), opaque from ``1/ramp`` of that range on."""
    t = np.linspace(0.0, 1.0, 256)
    strength = np.abs(2.0 * t - 1.0) if signed else t
    return np.round(np.clip(strength ** gamma * ramp, 0.0, 1.0) * 255).astype(np.uint8)


def overlay_lut(name: str, signed: bool = False, ramp: float = RAMP, gamma: float = 1.0) -> np.ndarray:
    """256 x 4 uint8 RGBA table of an overlay: ``name``'s colours (the diverging map when
    ``signed``) and :func:`alpha_ramp`."""
    lut = np.empty((256, 4), dtype=np.uint8)
    lut[:, :3] = rgb(shown_map(name, signed))
    lut[:, 3] = alpha_ramp(signed, ramp, gamma)
    return lut


def lift_alpha(lut: np.ndarray, start: int, alpha: float) -> np.ndarray:
    """A copy of the RGBA table ``lut`` whose entries from index ``start`` on are at least
    ``alpha`` (0-1) opaque: the cells that carry most of a sparse group map's share read as
    clearly drawn (issue 42 item 6). ``start`` is the index of the weakest such value in the
    indexing of whoever colours with it."""
    out = np.array(lut, dtype=np.uint8, copy=True)
    start = min(len(out) - 1, max(0, int(start)))
    out[start:, 3] = np.maximum(out[start:, 3], round(float(alpha) * 255))
    return out


def opaque_lut(name: str, alpha: int = 255) -> np.ndarray:
    """256 x 4 uint8 RGBA table of ``name`` with one alpha for every entry."""
    lut = np.empty((256, 4), dtype=np.uint8)
    lut[:, :3] = rgb(name)
    lut[:, 3] = alpha
    return lut


def colour_index(values: np.ndarray, levels: tuple[float, float]) -> np.ndarray:
    """``values`` as table indices (uint8) over ``levels = (low, high)``; outside clips to the
    ends, a range of width 0 gives index 0."""
    low, high = float(levels[0]), float(levels[1])
    values = np.asarray(values, dtype=np.float32)
    if not high > low:
        return np.zeros(values.shape, np.uint8)
    scaled = (values - low) * (255.0 / (high - low))
    return np.clip(np.nan_to_num(scaled, nan=0.0), 0.0, 255.0).astype(np.uint8)
