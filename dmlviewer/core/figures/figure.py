"""Figures as data: panels (images drawn at the export resolution), colour bars, curves and text.

A :class:`Figure` is what the report, ``--figures`` and the app's Export View draw: a title, rows
of :class:`Panel` (an RGB image already drawn at the output resolution, a caption, an optional
:class:`ColorBar`), :class:`Plot` (curves) or :class:`Bars` (a bar chart), and note lines (e.g.
the similarity split). The writers (:mod:`.svg`, :mod:`.html`) only lay it out; nothing here depends on Qt or matplotlib.
``scale`` is the export factor (1x-4x): the drawing functions of :mod:`.pair` draw the images
``scale`` times larger from the data, and the writers scale text, margins and strokes by it.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field

import cv2
import numpy as np

from dmlviewer.core.explain.hover import colormap_lut

#: the colour map of every map drawn in a figure (the app's default)
COLORMAP = "jet"
#: weight of the colour map over the image
OPACITY = 0.5
#: base sizes in pixels at scale 1
FONT = 12
MARGIN = 8
COLORBAR_HEIGHT = 10


@dataclass
class ColorBar:
    """A colour bar under a panel: ``colormap`` from ``low`` to ``high`` (the map's values)."""

    low: float
    high: float
    colormap: str = COLORMAP

    def ramp(self, width: int, height: int) -> np.ndarray:
        """The bar as an ``height x width`` RGB image (left: ``low``)."""
        lut = colormap_lut(self.colormap)[:, :3]
        index = np.linspace(0, 255, max(width, 1)).round().astype(np.uint8)
        return np.ascontiguousarray(np.broadcast_to(lut[index][None], (max(height, 1), max(width, 1), 3)))


@dataclass
class Panel:
    """One image of a figure: ``image`` (H x W x 3 uint8 RGB, at the output resolution)."""

    image: np.ndarray
    caption: str = ""
    colorbar: ColorBar | None = None


@dataclass
class Plot:
    """Curves: ``series`` maps a label to its y values over the shared ``x`` (NaN: no point), or
    to its own ``(x, y)`` pair of lists (a plot taken from the app, each curve with its own x)."""

    title: str
    x: list[float]
    series: dict[str, list[float] | tuple[list[float], list[float]]]
    x_label: str = ""
    y_label: str = ""
    x_ticks: list[str] | None = None  # labels of the x values (default: the values)
    y_range: tuple[float, float] | None = None
    width: int = 360
    height: int = 220
    dots: tuple[str, ...] = ()  # series drawn as points only (a scatter), without a line

    def points(self, label: str) -> tuple[list[float], list[float]]:
        """``(x, y)`` of series ``label``."""
        values = self.series[label]
        if isinstance(values, tuple):
            return [float(v) for v in values[0]], [float(v) for v in values[1]]
        return [float(v) for v in self.x], [float(v) for v in values]


@dataclass
class Bars:
    """A bar chart: one bar per label, its height ``values[k]`` from 0 (a histogram's counts
    with its bin labels, the localization view's correspondence accuracies)."""

    title: str
    labels: list[str]
    values: list[float]
    x_label: str = ""
    y_label: str = ""
    y_range: tuple[float, float] | None = None
    width: int = 360
    height: int = 220


@dataclass
class Figure:
    """A titled grid of panels and plots with note lines (module docstring)."""

    title: str
    rows: list[list[Panel | Plot | Bars]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    scale: float = 1.0


def png_bytes(image: np.ndarray) -> bytes:
    """``image`` (RGB or gray uint8) encoded as PNG with OpenCV."""
    image = np.asarray(image, dtype=np.uint8)
    if image.ndim == 3:
        image = cv2.cvtColor(image, cv2.COLOR_RGB2BGR)
    ok, data = cv2.imencode(".png", image)
    if not ok:
        raise ValueError("the image could not be encoded as PNG")
    return data.tobytes()


def data_uri(data: bytes, mime: str = "image/png") -> str:
    """``data`` as a ``data:`` URI (nothing to fetch)."""
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def overlay(image: np.ndarray, heat: np.ndarray, high: float | None = None, colormap: str = COLORMAP,
            opacity: float = OPACITY, low: float = 0.0) -> np.ndarray:
    """``heat`` (same H x W as ``image``) coloured on ``image``: ``[low, high]`` to the colour map
    (``high``: default the map's maximum; values outside clip to the end colours), blended at
    ``opacity``."""
    heat = np.asarray(heat, dtype=np.float32)
    top = float(high) if high is not None else float(heat.max(initial=0.0))
    span = top - float(low)
    index = (np.zeros(heat.shape, np.uint8) if not span > 0
             else np.clip((heat - float(low)) / span * 255.0, 0, 255).astype(np.uint8))
    colours = colormap_lut(colormap)[:, :3][index].astype(np.float32)
    out = image.astype(np.float32) * (1.0 - opacity) + colours * opacity
    return np.clip(out + 0.5, 0, 255).astype(np.uint8)


def fit(image: np.ndarray, side: int) -> np.ndarray:
    """``image`` resized so that its longer side is ``side`` pixels (area interpolation when
    shrinking, cubic when enlarging)."""
    h, w = image.shape[:2]
    factor = side / max(h, w)
    size = (max(1, round(w * factor)), max(1, round(h * factor)))
    if size == (w, h):
        return np.ascontiguousarray(image)
    return cv2.resize(image, size, interpolation=cv2.INTER_AREA if factor < 1 else cv2.INTER_CUBIC)
