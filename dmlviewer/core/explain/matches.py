"""Top point-to-point matches between two images, for drawing lines between them (seed 000 Sec. 5.3).

A match is a peak of the point-to-point tensor: the largest remaining entry ``P[a, b]`` gives
query cell ``a`` and reference cell ``b`` (so ``b`` is the peak of ``a``'s partial map); then
every query cell within ``radius`` cells of ``a`` (Chebyshev distance) and every reference cell
within ``radius`` of ``b`` is suppressed, so matches are spread over both images. Only
positive entries are matches.

The viewer uses ``MATCH_RADIUS = 0``: each cell is matched at most once (a greedy one-to-one
matching of the cells). With radius 1 the 3 x 3 blocks around the first three or four matches
used up a small object's cells and the remaining matches were drawn on the background (on the
demo, 31 % of the top 8 joined object parts with radius 1, 69 % with radius 0).
"""

from __future__ import annotations

import numpy as np

#: Suppression radius of the matches the viewer draws (see the module docstring).
MATCH_RADIUS = 0

from dmlviewer.core.explain.grid import grid_to_pixel


def _neighbours(index: int, grid: tuple[int, int], radius: int) -> np.ndarray:
    h, w = grid
    i, j = divmod(index, w)
    rows = np.arange(max(i - radius, 0), min(i + radius, h - 1) + 1)
    cols = np.arange(max(j - radius, 0), min(j + radius, w - 1) + 1)
    return (rows[:, None] * w + cols[None, :]).ravel()


def top_matches(
    point_to_point: np.ndarray,
    grid_query: tuple[int, int],
    grid_reference: tuple[int, int],
    shape_query: tuple[int, int],
    shape_reference: tuple[int, int],
    n: int = 10,
    radius: int = 1,
) -> list[dict]:
    """Up to ``n`` matches, strongest first: dicts with ``query_xy`` and ``reference_xy`` (pixel
    centres of the matched cells in the original images), ``query_cell`` and
    ``reference_cell`` (``(i, j)`` on each grid) and ``score`` (the entry of the tensor, a share
    of the cosine similarity)."""
    if n < 0 or radius < 0:
        raise ValueError("n and radius must be non-negative")
    work = np.array(point_to_point, dtype=np.float64, copy=True)
    nr = work.shape[1]
    found = []
    for _ in range(n):
        flat = int(np.argmax(work))
        score = work.flat[flat]
        if not score > 0:
            break
        a, b = divmod(flat, nr)
        (qi, qj), (ri, rj) = divmod(a, grid_query[1]), divmod(b, grid_reference[1])
        found.append(
            {
                "query_xy": (
                    grid_to_pixel(qj, shape_query[1], grid_query[1]),
                    grid_to_pixel(qi, shape_query[0], grid_query[0]),
                ),
                "reference_xy": (
                    grid_to_pixel(rj, shape_reference[1], grid_reference[1]),
                    grid_to_pixel(ri, shape_reference[0], grid_reference[0]),
                ),
                "query_cell": (qi, qj),
                "reference_cell": (ri, rj),
                "score": float(score),
            }
        )
        work[_neighbours(a, grid_query, radius), :] = -np.inf
        work[:, _neighbours(b, grid_reference, radius)] = -np.inf
    return found


def match_totals(point_to_point: np.ndarray) -> tuple[float, float]:
    """``(positive, negative)``: the sums of the positive and of the negative entries of the
    point-to-point tensor (Eq. 3); ``positive + negative`` is its total."""
    p = np.asarray(point_to_point, dtype=np.float64)
    return float(p[p > 0].sum()), float(p[p < 0].sum())


def match_shares(matches: list[dict], point_to_point: np.ndarray) -> list[float]:
    """Each match's score as a share of the tensor's positive total (issue 42 item 8): the
    shares of all positive cell pairs add up to 1, so the top matches' shares never pass 100 %,
    however much negative terms cancel (as a share of the similarity they did: 93.5 % + 72.6 % …
    when +13.25 of positive terms cancelled against −12.49 for a similarity of 0.807)."""
    positive, _ = match_totals(point_to_point)
    return [float(m["score"]) / positive if positive > 0 else float("nan") for m in matches]


def match_shares_text(matches: list[dict], point_to_point: np.ndarray, similarity: float) -> str:
    """The one wording of the top matches' shares, for the report, the figures and the pair
    view's Matches read-out: what each share is of, with the positive and negative totals."""
    if not matches:
        return "No match (no cell pair contributes positively)"
    positive, negative = match_totals(point_to_point)
    shares = ", ".join(f"{k + 1}: {s:.1%}" for k, s in enumerate(match_shares(matches, point_to_point)))
    return (f"Top {len(matches)} matches, each as a share of the positive cell-pair total {positive:+.4g} "
            f"(negative {negative:+.4g}, similarity {similarity:+.4g}): {shares}")
