"""Per-group maps of an explained pair, and how different the groups' maps are.

A grouping head's embedding is the concatenation of P group embeddings, so every
point-to-point term splits over the groups (``PairExplanation.group_point_to_point``; seed 000
Eq. 3 restricted to a group's slice, divided by the whole embeddings' norms, so the groups'
tensors sum to the whole tensor). A group's *decomposition map* on one image is its tensor summed
over the other image's positions: where that image supports the group's share of the similarity.
It is exact, unlike a spatial proxy such as a channel-attention group's strongest channel.
"""

from __future__ import annotations

import numpy as np


def group_maps(pair, side: str) -> np.ndarray:
    """``P x h x w``: each group's decomposition map on ``side``'s grid, the group's
    point-to-point tensor summed over the other image (seed 000 Eq. 3 restricted to the group's
    slice of the embedding; the maps of all groups sum to the Decomposition map)."""
    axis = 1 if side == "query" else 0
    grid = pair.grid_query if side == "query" else pair.grid_reference
    return np.stack([pair.group_point_to_point(p).sum(axis=axis).reshape(grid) for p in range(pair.num_groups)])


#: The part of a map's positive share whose cells :func:`concentration` finds (the group tab
#: outlines them and says how many they are).
CONCENTRATION = 0.8


def concentration(grid_map: np.ndarray, fraction: float = CONCENTRATION) -> np.ndarray:
    """Boolean mask (the grid's shape) of the fewest cells of ``grid_map`` whose positive values
    sum to at least ``fraction`` of the map's positive part, strongest first. Global max
    pooling puts a group's share on a few cells (its maxima): "80 % in 3 of 256 cells" says
    where a sparse map is, which a colour scale alone hides (issue 42 item 6). All False when
    nothing is positive."""
    grid_map = np.asarray(grid_map, dtype=np.float64)
    values = np.maximum(grid_map, 0.0).ravel()
    mask = np.zeros(values.shape, dtype=bool)
    total = float(values.sum())
    if not total > 0.0:
        return mask.reshape(grid_map.shape)
    order = np.argsort(-values, kind="stable")
    cumulative = np.cumsum(values[order])
    count = int(np.searchsorted(cumulative, fraction * total * (1.0 - 1e-12))) + 1  # rounding tolerated
    mask[order[:min(count, values.size)]] = True
    return mask.reshape(grid_map.shape)


def concentration_text(cells: list[np.ndarray], names: tuple[str, ...] = ("query", "reference")) -> str:
    """How concentrated a group's map is on each image, from the grid (``cells``: per side, the
    mask of :func:`concentration`), as the group tab and its export say it: "80 % of its
    positive share on 3 of 256 query cells and 5 of 256 reference cells (outlined)."."""
    parts = [f"{int(mask.sum())} of {mask.size} {name} cells" if mask.any() else f"no {name} cell (nothing positive)"
             for mask, name in zip(cells, names)]
    return f"{100 * CONCENTRATION:.0f} % of its positive share on {' and '.join(parts)} (outlined)."


def group_diversity(pair) -> list[float]:
    """Per side of ``pair``, the mean over group pairs of ``1 - cos`` between the positive parts
    of the groups' decomposition maps (see the module docstring); sides where fewer than two
    groups have a positive part are left out."""
    out = []
    for side in ("query", "reference"):
        maps = np.maximum(group_maps(pair, side), 0.0).reshape(pair.num_groups, -1).astype(np.float64)
        norms = np.linalg.norm(maps, axis=1)
        keep = norms > 0
        if keep.sum() < 2:
            continue
        unit = maps[keep] / norms[keep, None]
        cos = unit @ unit.T
        upper = np.triu_indices(len(unit), 1)
        out.append(float(np.mean(1.0 - cos[upper])))
    return out
