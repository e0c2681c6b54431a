"""Colour maps of the heat-map overlays, read from the core's one table
(:mod:`dmlviewer.core.scene.colormaps`, issue 39): the same name gives the same colours on
screen, in the hover renderer and in every figure.

Overlays are drawn over the photograph, so weak values fade out: the alpha channel rises with
the value (sequential maps) or with its distance from zero (the diverging map of signed
display). The same table colours the overlay (``ImageItem.setLookupTable`` or the core's hover
renderer) and the colour bar (as a ``pyqtgraph.ColorMap`` without the alpha).
"""

from __future__ import annotations

import functools

import numpy as np
import pyqtgraph as pg

from dmlviewer.core.scene.colormaps import SEQUENTIAL, STATIC_OVERLAY, overlay_lut, rgb, shown_map

__all__ = ["SEQUENTIAL", "STATIC_OVERLAY", "colorbar_map", "overlay_lut"]


@functools.lru_cache(maxsize=32)
def colorbar_map(name: str, signed: bool = False) -> pg.ColorMap:
    """The opaque ``pyqtgraph.ColorMap`` that the colour bar shows for ``overlay_lut``."""
    return pg.ColorMap(np.linspace(0.0, 1.0, 256), np.array(rgb(shown_map(name, signed))))
