"""Colour maps for heat-map overlays: 256-entry RGBA look-up tables with an alpha ramp.

Overlays are drawn over the photograph, so weak values fade out: the alpha channel rises
with the value (sequential maps, from 0 at the bottom of the range) or with its distance
from zero (diverging maps, for signed display). The same table colours the overlay
(``ImageItem.setLookupTable`` or the core's hover renderer) and the colour bar (as a
``pyqtgraph.ColorMap`` without the alpha).
"""

from __future__ import annotations

import functools

import numpy as np
import pyqtgraph as pg

#: Sequential maps offered for one-signed display (label -> pyqtgraph map name).
SEQUENTIAL = {"jet": None, "inferno": "inferno", "viridis": "viridis", "turbo": "turbo", "plasma": "plasma"}
#: The diverging map used for signed display (negative blue, positive red).
DIVERGING = "CET-D1"
#: Maps without their dark low end (label -> pyqtgraph map, where its colours start): over a
#: photograph a weak value is then tinted with a visible colour as it fades in, instead of
#: darkening what is under it.
LIGHT = {"viridis (light)": ("viridis", 0.3)}
#: The overlay of maps shown without hover (the group tab's decomposition and attention maps):
#: transparent at zero, blue-green to yellow above; it stands out on the red, orange and skin
#: tones of most objects, where inferno's dark low end hid a weak map and its orange high end
#: blended into a red body.
STATIC_OVERLAY = "viridis (light)"


def _rgb(name: str) -> np.ndarray:
    """256 x 3 uint8 colours of map ``name``."""
    pg_name, start = LIGHT.get(name, (SEQUENTIAL.get(name, name), 0.0))
    if pg_name is None:  # jet is not among pyqtgraph's maps; the core has it (OpenCV's)
        from dmlviewer.core.explain.hover import colormap_lut

        return colormap_lut("jet")[:, :3].copy()
    cmap = pg.colormap.get(pg_name)
    return np.asarray(cmap.getLookupTable(start, 1.0, 256, alpha=False), dtype=np.uint8)[:, :3]


def overlay_lut(name: str, signed: bool = False, ramp: float = 2.0, gamma: float = 1.0) -> np.ndarray:
    """256 x 4 uint8 RGBA table: ``name``'s colours (the diverging map when ``signed``) and
    alpha rising to opaque over the first ``1/ramp`` of the (one-sided) range, as
    ``strength ** gamma`` (``gamma`` below 1: weak values fade in sooner)."""
    rgb = _rgb(DIVERGING if signed else name)
    t = np.linspace(0.0, 1.0, 256)
    strength = np.abs(2.0 * t - 1.0) if signed else t
    lut = np.empty((256, 4), dtype=np.uint8)
    lut[:, :3] = rgb
    lut[:, 3] = np.round(np.clip(strength ** gamma * ramp, 0.0, 1.0) * 255).astype(np.uint8)
    return lut


@functools.lru_cache(maxsize=32)
def colorbar_map(name: str, signed: bool = False) -> pg.ColorMap:
    """The opaque ``pyqtgraph.ColorMap`` that the colour bar shows for ``overlay_lut``."""
    rgb = _rgb(DIVERGING if signed else name)
    return pg.ColorMap(np.linspace(0.0, 1.0, 256), rgb)
