"""The headless scene (issue 39 item 1): what every pane of the pair view shows, as data.

One function, :func:`build_scene`, turns the display options (``session.display``), the pinned
point (``session.pinned``) and each model row's explanation into a :class:`Scene`: per row its
two :class:`Pane` (photograph, overlay at grid resolution with its levels, colour map, opacity
and alpha ramp, the pinned point, guides, caption), its match lines and their shares, and its
similarity line. The screen's levels, Export View, the report and ``explain --figure`` read the
same numbers from it; :mod:`.draw` draws it with matplotlib. No Qt, no matplotlib here.

What a pane shows follows the pair view (``gui/pair/pair_view.py``): each row the overall map
of the method (``overall_grid``, seed 000 Eq. 2-3 for the decomposition), split by the sign;
*Shared scale*: one scale per side for all rows; the second row *Difference A − B*: A's part
minus B's, signed, on one symmetric scale over both images. With a pinned point ``(side, x, y)``
the pane opposite the pin shows the point's partial map (the bilinear blend of the tensor's
rows, :meth:`PairExplanation.partial_map`), on its own maximum (*Each map*) or on the whole
pair's scale (*Whole pair*, :func:`~dmlviewer.core.explain.hover.pair_scale`), as the hover
renderer colours it. *Matches* draws row A's strongest cell pairs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from dmlviewer.core.display import DisplayOptions
from dmlviewer.core.explain.matches import match_shares, match_shares_text
from dmlviewer.core.explain.methods import label as method_label, methods

from .colormaps import RAMP, shown_map
from .levels import levels, sign_part

SIDES = ("query", "reference")
#: Colours of the numbered matches (the pair view's markers).
MATCH_COLOURS = ("#e6194b", "#3cb44b", "#ffe119", "#4363d8", "#f58231", "#911eb4", "#42d4f4", "#f032e6",
                 "#bfef45", "#fabed4", "#469990", "#dcbeff", "#9a6324", "#fffac8", "#800000", "#aaffc3")


#: The pinned point's star: filled with this colour, edged black, above the match markers (the
#: pair view's panes and the figures).
PIN_COLOUR = "#ffeb3b"


class SceneError(ValueError):
    """A scene that cannot be built (the message names what is missing)."""


@dataclass
class Overlay:
    """A map over a photograph: ``data`` at grid resolution (already split by the sign), the
    values ``levels = (low, high)`` the colour map's ends stand for, in ``unit``; ``colormap``
    the table's name (:mod:`.colormaps`); ``signed`` picks the two-sided alpha ramp, ``ramp``
    and ``gamma`` its shape (:func:`.colormaps.alpha_ramp`). ``smooth``: the grid upsampled
    bilinearly, as the pair view draws it; False: drawn as its cells (the group tabs).
    ``cells``: a grid mask of cells outlined (the cells carrying most of a group's share),
    drawn at least ``cell_alpha`` opaque, as are the values above their weakest."""

    data: np.ndarray
    levels: tuple[float, float]
    colormap: str
    unit: str
    opacity: float
    signed: bool = False
    ramp: float = RAMP
    kind: str = "overall"  # "overall", "partial", "difference", "group"
    gamma: float = 1.0
    smooth: bool = True
    cells: np.ndarray | None = None
    cell_alpha: float = 0.0


@dataclass
class Guide:
    """A named line over a pane (orientation guides): image coordinates, its colour, dashed."""

    label: str
    xs: list[float]
    ys: list[float]
    colour: str
    dashed: bool = False


@dataclass
class Pane:
    """One image of a row: ``image`` (H x W x 3 uint8 RGB), its overlay (None: the photograph
    alone), ``point`` (the pinned point drawn here, image pixels), guides, caption, and a
    ``readout`` (the pinned point's share, printed beside the colour bar)."""

    side: str
    image: np.ndarray
    overlay: Overlay | None
    caption: str
    point: tuple[float, float] | None = None
    guides: list[Guide] = field(default_factory=list)
    readout: str = ""
    message: str = ""


@dataclass
class Match:
    """A matched cell pair: pixel centres on both images, its tensor entry and its share of
    the positive point-to-point total (:func:`~dmlviewer.core.explain.matches.match_shares`)."""

    query_xy: tuple[float, float]
    reference_xy: tuple[float, float]
    score: float
    share: float
    colour: str


@dataclass
class Row:
    """One model's row: its name ("A", "B"), two panes, matches, and the text under it."""

    name: str
    panes: tuple[Pane, Pane]
    matches: list[Match] = field(default_factory=list)
    match_text: str = ""
    similarity_line: str = ""


@dataclass
class Scene:
    """The whole view: rows, a title, notes (what could not be shown) and the options used."""

    rows: list[Row]
    title: str = ""
    notes: list[str] = field(default_factory=list)
    display: dict = field(default_factory=dict)


@dataclass
class RowSource:
    """What a row is made from: its name, its explanation (``PairExplanation``), a label for
    the captions (e.g. the checkpoint), optionally the tensor hovering shows instead of the
    point-to-point tensor (the occlusion interaction), and the row's own reference photograph
    with its caption (model B's top-1 beside A's, issue 41; None: the scene's reference)."""

    name: str
    explanation: Any
    label: str = ""
    tensor: np.ndarray | None = None
    reference: np.ndarray | None = None
    reference_caption: str | None = None


def map_unit(method: str) -> str:
    """What an overall map's values are (the colour bar's title)."""
    if method.startswith("decomposition"):
        return "similarity share per cell"
    return "similarity lost when hidden" if method == "occlusion" else "map value"


def similarity_split(expl) -> str:
    """The similarity as the sum of its point-to-point part and the three bias terms (seed 000
    Eq. 3), worded as the pair view's line, with the decomposition rule."""
    p2p = float(np.asarray(expl.point_to_point, dtype=np.float64).sum())
    rule = "exact decomposition" if expl.rule == "exact" else "first-order (Jacobian) decomposition"
    return (f"Similarity (cosine) {expl.similarity:+.4f} = point-to-point {p2p:+.4f} "
            f"+ query cells · reference bias {expl.bias_query:+.4f} "
            f"+ reference cells · query bias {expl.bias_reference:+.4f} + bias · bias {expl.bias_both:+.4f} "
            f"({rule})")


def pinned_side(pinned: tuple | None) -> tuple[int, float, float] | None:
    """``(side, x, y)`` with side 0 (query) or 1 (reference), from the session's pinned point
    (side 0/1 or "query"/"reference"); None when nothing is pinned."""
    if pinned is None:
        return None
    side, x, y = pinned
    if side in SIDES:
        side = SIDES.index(side)
    if side not in (0, 1):
        raise SceneError(f"pinned: side {side!r} is not 0, 1, 'query' or 'reference'")
    return int(side), float(x), float(y)


def _common(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two grid maps on one grid (the larger size each way, bilinear), for a difference."""
    if a.shape == b.shape:
        return a, b
    import cv2

    shape = (max(a.shape[0], b.shape[0]), max(a.shape[1], b.shape[1]))
    size = (shape[1], shape[0])
    return (cv2.resize(a, size, interpolation=cv2.INTER_LINEAR) if a.shape != shape else a,
            cv2.resize(b, size, interpolation=cv2.INTER_LINEAR) if b.shape != shape else b)


def difference_grids(a, b, method: str, sign: str) -> dict[str, np.ndarray]:
    """A's overall grid maps of ``method`` (split by ``sign``) minus B's, per side, on a
    common grid (*Difference A − B*)."""
    return {side: np.subtract(*_common(sign_part(a.overall_grid(method, side), sign),
                                       sign_part(b.overall_grid(method, side), sign))) for side in SIDES}


def overall_levels(explanations: Sequence[Any], method: str, sign: str, side: str | None = None,
                   difference: bool = False) -> tuple[float, float]:
    """The levels of the overall maps on screen and in figures: ``side``'s grid map of
    ``method`` over ``explanations`` (one row, or every row with *Shared scale*), or with
    ``difference`` A's minus B's (``explanations = [A, B]``) over both sides, symmetric."""
    if difference:
        return levels(list(difference_grids(explanations[0], explanations[1], method, sign).values()), "signed")
    return levels([sign_part(e.overall_grid(method, side), sign) for e in explanations], sign)


def _partial(source: RowSource, side: int, x: float, y: float) -> np.ndarray:
    """The other image's grid map of the point ``(x, y)`` on ``side`` from the row's hover
    tensor (the point-to-point tensor, or the one given)."""
    from dmlviewer.core.explain.grid import bilinear_weights

    e = source.explanation
    if source.tensor is None:
        return np.asarray(e.partial_map(SIDES[side], x, y), dtype=np.float32)
    t = np.asarray(source.tensor, dtype=np.float32)
    t = t.reshape(int(np.prod(e.grid_query)), int(np.prod(e.grid_reference)))
    rows = t if side == 0 else t.T
    shapes = (tuple(e.image_shape_query), tuple(e.image_shape_reference))
    grids = (tuple(e.grid_query), tuple(e.grid_reference))
    idx, wts = bilinear_weights(x, y, shapes[side], grids[side])
    out = np.zeros(rows.shape[1], np.float32)
    for i, w in zip(idx, wts):
        if w:
            out += np.float32(w) * rows[i]
    return out.reshape(grids[1 - side])


def build_scene(display: DisplayOptions | Mapping[str, Any], images: tuple[np.ndarray, np.ndarray],
                sources: Sequence[RowSource], captions: tuple[str, str] = ("Query", "Reference"),
                pinned: tuple | None = None, guides: Mapping[str, list[Guide]] | None = None,
                title: str = "") -> Scene:
    """The scene of the pair view (module docstring) for ``display`` (``DisplayOptions`` or its
    ``to_dict()``), the pair's ``images`` (query, reference; RGB uint8), one :class:`RowSource`
    per model row (A first), the pinned point ``(side, x, y)`` and the panes' ``guides``."""
    from dmlviewer.core.explain.hover import pair_scale

    options = display.to_dict() if hasattr(display, "to_dict") else dict(display)
    if not sources:
        raise SceneError("a scene needs at least one model row (A)")
    method, sign, scale = options["method"], options["sign"], options["scale"]
    own_references = any(s.reference is not None for s in sources)
    # A minus B is defined on one pair only: rows with their own references show their own maps
    difference = options.get("row_b") == "difference" and len(sources) > 1 and not own_references
    shared = bool(options.get("shared_scale")) and not difference and len(sources) > 1
    opacity, colormap = float(options["opacity"]), options["colormap"]
    pin = pinned_side(pinned)
    notes: list[str] = []
    compare_methods = methods("compare_row")
    shown = [s for k, s in enumerate(sources) if k == 0 or method in compare_methods]
    for s in sources[1:]:
        if s not in shown:
            notes.append(f"{method_label(method)} is shown for model A only: row {s.name} left out.")
    parts = [{side: sign_part(s.explanation.overall_grid(method, side), sign) for side in SIDES} for s in shown]
    # Partial maps of the pinned point, their renderer scales (None: each map its own maximum).
    partials: list[np.ndarray | None] = [None] * len(shown)
    pair_values: list[float | None] = [None] * len(shown)
    if pin is not None:
        side, x, y = pin
        for k, s in enumerate(shown):
            partials[k] = sign_part(_partial(s, side, x, y), sign)
            tensor = s.explanation.point_to_point if s.tensor is None else s.tensor
            pair_values[k] = pair_scale(tensor) if scale == "pair" else None
        if scale == "pair" and len(shown) > 1 and (shared or difference):
            pair_values = [max(pair_values)] * len(shown)
    unit = map_unit(method)
    rows: list[Row] = []
    for k, s in enumerate(shown):
        e = s.explanation
        prefix = f"{s.name}: " if len(shown) > 1 else ""
        panes = []
        diff_row = k > 0 and difference
        row_images = (images[0], images[1] if s.reference is None else s.reference)
        row_captions = (captions[0], captions[1] if s.reference_caption is None else s.reference_caption)
        if diff_row:
            diffs = difference_grids(shown[0].explanation, e, method, sign)
            diff_levels = overall_levels([shown[0].explanation, e], method, sign, difference=True)
        for j, side in enumerate(SIDES):
            caption = f"{prefix}{row_captions[j]} · {method_label(method)}"
            readout = ""
            if pin is not None and j != pin[0]:  # the pane opposite the pin: the point's partial map
                grid = partials[k]
                kind = "partial"
                unit_here = ("− " if sign == "negative" else "") + "contribution to the cosine"
                if diff_row:
                    grid = np.subtract(*_common(partials[0], partials[k]))
                    lv = levels(grid, "signed", scale, pair_values[k])
                    kind, unit_here = "difference", f"A − {s.name}, contribution to the cosine"
                elif shared and scale == "map":
                    lv = levels([p for p in partials if p is not None], sign)
                else:
                    lv = levels(grid, sign, scale, pair_values[k])
                lead = f"A − {s.name}: " if diff_row else prefix
                caption = f"{lead}{row_captions[j]} · partial map of the pinned {SIDES[pin[0]]} point"
                if not diff_row:
                    similarity = float(e.similarity)
                    raw = float(_partial(s, *pin).sum(dtype=np.float64))
                    if s.tensor is None and similarity != 0:
                        whose = f"{s.name}’s" if len(shown) > 1 else "the"
                        readout = f"{100.0 * raw / similarity:+.1f}% of {whose} similarity"
                signed = sign == "signed" or diff_row
            elif diff_row:
                grid, lv, kind = diffs[side], diff_levels, "difference"
                unit_here, signed = f"A − {s.name} {unit.replace('similarity ', '')}", True
                caption = f"A − {s.name}: {captions[j]} · {method_label(method)}"
            else:
                grid, kind, unit_here, signed = parts[k][side], "overall", unit, sign == "signed"
                lv = overall_levels([t.explanation for t in shown] if shared else [e], method, sign, side)
            if s.label:
                caption += f" ({s.label})"
            overlay = Overlay(np.asarray(grid, dtype=np.float32), lv, shown_map(colormap, signed), unit_here,
                              opacity, signed, RAMP, kind)
            message = "" if np.any(grid) else f"this map has no {sign} part"
            point = (pin[1], pin[2]) if pin is not None and pin[0] == j else None
            panes.append(Pane(side, row_images[j], overlay, caption, point, list((guides or {}).get(side, [])),
                              readout, message))
        row = Row(s.name, (panes[0], panes[1]), similarity_line=prefix + similarity_split(e))
        if k == 0 and options.get("matches"):
            found = e.correspondences(int(options.get("match_count", 8)))
            shares = match_shares(found, e.point_to_point)
            row.matches = [Match(tuple(m["query_xy"]), tuple(m["reference_xy"]), float(m["score"]), share,
                                 MATCH_COLOURS[n % len(MATCH_COLOURS)]) for n, (m, share) in enumerate(zip(found, shares))]
            row.match_text = prefix + match_shares_text(found, e.point_to_point, float(e.similarity))
        rows.append(row)
    return Scene(rows, title, notes, options)


def scene_from_session(session, images: tuple[np.ndarray, np.ndarray], sources: Sequence[RowSource],
                       captions: tuple[str, str] = ("Query", "Reference"),
                       guides: Mapping[str, list[Guide]] | None = None, title: str = "") -> Scene:
    """:func:`build_scene` from a :class:`~dmlviewer.core.session.Session`'s display options
    and pinned point."""
    return build_scene(session.display, images, sources, captions, session.pinned, guides, title)
