"""Figures of plots as data: curves, bar charts and text.

A :class:`Figure` is what the report's plots (the sanity check) and the app's Export View of a
plot view draw: a title, rows of :class:`Plot` (curves) or :class:`Bars` (a bar chart), and note
lines. The writers (:mod:`.svg`, :mod:`.html`) only lay it out; nothing here depends on Qt or
matplotlib. ``scale`` is the export factor (1x-4x): the writers scale text, margins and strokes
by it. (The report's pair figures are scenes: :mod:`dmlviewer.core.report.gallery`.)
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field

#: base sizes in pixels at scale 1
FONT = 12
MARGIN = 8


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
    """A titled grid of plots with note lines (module docstring)."""

    title: str
    rows: list[list[Plot | Bars]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    scale: float = 1.0


def data_uri(data: bytes, mime: str = "image/png") -> str:
    """``data`` as a ``data:`` URI (nothing to fetch)."""
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
