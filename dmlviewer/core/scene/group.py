"""The scene of a group attention tab (issue 39): group ``p``'s decomposition map on both images
(its point-to-point tensor summed over the other image,
:func:`~dmlviewer.core.explain.groups.group_maps`), drawn as the tab draws it (issue 42 item 6):
the grid's own cells (not upsampled), on one scale for every group of the pair (the cells'
largest positive value, :func:`.levels.levels`), in the static overlay colours with the sparse
maps' alpha ramp (:data:`SPARSE_RAMP`, :data:`SPARSE_GAMMA`) at :data:`GROUP_OPACITY`, the
cells that carry :data:`~dmlviewer.core.explain.groups.CONCENTRATION` of the group's positive
share outlined and at least :data:`CELL_ALPHA` opaque, the group's share of the similarity (the
dot product of the group's slices of the normalized embeddings) and the concentration line.
The tab (``gui/pair/group_tabs.py``) reads these constants. Drawn by :mod:`.draw` like the pair
view's."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .colormaps import STATIC_OVERLAY
from .levels import levels, sign_part
from .scene import SIDES, Overlay, Pane, Row, Scene, SceneError

#: The group tabs' overlay opacity: a sparse map's few cells stand out (the rest of its table is
#: nearly transparent, so the photograph stays seen around them).
GROUP_OPACITY = 0.85
#: The group decomposition's alpha ramp: rising as the square root of the value, opaque from
#: 44 % of the scale, so that the few cells a sparse map puts its share on are seen and weak
#: cells read as a tint.
SPARSE_RAMP = 1.5
SPARSE_GAMMA = 0.5
#: Least alpha (before the opacity) of the cells that carry most of a group's positive share.
CELL_ALPHA = 0.6


def group_scene(expl, images: tuple[np.ndarray, np.ndarray], slices: Sequence[slice], group: int,
                captions: tuple[str, str] = ("Query", "Reference")) -> Scene:
    """Group ``group``'s tab as a scene (module docstring)."""
    from dmlviewer.core.explain.groups import concentration, concentration_text, group_maps

    if not 0 <= group < len(slices):
        raise SceneError(f"group {group} out of range: the model has {len(slices)} group(s)")
    maps = {side: sign_part(group_maps(expl, side), "positive") for side in SIDES}
    shared = levels(list(maps.values()), "positive")  # every group of the pair, both images
    cells = {side: concentration(maps[side][group]) for side in SIDES}
    panes = tuple(Pane(side, images[j],
                       Overlay(maps[side][group], shared, STATIC_OVERLAY, "similarity share per cell", GROUP_OPACITY,
                               False, SPARSE_RAMP, "group", SPARSE_GAMMA, smooth=False, cells=cells[side],
                               cell_alpha=CELL_ALPHA),
                       f"{captions[j]} · group {group + 1}") for j, side in enumerate(SIDES))
    eq, er = expl.embedding("query"), expl.embedding("reference")
    share = float(np.dot(eq[slices[group]], er[slices[group]]))
    total = float(expl.similarity)
    part = f" ({share / total:.1%} of it)" if abs(total) > 1e-12 else ""
    p2p = float(expl.group_point_to_point(group).sum(dtype=np.float64))
    note = (f"Group {group + 1} of {len(slices)}: contributes {share:+.4f} to the similarity {total:+.4f}{part}; "
            f"its point-to-point terms sum to {p2p:+.4f}. {concentration_text([cells[s] for s in SIDES], SIDES)}")
    return Scene([Row("A", panes)], f"Group {group + 1} · decomposition maps", [note])
