"""The scene of a group attention tab (issue 39): group ``p``'s decomposition map on both images
(its point-to-point tensor summed over the other image,
:func:`~dmlviewer.core.explain.groups.group_maps`), on one scale for every group of the pair as
the tab shows them (the grid cells' largest positive value, :func:`.levels.levels`), in the
tab's static overlay colours, with the group's share of the similarity (the dot product of the
group's slices of the normalized embeddings). Drawn by :mod:`.draw` like the pair view's."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .colormaps import RAMP, STATIC_OVERLAY
from .levels import levels, sign_part
from .scene import SIDES, Overlay, Pane, Row, Scene, SceneError

#: The group tabs' overlay opacity (the panes' default; the tabs have no opacity control).
GROUP_OPACITY = 0.6


def group_scene(expl, images: tuple[np.ndarray, np.ndarray], slices: Sequence[slice], group: int,
                captions: tuple[str, str] = ("Query", "Reference")) -> Scene:
    """Group ``group``'s tab as a scene (module docstring)."""
    from dmlviewer.core.explain.groups import group_maps

    if not 0 <= group < len(slices):
        raise SceneError(f"group {group} out of range: the model has {len(slices)} group(s)")
    maps = {side: sign_part(group_maps(expl, side), "positive") for side in SIDES}
    shared = levels(list(maps.values()), "positive")  # every group of the pair, both images
    panes = tuple(Pane(side, images[j], Overlay(maps[side][group], shared, STATIC_OVERLAY,
                                                 "similarity share per cell", GROUP_OPACITY, False, RAMP),
                       f"{captions[j]} · group {group + 1}") for j, side in enumerate(SIDES))
    eq, er = expl.embedding("query"), expl.embedding("reference")
    share = float(np.dot(eq[slices[group]], er[slices[group]]))
    total = float(expl.similarity)
    part = f" ({share / total:.1%} of it)" if abs(total) > 1e-12 else ""
    p2p = float(expl.group_point_to_point(group).sum(dtype=np.float64))
    note = (f"Group {group + 1} of {len(slices)}: contributes {share:+.4f} to the similarity {total:+.4f}{part}; "
            f"its point-to-point terms sum to {p2p:+.4f}.")
    return Scene([Row("A", panes)], f"Group {group + 1} · decomposition maps", [note])
