"""The report's pair figures as scenes (issue 39 item 4): every gallery entry (a failure, a
chosen pair, a pair the two models disagree on, a broken or fixed query) is built by
:func:`~dmlviewer.core.scene.build_scene`, the function behind the pair view, Export View and
``explain --figure``, and drawn by :mod:`dmlviewer.core.scene.draw` (matplotlib): a PNG in the
HTML, an SVG with text kept as text in ``--figures``. So the report's colour-bar numbers are
the explanation's grid cells (:func:`~dmlviewer.core.scene.levels.levels`), its colours the
one table's, and its match lines vectors.

What an entry shows, per pair: the overall maps of :data:`DISPLAY` (the positive part of the
decomposition, seed 000 Eq. 3, each map on its own colour bar) with the :data:`MATCHES`
strongest cell pairs, then the same pair with the query's strongest point
(:func:`~dmlviewer.core.figures.pair.strongest_points`) pinned: the reference pane shows that
point's partial map (its row of the point-to-point tensor) and its share of the similarity.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html import escape
from typing import Sequence

import numpy as np

from dmlviewer.core.figures.pair import strongest_points
from dmlviewer.core.scene import Row, RowSource, Scene, build_scene

#: the strongest cell pairs drawn on each pair's first row
MATCHES = 5
#: the report's display options (the pair view's names, :class:`~dmlviewer.core.display.DisplayOptions`)
DISPLAY = {"method": "decomposition", "sign": "positive", "scale": "map", "colormap": "jet", "opacity": 0.6,
           "row_b": "model", "shared_scale": False, "matches": True, "match_count": MATCHES}
#: the HTML's pictures (:func:`entry_html`)
JPEG_QUALITY = 92


@dataclass
class PairEntry:
    """One gallery entry: a title, the scene rows of its pairs and its note lines (HTML text;
    in the SVG under the rows)."""

    title: str
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def scene(self, text: bool = True) -> Scene:
        """The entry as one scene; ``text`` False: without the title and notes (the HTML prints
        them as text around the picture). Row names are made unique for the drawing."""
        rows = []
        for k, row in enumerate(self.rows, start=1):
            rows.append(Row(str(k), row.panes, row.matches, row.match_text, row.similarity_line))
        return Scene(rows, self.title if text else "", list(self.notes) if text else [], dict(DISPLAY))


def pair_rows(images: tuple[np.ndarray, np.ndarray], sources: Sequence[RowSource],
              captions: tuple[str, str], lead: str = "") -> list[Row]:
    """The rows of one pair (module docstring) for one or more models' explanations of it
    (``sources``; A first): the overall rows with the matches of the first, then the pinned
    rows of the first's strongest query point. ``lead`` names the pair in the match text."""
    overall = build_scene(DISPLAY, images, sources, captions)
    rows = list(overall.rows)
    for row in rows:
        if row.match_text and lead:
            row.match_text = f"{lead}: {row.match_text}"
        row.similarity_line = ""  # the entry's notes say it, with the pair named
    points = strongest_points(sources[0].explanation, 1)
    if points:
        _, x, y, _ = points[0]
        pinned = build_scene({**DISPLAY, "matches": False}, images, sources, captions, pinned=("query", x, y))
        for row in pinned.rows:
            row.similarity_line = ""
        rows.extend(pinned.rows)
    return rows


def entry_html(entry: PairEntry, anchor: str) -> str:
    """``entry`` as a ``<div class="figure">``: the title, one picture of its rows (drawn by
    matplotlib as PNG, embedded as JPEG of quality :data:`JPEG_QUALITY`: the photographs make a
    PNG about four times larger; a ``data:`` URI, nothing to fetch) and the notes as text."""
    import cv2

    from dmlviewer.core.figures.figure import data_uri
    from dmlviewer.core.scene.draw import figure_bytes

    pixels = cv2.imdecode(np.frombuffer(figure_bytes(entry.scene(text=False), "png"), np.uint8), cv2.IMREAD_COLOR)
    ok, data = cv2.imencode(".jpg", pixels, [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
    if not ok:
        raise ValueError(f"{anchor}: the figure could not be encoded as JPEG")
    height, width = pixels.shape[:2]
    alt = " / ".join(p.caption for row in entry.rows for p in row.panes)
    out = [f'<div class="figure" id="{escape(anchor)}">', f"<h3>{escape(entry.title)}</h3>",
           f'<img class="map" width="{width}" height="{height}" alt="{escape(alt)}" '
           f'src="{data_uri(data.tobytes(), "image/jpeg")}">']
    out.extend(f'<p class="note">{escape(note)}</p>' for note in entry.notes)
    out.append("</div>")
    return "".join(out)


def entry_svg(entry: PairEntry) -> str:
    """``entry`` as one SVG document (title, rows, notes; text kept as text)."""
    from dmlviewer.core.scene.draw import figure_bytes

    return figure_bytes(entry.scene(), "svg").decode("utf-8")
