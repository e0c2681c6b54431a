"""A :class:`~.scene.Scene` drawn by matplotlib (issue 39 item 3): one figure to PNG, SVG and PDF.

matplotlib is imported here only, on use (``draw`` and ``write``), never at import time of the
scene or the colour table; no pyplot, so nothing global but the rc values of one
``rc_context`` while a figure is drawn and saved (text kept as text in SVG, TrueType fonts
embedded in PDF, a fixed hash salt so two drawings of one scene name their parts alike).

Layout, in points (1/72 in), the same at every scale: a row per model, two panes side by side
(216 pt wide, a tall image narrower so that a pane is at most 270 pt high): the photograph with
its overlay composited at the output's pixel density, the colour bar under it from a
``Normalize`` over the overlay's levels, whose end ticks are the levels themselves, and the
caption broken between words by the font's real text widths; then the match text, the
similarity lines and the notes. Match lines, markers, the pinned point, the guides and the
outlines of a group map's cells are vectors. The overlay: the grid data upsampled bilinearly
(the alignment of :func:`~dmlviewer.core.explain.grid.upsample`, as on screen), or as blocks of
cells for a group map, to the pane's pixel size, coloured through the core table with its alpha
ramp (and the outlined cells' least alpha) times the opacity over the photograph, embedded
with ``interpolation="none"`` (unresampled in SVG and PDF). Pixel density: ``100 * scale``
pixels per inch in a PNG; ``max(300, 100 * scale)`` in SVG and PDF, so maps are sharp when
printed at 300 dpi. Only pixels change with the scale; the text and its places do not.
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
from pathlib import Path
from typing import Iterator

import numpy as np

from .colormaps import colour_index, lift_alpha, overlay_lut, rgb
from .scene import PIN_COLOUR, Overlay, Pane, Scene

log = logging.getLogger(__name__)

#: Sizes in points.
PANE_WIDTH = 216.0
#: A tall image is drawn narrower, so that no pane is higher than this.
PANE_HEIGHT = 270.0
PANE_GAP = 14.0
MARGIN = 10.0
BAR_HEIGHT = 7.0
FONT = 8.0
SMALL = 7.0
TITLE = 10.0
LINE = 1.3  # line height, times the font size
FONT_FAMILY = "DejaVu Sans"
#: Pixels per inch of a PNG at scale 1, and the least in SVG and PDF.
PNG_PPI = 100
PRINT_PPI = 300
FORMATS = (".png", ".svg", ".pdf")
RC = {"svg.fonttype": "none", "pdf.fonttype": 42, "svg.hashsalt": "dmlviewer", "font.family": FONT_FAMILY,
      "font.size": FONT, "axes.linewidth": 0.5, "xtick.major.width": 0.5, "xtick.major.size": 2.5}


def level_text(value: float) -> str:
    """A colour bar's end value as printed (3 significant digits)."""
    return f"{value:.3g}"


def ppi(scale: float, vector: bool) -> float:
    """Pixels per inch of the maps (module docstring)."""
    return max(PRINT_PPI, PNG_PPI * scale) if vector else PNG_PPI * scale


class _Measure:
    """Text widths in points from matplotlib's own font metrics (Agg at 72 dpi)."""

    def __init__(self) -> None:
        from matplotlib.backends.backend_agg import RendererAgg
        from matplotlib.font_manager import FontProperties

        self.renderer = RendererAgg(8, 8, 72)
        self.props = {size: FontProperties(family=FONT_FAMILY, size=size) for size in (FONT, SMALL, TITLE)}

    def width(self, text: str, size: float) -> float:
        w, _, _ = self.renderer.get_text_width_height_descent(text, self.props[size], ismath=False)
        return float(w)

    def wrap(self, text: str, width: float, size: float) -> list[str]:
        """``text`` in lines of at most ``width`` points, broken between words only (a word
        longer than a line stays whole on its own line)."""
        lines: list[str] = []
        for paragraph in text.split("\n"):
            line = ""
            for word in paragraph.split():
                trial = f"{line} {word}" if line else word
                if line and self.width(trial, size) > width:
                    lines.append(line)
                    line = word
                else:
                    line = trial
            lines.append(line)
        return lines


def upsampled(overlay: Overlay, size: tuple[int, int]) -> np.ndarray:
    """The overlay's grid data at ``size = (height, width)``: bilinear (the alignment of
    :func:`~dmlviewer.core.explain.grid.upsample`, as the pair view), or each cell a block of
    pixels (``smooth`` False: a grid stretched over the photograph, as the group tabs)."""
    if overlay.smooth:
        from dmlviewer.core.explain.grid import upsample

        return upsample(overlay.data, size)
    import cv2

    return cv2.resize(np.asarray(overlay.data, np.float32), (size[1], size[0]), interpolation=cv2.INTER_NEAREST)


def overlay_colours(overlay: Overlay) -> np.ndarray:
    """The overlay's 256 x 4 RGBA table: its colours and alpha ramp, the entries from its
    weakest outlined cell's on at least ``cell_alpha`` opaque (:func:`.colormaps.lift_alpha`)."""
    lut = overlay_lut(overlay.colormap, overlay.signed, overlay.ramp, overlay.gamma)
    cells = overlay.cells
    if cells is not None and np.any(cells) and overlay.cell_alpha > 0:
        weakest = np.asarray(overlay.data, np.float32)[np.asarray(cells, bool)].min()
        lut = lift_alpha(lut, int(colour_index(weakest, overlay.levels)), overlay.cell_alpha)
    return lut


def cell_outline(cells: np.ndarray, shape: tuple[int, int]) -> list[tuple[tuple[float, float], tuple[float, float]]]:
    """Segments (image pixels) of the boundary of the True cells of a grid mask stretched over
    an image of ``shape = (height, width)``: the outline of each region of adjacent cells."""
    mask = np.pad(np.asarray(cells, bool), 1)
    gh, gw = mask.shape[0] - 2, mask.shape[1] - 2
    sy, sx = shape[0] / gh, shape[1] / gw
    segments = []
    for i, j in zip(*np.nonzero(mask[1:-1, 1:-1])):
        y0, y1, x0, x1 = i * sy, (i + 1) * sy, j * sx, (j + 1) * sx
        if not mask[i, j + 1]:
            segments.append(((x0, y0), (x1, y0)))
        if not mask[i + 2, j + 1]:
            segments.append(((x0, y1), (x1, y1)))
        if not mask[i + 1, j]:
            segments.append(((x0, y0), (x0, y1)))
        if not mask[i + 1, j + 2]:
            segments.append(((x1, y0), (x1, y1)))
    return segments


def composite(pane: Pane, size: tuple[int, int]) -> np.ndarray:
    """The pane's photograph at ``size = (height, width)`` pixels with its overlay blended over
    it: the grid data upsampled (:func:`upsampled`), coloured by the table, alpha = ramp x
    opacity."""
    import cv2

    h, w = size
    image = np.asarray(pane.image)
    if image.ndim == 2:
        image = np.repeat(image[..., None], 3, axis=2)
    image = image[..., :3]
    shrink = w < image.shape[1]
    base = cv2.resize(image, (w, h), interpolation=cv2.INTER_AREA if shrink else cv2.INTER_CUBIC).astype(np.float32)
    overlay: Overlay | None = pane.overlay
    if overlay is None:
        return base.astype(np.uint8)
    colours = overlay_colours(overlay)[colour_index(upsampled(overlay, (h, w)), overlay.levels)]
    alpha = colours[..., 3:4].astype(np.float32) / 255.0 * float(overlay.opacity)
    out = base * (1.0 - alpha) + colours[..., :3].astype(np.float32) * alpha
    return np.clip(out + 0.5, 0, 255).astype(np.uint8)


@contextlib.contextmanager
def _rc() -> Iterator[None]:
    import matplotlib

    with matplotlib.rc_context(RC):
        yield


def draw(scene: Scene, scale: float = 1.0, vector: bool = False):
    """The scene as a ``matplotlib.figure.Figure`` (module docstring); ``vector``: the maps at
    the SVG/PDF pixel density."""
    with _rc():
        return _draw(scene, scale, vector)


def _draw(scene: Scene, scale: float, vector: bool):
    from matplotlib.colorbar import Colorbar
    from matplotlib.colors import ListedColormap, Normalize
    from matplotlib.figure import Figure
    from matplotlib.patches import ConnectionPatch

    measure = _Measure()
    width = math.ceil((2 * MARGIN + 2 * PANE_WIDTH + PANE_GAP) / (72.0 / PNG_PPI)) * (72.0 / PNG_PPI)
    text_width = width - 2 * MARGIN
    items: list = []  # (kind, args) placed from the top, in points
    y = MARGIN
    if scene.title:
        for line in measure.wrap(scene.title, text_width, TITLE):
            y += TITLE * LINE
            items.append(("text", MARGIN, y, line, TITLE, "bold", None))
        y += 4
    density = ppi(scale, vector)
    panes_at = []
    for row in scene.rows:
        bottom = y
        for j, pane in enumerate(row.panes):
            x = MARGIN + j * (PANE_WIDTH + PANE_GAP)
            h, w = pane.image.shape[:2]
            height = min(PANE_WIDTH * h / w, PANE_HEIGHT)
            pane_width = height * w / h
            panes_at.append((row, pane, x, y, pane_width, height))
            cursor = y + height
            if pane.overlay is not None:
                cursor += 3
                items.append(("bar", x, cursor, pane_width, pane.overlay, row.name, pane.side))
                cursor += BAR_HEIGHT + SMALL * LINE * 2 + 2
            for text, size in ((pane.caption, FONT), (pane.readout, FONT), (pane.message, SMALL)):
                for line in measure.wrap(text, PANE_WIDTH, size) if text else []:
                    cursor += size * LINE
                    items.append(("text", x, cursor, line, size, "normal", f"caption {row.name} {pane.side}"))
            bottom = max(bottom, cursor)
        y = bottom + 8
    notes = [t for row in scene.rows for t in (row.match_text, row.similarity_line) if t] + list(scene.notes)
    for note in notes:
        for line in measure.wrap(note, text_width, FONT):
            y += FONT * LINE
            items.append(("text", MARGIN, y, line, FONT, "normal", "note"))
    # whole pixels at scale 1, so a K-times figure has exactly K times the pixels
    unit = 72.0 / PNG_PPI
    height_total = math.ceil((y + MARGIN) / unit) * unit
    fig = Figure(figsize=(width / 72.0, height_total / 72.0), dpi=72)
    fig.patch.set_facecolor("white")

    def box(x: float, top: float, w: float, h: float) -> list[float]:
        return [x / width, 1.0 - (top + h) / height_total, w / width, h / height_total]

    axes = {}
    for row, pane, x, top, pane_width, h in panes_at:
        ax = fig.add_axes(box(x, top, pane_width, h))
        ax.set_gid(f"pane {row.name} {pane.side}")
        ih, iw = pane.image.shape[:2]
        pixels = (max(1, round(h / 72.0 * density)), max(1, round(pane_width / 72.0 * density)))
        ax.imshow(composite(pane, pixels), extent=(0, iw, ih, 0), interpolation="none", aspect="auto")
        ax.set_xlim(0, iw)
        ax.set_ylim(ih, 0)
        ax.set_axis_off()
        if pane.overlay is not None and pane.overlay.cells is not None and np.any(pane.overlay.cells):
            from matplotlib.collections import LineCollection

            outline = LineCollection(cell_outline(pane.overlay.cells, (ih, iw)), colors="white", linewidths=1.2,
                                     capstyle="projecting")
            outline.set_gid(f"cells {row.name} {pane.side}")
            ax.add_collection(outline)
        for guide in pane.guides:
            ax.plot(guide.xs, guide.ys, color=guide.colour, lw=1.2, ls="--" if guide.dashed else "-",
                    label=guide.label)
        if pane.point is not None:
            ax.plot([pane.point[0] + 0.5], [pane.point[1] + 0.5], marker="*", ms=12, mfc=PIN_COLOUR, mec="black",
                    mew=0.8, ls="none", gid=f"pinned {row.name} {pane.side}", zorder=5)  # above the matches
        axes[(row.name, pane.side)] = ax
    for row in scene.rows:
        q, r = axes.get((row.name, "query")), axes.get((row.name, "reference"))
        top = max((m.score for m in row.matches), default=0.0)
        for n, m in enumerate(row.matches):
            strength = m.score / top if top > 0 else 1.0
            a = (m.query_xy[0] + 0.5, m.query_xy[1] + 0.5)
            b = (m.reference_xy[0] + 0.5, m.reference_xy[1] + 0.5)
            line = ConnectionPatch(xyA=a, coordsA=q.transData, xyB=b, coordsB=r.transData, color=m.colour,
                                   lw=0.6 + 1.4 * strength, alpha=0.25 + 0.75 * strength)
            line.set_gid(f"match {row.name} {n + 1}")
            fig.add_artist(line)
            for ax, xy in ((q, a), (r, b)):
                ax.plot([xy[0]], [xy[1]], marker="o", ms=5, mfc=m.colour, mec="black", mew=0.6, ls="none")
                ax.annotate(str(n + 1), xy, xytext=(3, 3), textcoords="offset points", fontsize=SMALL,
                            color="white", bbox={"boxstyle": "square,pad=0.1", "fc": "black", "alpha": 0.6,
                                                 "lw": 0})
    for item in items:
        if item[0] == "text":
            _, x, base, line, size, weight, gid = item
            t = fig.text(x / width, 1.0 - base / height_total, line, fontsize=size, fontweight=weight,
                         ha="left", va="baseline")
            if gid:
                t.set_gid(gid)
            continue
        _, x, top, bar_width, overlay, name, side = item
        cax = fig.add_axes(box(x, top, bar_width, BAR_HEIGHT))
        cax.set_gid(f"colorbar {name} {side}")
        low, high = overlay.levels
        cmap = ListedColormap(rgb(overlay.colormap) / 255.0)
        from matplotlib.cm import ScalarMappable

        bar = Colorbar(cax, ScalarMappable(Normalize(low, high), cmap), orientation="horizontal")
        ticks = [low, 0.0, high] if low < 0 < high else [low, high]
        bar.set_ticks(ticks, labels=[level_text(v) for v in ticks])
        cax.tick_params(labelsize=SMALL, length=2.5, pad=1.5)
        labels = cax.get_xticklabels()
        labels[0].set_horizontalalignment("left")
        labels[-1].set_horizontalalignment("right")
        bar.set_label(overlay.unit, fontsize=SMALL, labelpad=1.0)
        bar.outline.set_linewidth(0.5)
    return fig


def figure_bytes(scene: Scene, fmt: str, scale: float = 1.0) -> bytes:
    """The scene as PNG, SVG or PDF bytes (``fmt``: "png", "svg" or "pdf")."""
    fmt = fmt.lower().lstrip(".")
    if f".{fmt}" not in FORMATS:
        raise ValueError(f"figure: .{fmt} is not one of {', '.join(FORMATS)}")
    vector = fmt != "png"
    metadata = {"png": {"Software": None}, "svg": {"Date": None, "Creator": None},
                "pdf": {"CreationDate": None, "Creator": None, "Producer": None}}[fmt]
    with _rc():
        fig = _draw(scene, scale, vector)
        buffer = io.BytesIO()
        fig.savefig(buffer, format=fmt, dpi=PNG_PPI * scale if not vector else 72, metadata=metadata,
                    facecolor="white")
    return buffer.getvalue()


def write_job(scene: Scene, path: str | Path, scale: float = 1.0, *, source: bool = False,
              also: tuple[str, ...] = (), cancel=None) -> Iterator:
    """Export View's job (issue 39): write the scene as ``path``'s format (:func:`write`), its
    figure source beside it with ``source`` (:func:`.source.write_source`), and draw it also in
    the formats ``also`` (e.g. ``("png", "svg")`` for the clipboard), checking ``cancel``
    between drawings. A generator of :class:`~dmlviewer.core.progress.Progress` events, run in
    a job thread so that the app stays responsive while matplotlib draws; its result is
    ``{"path": Path, "<fmt>": bytes for each of also}``."""
    from dmlviewer.core.files import write_bytes_atomic
    from dmlviewer.core.progress import Progress

    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    if f".{fmt}" not in FORMATS:
        raise ValueError(f"{path.name}: export as {', '.join(FORMATS)}")
    extra = [f for f in dict.fromkeys(a.lower().lstrip(".") for a in also) if f != fmt]
    total = 1 + bool(source) + len(extra)
    yield Progress("step", 0, total, f"drawing {path.name}")
    drawn = {fmt: figure_bytes(scene, fmt, scale)}
    if cancel is not None:
        cancel.raise_if_cancelled()
    write_bytes_atomic(path, drawn[fmt])
    done = 1
    yield Progress("step", done, total, f"wrote {path}")
    if source:
        from .source import write_source

        write_source(scene, path)
        done += 1
        yield Progress("step", done, total, f"wrote {path.with_suffix('.npz').name} and {path.with_suffix('.py').name}")
    for other in extra:
        if cancel is not None:
            cancel.raise_if_cancelled()
        drawn[other] = figure_bytes(scene, other, scale)
        done += 1
        yield Progress("step", done, total, f"drew the {other.upper()} to copy")
    result = {"path": path, **{f: drawn[f] for f in dict.fromkeys(a.lower().lstrip(".") for a in also)}}
    yield Progress("done", total, total, f"exported {path.name}", data={"result": result})


def write(scene: Scene, path: str | Path, scale: float = 1.0) -> Path:
    """Write the scene as ``path``'s format (.png, .svg, .pdf), atomically (a temporary file in
    the same folder, then renamed)."""
    from dmlviewer.core.files import write_bytes_atomic

    path = Path(path)
    data = figure_bytes(scene, path.suffix, scale)
    write_bytes_atomic(path, data)
    return path
