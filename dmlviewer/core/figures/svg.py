"""A small SVG writer for :class:`~.figure.Figure`: text stays text.

The layout is a column of rows; each row places its plots side by side, top aligned. A plot is
drawn with lines, axes and tick labels, a bar chart with one ``rect`` per bar. Every length is
multiplied by the figure's ``scale``, so the SVG at 2x is the 1x figure twice as large. Nothing
is fetched: fonts are generic families.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from html import escape

from .figure import FONT, MARGIN, Bars, Figure, Plot

FONT_FAMILY = "DejaVu Sans, Arial, Helvetica, sans-serif"
#: series colours of plots (colour-blind safe, Okabe-Ito)
SERIES_COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
CHAR_WIDTH = 0.6  # average glyph width as a share of the font size, for wrapping


def wrap(text: str, width_px: float, font_px: float) -> list[str]:
    """``text`` broken into lines of at most ``width_px`` (estimated glyph widths), between words
    only: a word longer than a line (a file name) stays whole on its own line."""
    per_line = max(8, int(width_px / (font_px * CHAR_WIDTH)))
    lines: list[str] = []
    for paragraph in text.split("\n"):
        line = ""
        for word in paragraph.split(" "):
            if line and len(line) + 1 + len(word) > per_line:
                lines.append(line)
                line = word
            else:
                line = f"{line} {word}" if line else word
        lines.append(line)
    return lines


def _text(x: float, y: float, text: str, size: float, anchor: str = "start", weight: str = "normal") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size:.1f}" text-anchor="{anchor}" '
            f'font-weight="{weight}">{escape(text)}</text>')


def _number(value: float) -> str:
    if value != value:
        return "n/a"
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"


class _Canvas:
    def __init__(self) -> None:
        self.parts: list[str] = []

    def add(self, element: str) -> None:
        self.parts.append(element)


def plot_size(plot: Plot | Bars, s: float) -> tuple[float, float]:
    legend = 0 if isinstance(plot, Bars) else math.ceil(len(plot.series) / 2)
    return plot.width * s, plot.height * s + (FONT * 1.3 * s) * (1 + legend)


def _frame(canvas: _Canvas, plot: Plot | Bars, x0: float, y0: float, s: float,
           lo: float, hi: float) -> tuple[float, float, float, float, Callable[[float], float]]:
    """Title, frame, y ticks with grid lines and both axis titles of ``plot`` at ``(x0, y0)``;
    returns the plotting area ``(left, right, top, bottom)`` and the y to pixel function."""
    width, height = plot.width * s, plot.height * s
    font = FONT * s
    canvas.add(_text(x0 + width / 2, y0 + font, plot.title, font, "middle", "bold"))
    left, right, top, bottom = x0 + 44 * s, x0 + width - 8 * s, y0 + 2 * font, y0 + height - 2.6 * font

    def py(v: float) -> float:
        return bottom - (v - lo) / (hi - lo) * (bottom - top)

    stroke = f'stroke-width="{max(1.0, s):.1f}"'
    canvas.add(f'<rect x="{left:.1f}" y="{top:.1f}" width="{right - left:.1f}" height="{bottom - top:.1f}" '
               f'fill="none" stroke="#444" {stroke}/>')
    small = 0.85 * font
    for k in range(5):
        v = lo + (hi - lo) * k / 4
        canvas.add(f'<line x1="{left:.1f}" y1="{py(v):.1f}" x2="{right:.1f}" y2="{py(v):.1f}" stroke="#ddd" {stroke}/>')
        canvas.add(_text(left - 4 * s, py(v) + small / 3, _number(v), small, "end"))
    canvas.add(_text((left + right) / 2, bottom + small * 2.5, plot.x_label, small, "middle"))
    canvas.add(f'<text x="{x0 + small:.1f}" y="{(top + bottom) / 2:.1f}" font-size="{small:.1f}" '
               f'text-anchor="middle" transform="rotate(-90 {x0 + small:.1f} {(top + bottom) / 2:.1f})">'
               f'{escape(plot.y_label)}</text>')
    return left, right, top, bottom, py


def _bars(canvas: _Canvas, bars: Bars, x0: float, y0: float, s: float) -> tuple[float, float]:
    """Draw ``bars`` with its top left at ``(x0, y0)``: one ``rect`` per value, from 0 up (or
    down, for a negative value), its label under it."""
    values = [float(v) for v in bars.values]
    finite = [v for v in values if v == v]
    lo, hi = bars.y_range if bars.y_range else (min(0.0, *finite) if finite else 0.0,
                                                 max(0.0, *finite) if finite else 1.0)
    if hi <= lo:
        hi = lo + 1.0
    left, right, top, bottom, py = _frame(canvas, bars, x0, y0, s, lo, hi)
    slot = (right - left) / max(len(values), 1)
    small = 0.85 * FONT * s
    zero = py(min(max(0.0, lo), hi))
    for k, (label, v) in enumerate(zip(bars.labels, values)):
        colour = SERIES_COLOURS[k % len(SERIES_COLOURS)] if len(values) <= 4 else SERIES_COLOURS[0]
        x = left + slot * (k + 0.15)
        if v == v:
            end = py(min(max(v, lo), hi))
            canvas.add(f'<rect x="{x:.2f}" y="{min(end, zero):.2f}" width="{slot * 0.7:.2f}" '
                       f'height="{abs(zero - end):.2f}" fill="{colour}"/>')
        canvas.add(_text(left + slot * (k + 0.5), bottom + small * 1.2, label, small, "middle"))
    return plot_size(bars, s)


def _plot(canvas: _Canvas, plot: Plot, x0: float, y0: float, s: float) -> tuple[float, float]:
    """Draw ``plot`` with its top left at ``(x0, y0)``: title, axes, ticks, curves, legend."""
    width, height = plot.width * s, plot.height * s
    font = FONT * s
    curves = {label: plot.points(label) for label in plot.series}
    values = [v for _, ys in curves.values() for v in ys if v == v]
    lo, hi = plot.y_range if plot.y_range else (min(values, default=0.0), max(values, default=1.0))
    if hi <= lo:
        hi = lo + 1.0
    xs = list(plot.x)
    every_x = [v for cx, _ in curves.values() for v in cx if v == v] or xs
    x_lo, x_hi = (min(every_x), max(every_x)) if every_x else (0.0, 1.0)
    x_hi = x_hi if x_hi > x_lo else x_lo + 1.0
    left, right, top, bottom, py = _frame(canvas, plot, x0, y0, s, lo, hi)

    def px(v: float) -> float:
        return left + (v - x_lo) / (x_hi - x_lo) * (right - left)

    small = 0.85 * font
    if not xs or len(xs) > 12:  # no shared x, or too many to label: five even ticks
        xs = [x_lo + (x_hi - x_lo) * k / 4 for k in range(5)]
    ticks = plot.x_ticks or [_number(v) for v in xs]
    for v, label in zip(xs, ticks):
        canvas.add(_text(px(v), bottom + small * 1.2, label, small, "middle"))
    legend_y = y0 + height
    for k, (label, (cx, ys)) in enumerate(curves.items()):
        colour = SERIES_COLOURS[k % len(SERIES_COLOURS)]
        kept = [(a, b) for a, b in zip(cx, ys) if a == a and b == b]
        dots = label in plot.dots
        if not dots:
            points = " ".join(f"{px(a):.1f},{py(b):.1f}" for a, b in kept)
            canvas.add(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="{2 * s:.1f}"/>')
        if dots or len(kept) <= 30:  # markers where there are few points, or only markers
            for a, b in kept:
                canvas.add(f'<circle cx="{px(a):.1f}" cy="{py(b):.1f}" r="{2.5 * s:.1f}" fill="{colour}"/>')
        lx = x0 + (k % 2) * width / 2
        ly = legend_y + (k // 2 + 1) * font * 1.3
        if dots:
            canvas.add(f'<circle cx="{lx + 7 * s:.1f}" cy="{ly - small / 3:.1f}" r="{2.5 * s:.1f}" fill="{colour}"/>')
        else:
            canvas.add(f'<line x1="{lx:.1f}" y1="{ly - small / 3:.1f}" x2="{lx + 14 * s:.1f}" '
                       f'y2="{ly - small / 3:.1f}" stroke="{colour}" stroke-width="{2 * s:.1f}"/>')
        canvas.add(_text(lx + 18 * s, ly, label, small))
    return plot_size(plot, s)


def _chart(canvas: _Canvas, item: Plot | Bars, x0: float, y0: float, s: float) -> tuple[float, float]:
    """A plot or a bar chart, each by its own drawing."""
    return (_bars if isinstance(item, Bars) else _plot)(canvas, item, x0, y0, s)


def _document(canvas: _Canvas, width: float, height: float, standalone: bool = True) -> str:
    """The SVG element; ``standalone``: with the namespaces a file needs (inline SVG in HTML
    needs none, and then the page names no URL at all)."""
    names = ('xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" '
             if standalone else "")
    return (f'<svg {names}width="{math.ceil(width)}" height="{math.ceil(height)}" '
            f'viewBox="0 0 {math.ceil(width)} {math.ceil(height)}" font-family="{FONT_FAMILY}" fill="#111">'
            f'<rect width="100%" height="100%" fill="#fff"/>' + "".join(canvas.parts) + "</svg>")


def plot_svg(plot: Plot | Bars, scale: float = 1.0, standalone: bool = True) -> str:
    """``plot`` (or a bar chart) alone as an SVG document (``standalone=False``: for inlining
    into HTML)."""
    canvas = _Canvas()
    w, h = _chart(canvas, plot, MARGIN * scale, MARGIN * scale, scale)
    return _document(canvas, w + 2 * MARGIN * scale, h + 2 * MARGIN * scale, standalone)


def figure_svg(figure: Figure) -> str:
    """``figure`` as one SVG document (module docstring)."""
    s = figure.scale
    canvas = _Canvas()
    margin, font = MARGIN * s, FONT * s
    y = margin
    width = 0.0
    if figure.title:
        y += font * 1.3
        canvas.add(_text(margin, y, figure.title, font * 1.15, weight="bold"))
        y += font * 0.6
    for row in figure.rows:
        x, row_height = margin, 0.0
        for item in row:
            w, h = _chart(canvas, item, x, y, s)
            x += w + margin
            row_height = max(row_height, h)
        width = max(width, x)
        y += row_height + margin
    text_width = max(width - 2 * margin, 400 * s)
    for note in figure.notes:
        for line in wrap(note, text_width, font):
            y += font * 1.3
            canvas.add(_text(margin, y, line, font))
    if figure.notes:
        y += font * 0.6
    return _document(canvas, max(width, text_width + 2 * margin), y + margin)


def dimensions(svg: str) -> tuple[int, int]:
    """``(width, height)`` of an SVG written here."""
    import re

    match = re.search(r'<svg[^>]* width="(\d+)" height="(\d+)"', svg)
    if match is None:
        raise ValueError("not an SVG written by dmlviewer.core.figures")
    return int(match.group(1)), int(match.group(2))

