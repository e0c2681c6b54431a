"""A figure's source (issue 39 item 3): beside an exported figure, a ``.npz`` of the scene's
arrays and a short standalone ``.py`` that redraws it with matplotlib from them, so an author
can restyle the figure for a paper without dmlviewer.

The npz holds, per pane ``r{row}_{side}_``: ``image`` (the photograph, RGB uint8), ``overlay``
(the map at grid resolution), ``levels`` (what the colour map's ends stand for), ``rgb`` (the
256 colours of its map), ``alpha`` (the 256-entry alpha ramp), ``opacity``, ``point`` (the
pinned point or NaNs), ``caption``, ``unit``; per row ``r{row}_matches`` (``n x 5``: query x, y,
reference x, y, share of the positive total); and ``notes``, ``title``, ``rows``. The script
reads nothing else.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .colormaps import alpha_ramp, rgb
from .scene import PIN_COLOUR, Scene

SCRIPT = '''"""Redraws {name} from {npz} with matplotlib (written by dmlviewer; edit freely).

    python {script} [OUT.png|.svg|.pdf]
"""
import sys
from pathlib import Path

import numpy as np
from matplotlib.colors import ListedColormap, Normalize
from matplotlib.figure import Figure
from matplotlib.patches import ConnectionPatch
from matplotlib.cm import ScalarMappable

data = np.load(Path(__file__).with_name("{npz}"))
rows = int(data["rows"])
notes = "\\n".join(str(n) for n in data["notes"])
fig = Figure(figsize=(7.0, 3.6 * rows + 0.45 * len(data["notes"])), layout="constrained")
cells = fig.add_gridspec(rows + 1, 2, height_ratios=[3.6] * rows + [0.45 * len(data["notes"]) or 0.1])
axes = [[fig.add_subplot(cells[r, j]) for j in range(2)] for r in range(rows)]
for r in range(rows):
    for j, side in enumerate(("query", "reference")):
        key, ax = f"r{{r}}_{{side}}_", axes[r][j]
        image = data[key + "image"]
        h, w = image.shape[:2]
        ax.imshow(image, extent=(0, w, h, 0))
        low, high = data[key + "levels"]
        cmap = ListedColormap(data[key + "rgb"] / 255.0)
        grid = data[key + "overlay"]
        index = np.clip((grid - low) / (high - low) * 255.0, 0, 255).astype(np.uint8) if high > low else 0 * grid
        rgba = np.concatenate([data[key + "rgb"][index] / 255.0,
                               data[key + "alpha"][index][..., None] / 255.0 * float(data[key + "opacity"])], axis=-1)
        ax.imshow(rgba, extent=(0, w, h, 0), interpolation="bilinear")
        point = data[key + "point"]
        if np.all(np.isfinite(point)):
            ax.plot([point[0] + 0.5], [point[1] + 0.5], marker="*", ms=12, mfc="{pin}", mec="black", ls="none",
                    zorder=5)
        ax.set_axis_off()
        bar = fig.colorbar(ScalarMappable(Normalize(low, high), cmap), ax=ax, orientation="horizontal",
                           fraction=0.05, pad=0.02)
        bar.set_ticks([low, high], labels=[f"{{low:.3g}}", f"{{high:.3g}}"])
        bar.ax.tick_params(labelsize=7)
        bar.set_label(str(data[key + "unit"]), fontsize=7)
        ax.set_title(str(data[key + "caption"]), fontsize=8, wrap=True)
    for n, (qx, qy, rx, ry, share) in enumerate(data[f"r{{r}}_matches"]):
        fig.add_artist(ConnectionPatch((qx + 0.5, qy + 0.5), (rx + 0.5, ry + 0.5), "data", "data",
                                       axesA=axes[r][0], axesB=axes[r][1], color=f"C{{n % 10}}", lw=1.2))
fig.suptitle(str(data["title"]))
text = fig.add_subplot(cells[rows, :])
text.set_axis_off()
text.text(0.0, 1.0, notes, fontsize=7, va="top", wrap=True, transform=text.transAxes)
fig.savefig(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).with_suffix(".png"), dpi=200)
'''


def source_arrays(scene: Scene) -> dict[str, np.ndarray]:
    """The npz's arrays (module docstring)."""
    out: dict[str, np.ndarray] = {"rows": np.array(len(scene.rows)), "title": np.array(scene.title)}
    notes = [t for row in scene.rows for t in (row.match_text, row.similarity_line) if t] + list(scene.notes)
    out["notes"] = np.array(notes, dtype=str)
    for r, row in enumerate(scene.rows):
        for pane in row.panes:
            key, o = f"r{r}_{pane.side}_", pane.overlay
            out[key + "image"] = np.asarray(pane.image, dtype=np.uint8)
            out[key + "overlay"] = np.asarray(o.data, dtype=np.float32)
            out[key + "levels"] = np.asarray(o.levels, dtype=np.float64)
            out[key + "rgb"] = np.array(rgb(o.colormap))
            out[key + "alpha"] = alpha_ramp(o.signed, o.ramp, o.gamma)
            out[key + "opacity"] = np.float64(o.opacity)
            out[key + "point"] = np.asarray(pane.point if pane.point is not None else (np.nan, np.nan), np.float64)
            out[key + "caption"] = np.array(" ".join(t for t in (pane.caption, pane.readout) if t))
            out[key + "unit"] = np.array(o.unit)
        out[f"r{r}_matches"] = np.array([(*m.query_xy, *m.reference_xy, m.share) for m in row.matches],
                                        dtype=np.float64).reshape(-1, 5)
    return out


def write_source(scene: Scene, figure: str | Path) -> tuple[Path, Path]:
    """``FIGURE.npz`` and ``FIGURE.py`` beside ``figure`` (atomically each); returns both."""
    import io

    from dmlviewer.core.files import write_bytes_atomic, write_text_atomic

    figure = Path(figure)
    npz, script = figure.with_suffix(".npz"), figure.with_suffix(".py")
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **source_arrays(scene))
    write_bytes_atomic(npz, buffer.getvalue())
    write_text_atomic(script, SCRIPT.format(name=figure.name, npz=npz.name, script=script.name, pin=PIN_COLOUR))
    return npz, script
